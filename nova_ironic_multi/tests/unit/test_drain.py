# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""drain_on_stop: a host that stops hands its instances to its peers."""

from __future__ import annotations

import os
import signal
import threading
from unittest import mock
import uuid as uuidlib

from nova.compute import rpcapi as compute_rpcapi
from nova.compute import task_states
from nova.compute import vm_states
from nova import conf as nova_conf
from nova import context as nova_context
from nova import objects
from oslo_service import _options as service_options

from nova_ironic_multi import compat
from nova_ironic_multi.division import sharding
from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.ironic import states
from nova_ironic_multi.period import orphans
from nova_ironic_multi import rings
from nova_ironic_multi.service import signals
from nova_ironic_multi.tests.unit import base

HOSTS = ('host1', 'host2', 'host3')
PEERS = ('host1', 'host2')


def nova_stop_defaults(case: base.DriverTestCase) -> None:
    """nova's default stop times (its test fixture sets 0: no time).

    nova 32 (2025.2) has no manager_shutdown_timeout.
    """
    if 'manager_shutdown_timeout' in nova_conf.CONF:
        case.flags(manager_shutdown_timeout=160)


class DrainTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(drain_on_stop=True, group='ironic_multi')
        nova_stop_defaults(self)
        for host in HOSTS:
            self.make_service(host)
        # Fixed UUIDs: the ring's division, which the tests rely on (enough
        # nodes for host3, going to both peers without it), is the same in
        # every run.
        self.node_ids = [self.ironic.add_node(
            str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, 'nim-drain-%d' % i)))
            for i in range(30)]
        self.drivers = self.fleet_drivers(HOSTS)
        self.period()

    def period(self, hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        return {h: set(self.drivers[h].get_available_nodes()) for h in hosts}

    def deployed(self, host: str, **fields: object) -> tuple[str, str]:
        """An instance of ``host`` on one of its nodes (active in Ironic)."""
        share = self.drivers[host].get_available_nodes()
        node = next(n for n in share
                    if self.ironic.nodes[n].get('instance_uuid') is None)
        inst = self.make_instance(host=host, node=node, compute_id=1,
                                  **fields)
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        return inst.uuid, node

    def instance(self, uuid: str) -> objects.Instance:
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        return objects.Instance.get_by_uuid(ctxt, uuid)

    def service(self, host: str) -> objects.Service:
        return objects.Service.get_by_compute_host(self.ctxt, host)

    @staticmethod
    def ring_host(node: str, peers: tuple[str, ...] = PEERS) -> str:
        return str(rings.load('compatible', peers, 5).assign([node])[node])

    def placed_over_both_peers(self, count: int) -> list[tuple[str, str]]:
        placed = [self.deployed('host3') for _ in range(count)]
        self.assertEqual(set(PEERS), {self.ring_host(n) for _, n in placed})
        return placed

    def test_stop_hands_each_instance_to_the_ring_host(self) -> None:
        placed = self.placed_over_both_peers(6)
        before = self.period()
        handed = base.metric('handovers_total')
        done = base.metric('drains_total', result='done')
        with self.assertLogs('nova_ironic_multi.hosts.drain', 'INFO') as logs:
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual((handed + len(placed), done + 1),
                         (base.metric('handovers_total'),
                          base.metric('drains_total', result='done')))
        svc = self.service('host3')
        self.assertTrue(svc.disabled)
        self.assertTrue(svc.disabled_reason.startswith(drain.REASON))
        for uuid, node in placed:
            inst = self.instance(uuid)
            self.assertEqual((self.ring_host(node), None),
                             (inst.host, inst.task_state))
            (line,) = [r.getMessage() for r in logs.records
                       if uuid in r.getMessage()]
            self.assertIn(node, line)
            self.assertIn('over to %s' % self.ring_host(node), line)
        # The peers' next period manages the nodes and lists the instances.
        after = self.period(PEERS)
        for uuid, node in placed:
            new = self.ring_host(node)
            self.assertIn(node, after[new])
            self.assertIn(uuid, self.drivers[new].list_instance_uuids())
        # No node managed twice, none lost: host3's free nodes went too.
        self.assertFalse(after['host1'] & after['host2'])
        self.assertEqual(before['host1'] | before['host2'] | before['host3'],
                         after['host1'] | after['host2'])

    def building(self, host: str, uuid: str) -> set[str]:
        """The builds ``host``'s process runs: ``uuid``'s is one now."""
        running = self.drivers[host]._inventory._unclaimed.held._running
        running.add(uuid)
        return running

    def test_a_build_still_running_here_is_handed_over_once_it_ends(
            self) -> None:
        # Seen in the long soak (seed 2): nova stopped waiting for the
        # operations under way at once, the drain handed over a server
        # whose build thread still ran here; its new host put it in ERROR,
        # the build here then failed to save and nova cleared its host,
        # leaving the node deployed for a server no host manages.
        uuid, node = self.deployed('host3', vm_state=vm_states.BUILDING,
                                   task_state=task_states.SPAWNING)
        running = self.building('host3', uuid)

        def build_ends() -> None:
            inst = self.instance(uuid)
            inst.vm_state, inst.task_state = vm_states.ACTIVE, None
            inst.save(expected_task_state=[task_states.SPAWNING])
            running.discard(uuid)

        timer = threading.Timer(1.0, build_ends)
        timer.start()
        self.addCleanup(timer.cancel)
        with self.assertLogs('nova_ironic_multi.hosts.drain', 'INFO') as logs:
            self.drivers['host3'].cleanup_host('host3')
        inst = self.instance(uuid)
        self.assertEqual((self.ring_host(node), vm_states.ACTIVE, None),
                         (inst.host, inst.vm_state, inst.task_state))
        self.assertIn('the build of instance %s still runs on this host'
                      % uuid, '\n'.join(logs.output))
        # Handed over as its build left it: nothing for its new host to
        # recover, no hand-over in flight recorded.
        self.assertEqual({}, recovery.handed_over(self.ctxt, inst.host,
                                                  [uuid]))

    def test_a_build_that_outlasts_the_drain_stays_here(self) -> None:
        uuid, node = self.deployed('host3', vm_state=vm_states.BUILDING,
                                   task_state=task_states.SPAWNING)
        self.building('host3', uuid)
        with mock.patch.object(drain, 'budget', return_value=(1.0, 'x')), \
                self.assertLogs('nova_ironic_multi.hosts.drain',
                                'ERROR') as logs:
            result = self.drivers['host3']._drain.run('host3')
        self.assertEqual(frozenset([uuid]), result.left)
        self.assertEqual(('host3', task_states.SPAWNING),
                         (self.instance(uuid).host,
                          self.instance(uuid).task_state))
        self.assertIn('the build of instance %s still runs on host3: not '
                      'handed over' % uuid, '\n'.join(logs.output))

    def test_orphan_goes_with_its_node_and_is_listed_for_the_reaper(
            self) -> None:
        uuid, node = self.deployed('host3')
        new = self.ring_host(node)
        # The peers have seen it as host3's live instance.
        self.period()
        # Deleted in nova while host3 was down; host3 kept it since.
        self.instance(uuid).destroy()
        self.period()
        self.drivers['host3'].cleanup_host('host3')
        self.assertEqual(new, self.instance(uuid).host)
        self.assertIn(node, self.period(PEERS)[new])
        self.assertIn(uuid, self.drivers[new].list_instance_uuids())

    def test_task_state_is_kept(self) -> None:
        uuid, node = self.deployed('host3', task_state=task_states.REBOOTING)
        self.drivers['host3'].cleanup_host('host3')
        inst = self.instance(uuid)
        self.assertEqual((self.ring_host(node), task_states.REBOOTING),
                         (inst.host, inst.task_state))

    def test_a_server_handed_over_in_flight_is_recovered_by_its_new_host(
            self) -> None:
        stopping, node = self.deployed('host3',
                                       task_state=task_states.POWERING_OFF)
        quiet, _ = self.deployed('host3')
        new = self.ring_host(node)
        self.drivers['host3'].cleanup_host('host3')
        self.assertEqual(task_states.POWERING_OFF,
                         self.instance(stopping).task_state)
        # A build scheduled to a peer meanwhile is nova's, not recovered.
        build = self.make_instance(host=new, vm_state='building',
                                   task_state=task_states.SPAWNING)
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(PEERS)
        api = rpc.return_value
        self.assertEqual(['stop_instance'], [c[0] for c in api.mock_calls])
        ctxt, inst = api.stop_instance.call_args.args
        self.assertEqual((stopping, new), (inst.uuid, inst.host))
        # Cast under the hand-over's instance action, recorded by host3.
        action = objects.InstanceAction.get_by_request_id(
            self.ctxt, stopping, ctxt.request_id)
        self.assertEqual('handover', action.action)
        self.assertEqual([], list(objects.InstanceActionList
                                  .get_by_instance_uuid(self.ctxt, quiet)))
        got = self.instance(build.uuid)
        self.assertEqual(('building', task_states.SPAWNING),
                         (got.vm_state, got.task_state))
        # Once: the next period casts nothing more.
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(PEERS)
        self.assertEqual([], rpc.mock_calls)

    def test_a_build_handed_over_is_an_error_with_its_cause(self) -> None:
        # nova stopped waiting for it (manager_shutdown_timeout).
        uuid, node = self.deployed('host3', vm_state='building',
                                   task_state=task_states.SPAWNING)
        self.ironic.nodes[node].update(provision_state=states.DEPLOYING,
                                       target_provision_state=states.ACTIVE)
        new = self.ring_host(node)
        self.drivers['host3'].cleanup_host('host3')
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(PEERS)
        self.assertEqual([], rpc.mock_calls)
        inst = self.instance(uuid)
        self.assertEqual((new, 'error', None),
                         (inst.host, inst.vm_state, inst.task_state))
        # server show's fault names the drained host and the new one.
        (fault,) = objects.InstanceFaultList.get_latest_by_instance_uuids(
            self.ctxt, [uuid])
        self.assertEqual(
            'Its build was interrupted: nova-compute on host3 stopped with '
            'drain_on_stop, and %s took the server over' % new,
            fault.message)
        # The hand-over's event names host3 (openstack server event list).
        (action,) = objects.InstanceActionList.get_by_instance_uuid(
            self.ctxt, uuid)
        (event,) = objects.InstanceActionEventList.get_by_action(
            self.ctxt, action.id)
        self.assertEqual(('handover', 'handover_from_host3', 'host3'),
                         (action.action, event.event, event.host))

    def test_off_by_default_nothing_moves(self) -> None:
        base.CONF.clear_override('drain_on_stop', group='ironic_multi')
        self.assertFalse(base.CONF.ironic_multi.drain_on_stop)
        uuid, _ = self.deployed('host3')
        self.drivers['host3'].cleanup_host('host3')
        self.assertEqual('host3', self.instance(uuid).host)
        self.assertFalse(self.service('host3').disabled)

    def test_option_read_at_stop(self) -> None:
        self.flags(drain_on_stop=False, group='ironic_multi')
        uuid, node = self.deployed('host3')
        self.flags(drain_on_stop=True, group='ironic_multi')
        self.drivers['host3'].cleanup_host('host3')
        self.assertEqual(self.ring_host(node), self.instance(uuid).host)

    def test_peer_in_another_zone_takes_nothing(self) -> None:
        agg = objects.Aggregate(self.ctxt, name='az2',
                                metadata={'availability_zone': 'az2'})
        agg.create()
        agg.add_host('host1')
        placed = self.placed_over_both_peers(6)
        self.drivers['host3'].cleanup_host('host3')
        # The ring over host2 alone.
        self.assertEqual({'host2'}, {self.instance(u).host
                                     for u, _ in placed})

    def test_an_api_action_first_is_handed_over_with_it(self) -> None:
        # nova's API deletes the server after host3 read its instances:
        # the claim loses to that write. The cast went to host3, which
        # stops, so the instance must not stay there: it is tried again,
        # as it is now, and handed over in flight for its new host to
        # finish the delete.
        uuid, node = self.deployed('host3')
        real = drain.Drain._instances

        def then_api_acts(host: str, plan: drain.Plan) -> list:
            found = real(host, plan)
            other = self.instance(uuid)
            other.task_state = task_states.DELETING
            other.save(expected_task_state=[None])
            return found

        with mock.patch.object(drain.Drain, '_instances',
                               staticmethod(then_api_acts)), \
                self.assertLogs(
                        'nova_ironic_multi.hosts.drain', 'INFO') as logs:
            self.drivers['host3'].cleanup_host('host3')
        inst = self.instance(uuid)
        self.assertEqual((self.ring_host(node), task_states.DELETING),
                         (inst.host, inst.task_state))
        self.assertIn('changed while it was handed over',
                      '\n'.join(logs.output))
        # The new host finds the hand-over as the last action: it recovers
        # the delete under it.
        self.assertEqual({uuid: mock.ANY}, recovery.handed_over(
            self.ctxt, inst.host, [uuid]))

    def test_a_peer_that_began_draining_before_the_move_gets_nothing(
            self) -> None:
        # Planned for host2; host2 disables itself (its own drain) before
        # host3 moves it: it goes to host1, the ring's host without host2.
        uuid, node = next((u, n) for u, n in (self.deployed('host3')
                                              for _ in range(6))
                          if self.ring_host(n) == 'host2')
        real = drain.Drain._instances

        def then_host2_drains(host: str, plan: drain.Plan) -> list:
            found = real(host, plan)
            drain.disable('host2')
            return found

        with mock.patch.object(drain.Drain, '_instances',
                               staticmethod(then_host2_drains)):
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual(('host1', None), (self.instance(uuid).host,
                                           self.instance(uuid).task_state))

    def test_a_peer_that_began_draining_during_the_move_hands_it_on(
            self) -> None:
        # host2 passed the check, then disabled itself and read its own
        # instances before this one arrived: host3 sees it once host2
        # holds the instance, and hands it on to host1.
        uuid, node = next((u, n) for u, n in (self.deployed('host3')
                                              for _ in range(6))
                          if self.ring_host(n) == 'host2')
        real = takeover.move
        calls = []

        def move(inst: objects.Instance, host: str, *args: object,
                 **kwargs: object) -> bool:
            done = real(inst, host, *args, **kwargs)  # type: ignore
            calls.append((inst.uuid, kwargs.get('to')))
            if inst.uuid == uuid and kwargs.get('to') == 'host2':
                drain.disable('host2')
            return done

        with mock.patch.object(takeover, 'move', move), \
                self.assertLogs(
                        'nova_ironic_multi.hosts.drain', 'WARNING') as logs:
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual([(uuid, 'host2'), (uuid, 'host1')],
                         [c for c in calls if c[0] == uuid])
        self.assertEqual(('host1', None), (self.instance(uuid).host,
                                           self.instance(uuid).task_state))
        self.assertIn('handing it on', '\n'.join(logs.output))

    def test_a_peer_taking_over_first_wins(self) -> None:
        # host3 fenced meanwhile, and host1 took the instance over after
        # host3 read it.
        uuid, node = self.deployed('host3')
        real = drain.Drain._instances

        def then_peer_takes(host: str, plan: drain.Plan) -> list:
            found = real(host, plan)
            self.assertTrue(takeover.move(self.instance(uuid), 'host1',
                                         {'host3'}, set(PEERS)))
            return found

        with mock.patch.object(drain.Drain, '_instances',
                               staticmethod(then_peer_takes)):
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual(('host1', None), (self.instance(uuid).host,
                                           self.instance(uuid).task_state))

    def test_out_of_time_leaves_the_rest_and_says_how_to_finish(
            self) -> None:
        placed = [self.deployed('host3') for _ in range(3)]
        # The time runs out during the first move.
        now = [0.0]
        real = takeover.move

        def move(*args: object, **kwargs: object) -> bool:
            done = real(*args, **kwargs)  # type: ignore[arg-type]
            now[0] = 100.0
            return done

        with mock.patch.object(drain, 'time',
                               mock.Mock(monotonic=lambda: now[0])), \
                mock.patch.object(takeover, 'move', move), \
                self.assertLogs(
                        'nova_ironic_multi.hosts.drain', 'ERROR') as logs:
            self.drivers['host3'].cleanup_host('host3')
        hosts = [self.instance(u).host for u, _ in placed]
        self.assertEqual(1, len([h for h in hosts if h != 'host3']))
        left = [u for u, _ in placed if self.instance(u).host == 'host3']
        for uuid in left:
            self.assertIn(uuid, logs.output[-1])
        self.assertIn('takeover', logs.output[-1])

    def test_no_time_at_all_moves_nothing(self) -> None:
        # Every release: the service's own bound leaves the clean-up 1 s.
        if 'graceful_shutdown_timeout' not in nova_conf.CONF:
            # nova 32: oslo.service's launcher registers it at start.
            nova_conf.CONF.register_opts(service_options.service_opts)
        self.flags(graceful_shutdown_timeout=1)
        uuid, _ = self.deployed('host3')
        with self.assertLogs('nova_ironic_multi.hosts.drain', 'ERROR') as logs:
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual('host3', self.instance(uuid).host)
        self.assertIn('graceful_shutdown_timeout = 1', logs.output[-1])

    def test_no_eligible_peer_keeps_everything(self) -> None:
        for host in PEERS:
            svc = self.service(host)
            svc.disabled = True
            svc.save()
        uuid, _ = self.deployed('host3')
        with self.assertLogs('nova_ironic_multi.hosts.drain', 'ERROR'):
            self.drivers['host3'].cleanup_host('host3')
        self.assertEqual('host3', self.instance(uuid).host)

    def test_start_enables_a_service_the_drain_disabled(self) -> None:
        self.drivers['host3'].cleanup_host('host3')
        self.assertTrue(self.service('host3').disabled)
        self.drivers['host3'].init_host('host3')
        svc = self.service('host3')
        self.assertEqual((False, None), (svc.disabled, svc.disabled_reason))

    def test_start_keeps_an_operators_disable(self) -> None:
        svc = self.service('host3')
        svc.disabled, svc.disabled_reason = True, 'hardware maintenance'
        svc.save()
        self.drivers['host3'].cleanup_host('host3')
        self.drivers['host3'].init_host('host3')
        svc = self.service('host3')
        self.assertEqual((True, 'hardware maintenance'),
                         (svc.disabled, svc.disabled_reason))


class ShardDrainTest(base.DriverTestCase):
    """``divide = shards``: a node goes to the host that lists its shard."""

    def setUp(self) -> None:
        super().setUp()
        self.flags(drain_on_stop=True, divide='shards', group='ironic_multi')
        nova_stop_defaults(self)
        for host in HOSTS:
            self.make_service(host)
        for i in range(24):
            self.ironic.add_node(shard='rack-%d' % (i % 6))
        for _ in range(12):
            self.ironic.add_node()
        self.drivers = self.fleet_drivers(HOSTS)

    def expected_host(self, node: str) -> str:
        ring = rings.load('compatible', PEERS, 5)
        shard = self.ironic.nodes[node].get('shard')
        if shard is None:
            return str(ring.assign([node])[node])
        return str(sharding.assign(ring, self.ironic.shards(),
                                   weighted=False)[shard])

    def test_instances_go_with_their_shards(self) -> None:
        mine = sorted(self.drivers['host3'].get_available_nodes())
        placed = {}
        for node in mine[:4]:
            inst = self.make_instance(host='host3', node=node, compute_id=1)
            self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                           provision_state=states.ACTIVE)
            placed[inst.uuid] = node
        self.drivers['host3'].cleanup_host('host3')
        reported = {h: set(self.drivers[h].get_available_nodes())
                    for h in PEERS}
        for uuid, node in placed.items():
            new = self.expected_host(node)
            self.assertEqual(new, objects.Instance.get_by_uuid(
                self.ctxt, uuid).host)
            self.assertIn(node, reported[new])
        self.assertFalse(reported['host1'] & reported['host2'])


class OrphanMemoryTest(base.DriverTestCase):
    """A peer's orphan may become this host's once the peer leaves."""

    def test_instances_of_a_host_that_left_are_asked_again(self) -> None:
        inst = self.make_instance(host='host3')
        found = orphans.Orphans()
        members = {'host1', 'host3'}
        self.assertEqual(orphans.NONE,
                         found.find('host1', {inst.uuid}, set(), members))
        # host3 leaves; its instance, deleted, is handed to host1.
        inst.destroy()
        inst = objects.Instance.get_by_uuid(
            nova_context.get_admin_context(read_deleted='yes'), inst.uuid)
        inst.host = 'host1'
        inst.save()
        self.assertEqual(frozenset([inst.uuid]),
                         found.find('host1', {inst.uuid}, set(),
                                    {'host1'}).orphans)

    def test_instances_of_a_member_are_not_asked_again(self) -> None:
        inst = self.make_instance(host='host3')
        found = orphans.Orphans()
        members = {'host1', 'host3'}
        found.find('host1', {inst.uuid}, set(), members)
        with mock.patch.object(objects.InstanceList,
                               'get_by_filters') as ask:
            self.assertEqual(orphans.NONE, found.find(
                'host1', {inst.uuid}, set(), members))
        ask.assert_not_called()


class Listener:
    def __init__(self) -> None:
        self.called = threading.Event()

    def _on_sigterm(self) -> None:
        self.called.set()


class SigtermTest(base.DriverTestCase):

    def test_listener_runs_then_the_handler_in_place(self) -> None:
        seen = []
        original = signal.signal(signal.SIGTERM,
                                 lambda signo, frame: seen.append(signo))
        self.addCleanup(signal.signal, signal.SIGTERM, original)
        self.useFixture(base.fixtures.MockPatchObject(signals, '_STATE',
                                                      signals._State()))
        listener = Listener()
        self.assertTrue(signals.on_sigterm(listener, handle=True))
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertTrue(listener.called.wait(10))
        self.assertEqual([signal.SIGTERM], seen)

    def test_eventlet_mode_watches_the_wakeup_pipe(self) -> None:
        # oslo.service's handler stays in place, and is replaced at will.
        seen = []
        original = signal.signal(signal.SIGTERM,
                                 lambda signo, frame: seen.append(signo))
        self.addCleanup(signal.signal, signal.SIGTERM, original)
        self.addCleanup(signal.set_wakeup_fd, signal.set_wakeup_fd(-1))
        self.useFixture(base.fixtures.MockPatchObject(signals, '_STATE',
                                                      signals._State()))
        listener = Listener()
        self.assertTrue(signals.on_sigterm(listener, handle=False))
        # As after a SIGHUP: oslo.service installs its handler again.
        signal.signal(signal.SIGTERM,
                      lambda signo, frame: seen.append(-signo))
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertTrue(listener.called.wait(10))
        self.assertEqual([-signal.SIGTERM], seen)

    def test_sighup_and_sigterm_share_the_one_wakeup_fd(self) -> None:
        # One reader for the process's one wake-up fd: the reload's SIGHUP
        # and the drain's SIGTERM both come through it.
        seen: list[int] = []
        for signo in (signal.SIGHUP, signal.SIGTERM):
            self.addCleanup(signal.signal, signo, signal.signal(
                signo, lambda signo, frame: seen.append(signo)))
        self.addCleanup(signal.set_wakeup_fd, signal.set_wakeup_fd(-1))
        self.useFixture(base.fixtures.MockPatchObject(signals, '_STATE',
                                                      signals._State()))
        hup = threading.Event()
        self.assertTrue(signals.watch(signal.SIGHUP, 'reload', hup.set))
        listener = Listener()
        self.assertTrue(signals.on_sigterm(listener, handle=False))
        os.kill(os.getpid(), signal.SIGHUP)
        self.assertTrue(hup.wait(10))
        self.assertFalse(listener.called.is_set())
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertTrue(listener.called.wait(10))
        self.assertEqual([signal.SIGHUP, signal.SIGTERM], seen)
        ours = signals._STATE.write_fd
        assert ours is not None
        self.assertEqual(ours, signal.set_wakeup_fd(ours))

    def test_eventlet_mode_leaves_a_wakeup_pipe_in_use_alone(self) -> None:
        self.useFixture(base.fixtures.MockPatchObject(signals, '_STATE',
                                                      signals._State()))
        read_fd, write_fd = os.pipe()
        self.addCleanup(os.close, read_fd)
        self.addCleanup(os.close, write_fd)
        os.set_blocking(write_fd, False)
        self.addCleanup(signal.set_wakeup_fd, signal.set_wakeup_fd(write_fd))
        self.assertFalse(signals.on_sigterm(Listener(), handle=False))
        self.assertEqual(write_fd, signal.set_wakeup_fd(write_fd))

    def test_init_host_in_eventlet_mode_watches_sigterm(self) -> None:
        with mock.patch('nova.monkey_patch.is_patched',
                        return_value=True), \
                mock.patch.object(signals, 'on_sigterm') as on_sigterm:
            self.driver.init_host('host1')
        on_sigterm.assert_called_once_with(self.driver, handle=False)

    def test_not_from_another_thread(self) -> None:
        self.useFixture(base.fixtures.MockPatchObject(signals, '_STATE',
                                                      signals._State()))
        got = []
        worker = threading.Thread(
            target=lambda: got.append(
                signals.on_sigterm(Listener(), handle=True)))
        worker.start()
        worker.join()
        self.assertEqual([False], got)

    def test_begin_disables_the_service_once(self) -> None:
        self.flags(drain_on_stop=True, group='ironic_multi')
        nova_stop_defaults(self)
        self.make_service('host1')
        self.driver._on_sigterm()
        svc = objects.Service.get_by_compute_host(self.ctxt, 'host1')
        self.assertTrue(svc.disabled)
        with mock.patch.object(drain, 'disable') as again:
            self.driver._on_sigterm()
            self.driver.cleanup_host('host1')
        again.assert_not_called()

    def test_begin_does_nothing_without_the_option(self) -> None:
        self.make_service('host1')
        self.driver._on_sigterm()
        self.assertFalse(objects.Service.get_by_compute_host(
            self.ctxt, 'host1').disabled)


def test_budget_keeps_a_margin_out_of_what_nova_leaves_cleanup() -> None:
    conf = mock.Mock(manager_shutdown_timeout=160,
                     graceful_shutdown_timeout=180)
    seconds, options = drain.budget(conf)
    assert seconds == compat.cleanup_host_seconds(conf)[0] - drain.MARGIN
    assert seconds > 0
    conf.manager_shutdown_timeout = 0
    conf.graceful_shutdown_timeout = 1
    assert drain.budget(conf)[0] == 0
