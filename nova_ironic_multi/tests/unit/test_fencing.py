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
"""takeover = fenced: a forced down host's instances move, exactly once."""

from __future__ import annotations

import datetime
from typing import Any
from unittest import mock
import uuid as uuidlib

from nova.compute import rpcapi as compute_rpcapi
from nova.compute import task_states
from nova import context as nova_context
from nova import exception
from nova import objects
import oslo_messaging
from oslo_utils import timeutils

from nova_ironic_multi.division import sharding
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.ironic import states
from nova_ironic_multi import rings
from nova_ironic_multi.tests.unit import base

HOSTS = ('host1', 'host2', 'host3')
LIVE = ('host1', 'host3')


def zone(ctxt: nova_context.RequestContext, name: str, *hosts: str) -> None:
    """Put ``hosts`` in availability zone ``name``."""
    agg = objects.Aggregate(ctxt, name='agg-' + name,
                            metadata={'availability_zone': name})
    agg.create()
    for host in hosts:
        agg.add_host(host)


def _fixed(name: str) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, 'nim-fencing-' + name))


class FencedCase(base.DriverTestCase):
    """host1, host2 and host3 with ``takeover = fenced``."""

    def setUp(self) -> None:
        super().setUp()
        self.flags(takeover='fenced', group='ironic_multi')
        for host in HOSTS:
            self.make_service(host)
        # Fixed UUIDs: the ring's division the tests rely on (both
        # survivors get some of host2's nodes) is the same in every run.
        self.node_ids = [self.ironic.add_node(_fixed('node-%d' % i))
                         for i in range(30)]
        self.drivers = self.fleet_drivers(HOSTS)
        self.period()

    def period(self, hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        return {h: set(self.drivers[h].get_available_nodes()) for h in hosts}

    def deployed(self, host: str, **fields: object) -> tuple[str, str]:
        """An instance of ``host`` on a node (active in Ironic)."""
        node = next(n for n in self.node_ids
                    if self.ironic.nodes[n].get('instance_uuid') is None)
        inst = self.make_instance(host=host, node=node, compute_id=1,
                                  **fields)
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        return inst.uuid, node

    def fence(self, host: str, forced_down: bool = True) -> None:
        svc = objects.Service.get_by_compute_host(self.ctxt, host)
        svc.forced_down = forced_down
        svc.save()

    def instance(self, uuid: str) -> objects.Instance:
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        return objects.Instance.get_by_uuid(ctxt, uuid)

    @staticmethod
    def ring_host(node: str) -> str:
        return str(rings.load('compatible', LIVE, 5).assign([node])[node])


class FencedTakeoverTest(FencedCase):

    def test_fenced_host_instances_go_to_the_ring_host(self) -> None:
        placed = [self.deployed('host2') for _ in range(6)]
        self.assertTrue(all(n in self.period()['host2'] for _, n in placed))
        self.fence('host2')
        taken = base.metric('takeovers_total')
        with self.assertLogs(
                'nova_ironic_multi.hosts', 'WARNING') as logs:
            reported = self.period(LIVE)
        self.assertEqual(taken + len(placed), base.metric('takeovers_total'))
        # Both survivors act: the ring spreads the nodes over them.
        self.assertEqual(set(LIVE), {self.ring_host(n) for _, n in placed})
        for uuid, node in placed:
            new = self.ring_host(node)
            self.assertEqual(new, self.instance(uuid).host)
            self.assertIsNone(self.instance(uuid).task_state)
            self.assertIn(node, reported[new])
            self.assertIn(uuid, self.drivers[new].list_instance_uuids())
        # Exactly one takeover per node, each naming node, instance, host.
        self.assertEqual(len(placed), len(logs.records))
        for uuid, node in placed:
            (line,) = [r.getMessage() for r in logs.records
                       if node in r.getMessage()]
            self.assertIn(uuid, line)
            self.assertIn('from host2', line)
            self.assertIn('forced down', line)
        # Nothing moves twice, nothing flaps.
        again = self.period(LIVE)
        self.assertEqual(reported, again)

    def test_a_failing_takeover_never_fails_the_period(self) -> None:
        uuid, node = self.deployed('host2')
        self.fence('host2')
        with mock.patch.object(takeover, 'fenced_hosts',
                               side_effect=RuntimeError('bug')):
            with self.assertLogs('nova_ironic_multi.period',
                                 'ERROR') as logs:
                reported = self.period(LIVE)
        self.assertIn('fenced hosts failed', logs.output[0])
        self.assertEqual('host2', self.instance(uuid).host)
        self.assertTrue(reported['host1'] and reported['host3'])
        # The next period tries again.
        self.assertIn(node, self.period(LIVE)[self.ring_host(node)])

    def test_merely_down_is_not_a_fence(self) -> None:
        uuid, node = self.deployed('host2')
        svc = objects.Service.get_by_compute_host(self.ctxt, 'host2')
        svc.last_seen_up = timeutils.utcnow() - datetime.timedelta(hours=1)
        svc.save()
        reported = self.period(LIVE)
        self.assertEqual('host2', self.instance(uuid).host)
        self.assertNotIn(node, reported['host1'] | reported['host3'])

    def test_manual_moves_nothing(self) -> None:
        self.flags(takeover='manual', group='ironic_multi')
        uuid, node = self.deployed('host2')
        self.fence('host2')
        reported = self.period(LIVE)
        self.assertEqual('host2', self.instance(uuid).host)
        self.assertNotIn(node, reported['host1'] | reported['host3'])

    def test_manual_is_the_default(self) -> None:
        base.CONF.clear_override('takeover', group='ironic_multi')
        self.assertEqual('manual', base.CONF.ironic_multi.takeover)
        uuid, node = self.deployed('host2')
        self.fence('host2')
        reported = self.period(LIVE)
        self.assertEqual('host2', self.instance(uuid).host)
        self.assertNotIn(node, reported['host1'] | reported['host3'])

    def test_orphan_moves_with_its_node(self) -> None:
        # Deleted in nova while host2 was down: the node still carries it.
        uuid, node = self.deployed('host2')
        self.instance(uuid).destroy()
        self.fence('host2')
        new = self.ring_host(node)
        reported = self.period(LIVE)
        self.assertEqual(new, self.instance(uuid).host)
        self.assertIn(node, reported[new])
        # Listed, so nova's reaper of running deleted instances acts.
        self.assertIn(uuid, self.drivers[new].list_instance_uuids())
        self.assertIn(uuid, self.drivers[new].list_instance_uuids())
        self.assertEqual(reported, self.period(LIVE))

    def test_each_takeover_is_an_instance_action(self) -> None:
        uuid, node = self.deployed('host2')
        self.fence('host2')
        self.period(LIVE)
        (action,) = objects.InstanceActionList.get_by_instance_uuid(
            self.ctxt, uuid)
        self.assertEqual('takeover', action.action)
        (event,) = objects.InstanceActionEventList.get_by_action(
            self.ctxt, action.id)
        self.assertEqual(('takeover_from_host2', self.ring_host(node),
                          'Success'),
                         (event.event, event.host, event.result))

    def test_a_reboot_the_node_finished_is_cleared(self) -> None:
        uuid, node = self.deployed('host2',
                                   task_state=task_states.REBOOTING)
        self.ironic.nodes[node]['power_state'] = states.POWER_ON
        self.fence('host2')
        self.period(LIVE)
        inst = self.instance(uuid)
        self.assertEqual((self.ring_host(node), None, 'active'),
                         (inst.host, inst.task_state, inst.vm_state))

    def test_an_interrupted_build_is_an_error_and_deploys_nothing(
            self) -> None:
        uuid, node = self.deployed('host2', vm_state='building',
                                   task_state=task_states.SPAWNING)
        self.ironic.nodes[node].update(provision_state=states.DEPLOYING,
                                       target_provision_state=states.ACTIVE)
        self.fence('host2')
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            reported = self.period(LIVE)
        inst = self.instance(uuid)
        new = self.ring_host(node)
        self.assertEqual((new, None, 'error'),
                         (inst.host, inst.task_state, inst.vm_state))
        # The node Ironic is deploying stays with the instance, on its new
        # host: deleting the server tears it down.
        self.assertIn(node, reported[new])
        self.assertEqual(states.DEPLOYING,
                         self.ironic.nodes[node]['provision_state'])
        self.assertEqual([], rpc.mock_calls)
        # The user sees why (server show's fault): the fence, both hosts.
        self.assertEqual(
            'Its build was interrupted: nova-compute on host2 was fenced '
            '(forced down), and %s took the server over' % new,
            self.fault(uuid))

    def fault(self, uuid: str) -> str | None:
        """The latest fault's message, as ``server show`` gives it."""
        faults = objects.InstanceFaultList.get_latest_by_instance_uuids(
            self.ctxt, [uuid])
        return faults[0].message if len(faults) else None

    def test_a_build_with_no_node_reserved_yet_moves_too(self) -> None:
        # host2 claimed a node for it and died before reserving it.
        node = self.node_ids[-1]
        self.assertIsNone(self.ironic.nodes[node]['instance_uuid'])
        inst = self.make_instance(host='host2', node=node, compute_id=1,
                                  vm_state='building',
                                  task_state=task_states.SPAWNING)
        self.fence('host2')
        reported = self.period(LIVE)
        got = self.instance(inst.uuid)
        new = self.ring_host(node)
        self.assertEqual((new, 'error', None),
                         (got.host, got.vm_state, got.task_state))
        self.assertIn('host2 was fenced', self.fault(inst.uuid) or '')
        self.assertIn(node, reported[new])
        self.assertIsNone(self.ironic.nodes[node]['instance_uuid'])

    def test_unfinished_actions_are_done_again_by_the_new_host(
            self) -> None:
        deleting, n1 = self.deployed('host2',
                                     task_state=task_states.DELETING)
        stopping, n2 = self.deployed('host2',
                                     task_state=task_states.POWERING_OFF)
        starting, n3 = self.deployed('host2', vm_state='stopped',
                                     task_state=task_states.POWERING_ON)
        rebooting, n4 = self.deployed('host2',
                                      task_state=task_states.REBOOTING)
        soft_deleting, n5 = self.deployed(
            'host2', task_state=task_states.SOFT_DELETING)
        restoring, n6 = self.deployed('host2', vm_state='soft-delete',
                                      task_state=task_states.RESTORING)
        self.fence('host2')
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(LIVE)
        api = rpc.return_value
        done = {c.args[1].uuid: (name, c.args[1].host, c.args[0].request_id)
                for name, c in [(c[0], c) for c in api.mock_calls]}
        self.assertEqual(
            {'terminate_instance': deleting, 'stop_instance': stopping,
             'start_instance': starting, 'reboot_instance': rebooting,
             'soft_delete_instance': soft_deleting,
             'restore_instance': restoring},
            {v[0]: k for k, v in done.items()})
        for uuid, node in ((deleting, n1), (stopping, n2), (starting, n3),
                           (rebooting, n4), (soft_deleting, n5),
                           (restoring, n6)):
            name, host, request_id = done[uuid]
            # Cast to the new host, under the takeover's instance action.
            self.assertEqual(self.ring_host(node), host)
            action = objects.InstanceAction.get_by_request_id(
                self.ctxt, uuid, request_id)
            self.assertEqual('takeover', action.action)
        # Powered off, a soft reboot is done again hard.
        self.assertEqual('HARD', api.reboot_instance.call_args.kwargs[
            'reboot_type'])
        self.assertEqual(task_states.REBOOT_PENDING_HARD,
                         self.instance(rebooting).task_state)
        # Once: the next period casts nothing more.
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(LIVE)
        self.assertEqual([], rpc.mock_calls)

    def test_a_power_change_ironic_is_making_is_waited_for(self) -> None:
        uuid, node = self.deployed('host2',
                                   task_state=task_states.REBOOTING_HARD)
        self.ironic.nodes[node]['target_power_state'] = states.POWER_ON
        self.fence('host2')
        self.period(LIVE)
        self.assertEqual(task_states.REBOOTING_HARD,
                         self.instance(uuid).task_state)
        # Ironic finished the reboot: nothing is done again.
        self.ironic.nodes[node].update(power_state=states.POWER_ON,
                                       target_power_state=None)
        with mock.patch.object(compute_rpcapi, 'ComputeAPI') as rpc:
            self.period(LIVE)
        self.assertEqual([], rpc.mock_calls)
        inst = self.instance(uuid)
        self.assertEqual((None, 'active'), (inst.task_state, inst.vm_state))

    def test_a_failing_recovery_is_tried_again_next_period(self) -> None:
        uuid, node = self.deployed('host2', vm_state='building',
                                   task_state=task_states.SPAWNING)
        self.fence('host2')
        real = recovery.Recovery._recover

        def unreadable(rec: recovery.Recovery, *args: Any) -> Any:
            with mock.patch.object(objects.Instance, 'get_by_uuid',
                                   side_effect=exception.NovaException('db')):
                return real(rec, *args)

        with mock.patch.object(recovery.Recovery, '_recover', unreadable):
            with self.assertLogs('nova_ironic_multi.hosts.recovery',
                                 'WARNING') as logs:
                self.period(LIVE)
        self.assertIn('the next period tries again', logs.output[0])
        self.assertEqual(task_states.SPAWNING,
                         self.instance(uuid).task_state)
        # The fault cannot be written: no ERROR without it, tried again.
        with mock.patch.object(objects.InstanceFault, 'create',
                               side_effect=exception.NovaException('db')):
            with self.assertLogs(
                    'nova_ironic_multi.hosts.recovery', 'WARNING'):
                self.period(LIVE)
        self.assertEqual((task_states.SPAWNING, None),
                         (self.instance(uuid).task_state, self.fault(uuid)))
        self.period(LIVE)
        self.assertEqual('error', self.instance(uuid).vm_state)
        self.assertIn('host2 was fenced', self.fault(uuid) or '')

    def test_requests_queued_for_the_fenced_host_act_on_nothing(
            self) -> None:
        uuid, node = self.deployed('host2')
        self.ironic.nodes[node]['power_state'] = states.POWER_ON
        # The instance as nova's API sent it to host2 while it was dead.
        stale = self.instance(uuid)
        self.fence('host2')
        self.period(LIVE)
        self.fence('host2', forced_down=False)
        self.period()
        driver2 = self.drivers['host2']
        for act in (lambda: driver2.power_off(stale),
                    lambda: driver2.power_on(self.ctxt, stale, None),
                    lambda: driver2.reboot(self.ctxt, stale, None, 'HARD'),
                    lambda: driver2.unrescue(self.ctxt, stale),
                    lambda: driver2.rescue(self.ctxt, stale, None, None,
                                           'pw', None, None)):
            with self.assertLogs(
                    'nova_ironic_multi.hosts', 'WARNING'):
                # Preempted: nova's manager then reverts no task state.
                self.assertRaises(exception.UnexpectedTaskStateError, act)
        self.assertEqual(states.POWER_ON,
                         self.ironic.nodes[node]['power_state'])
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[node]['provision_state'])
        # Its new host acts.
        self.drivers[self.ring_host(node)].power_off(self.instance(uuid))
        self.assertEqual(states.POWER_OFF,
                         self.ironic.nodes[node]['power_state'])

    def test_the_fenced_host_returns_and_keeps_off(self) -> None:
        placed = [self.deployed('host2') for _ in range(4)]
        self.fence('host2')
        taken = self.period(LIVE)
        self.fence('host2', forced_down=False)
        back = self.period()
        nodes = {n for _, n in placed}
        self.assertFalse(nodes & back['host2'])
        self.assertFalse({u for u, _ in placed} &
                         set(self.drivers['host2'].list_instance_uuids()))
        for uuid, node in placed:
            self.assertEqual(self.ring_host(node), self.instance(uuid).host)
            self.assertIn(node, back[self.ring_host(node)])
        self.assertTrue(nodes <= taken['host1'] | taken['host3'])


class ZoneFencedTakeoverTest(FencedCase):
    """A fenced host's instances never change availability zone."""

    def test_only_a_peer_of_the_fenced_host_zone_takes_over(self) -> None:
        zone(self.ctxt, 'az-a', 'host2', 'host3')
        zone(self.ctxt, 'az-b', 'host1')
        # Nodes the ring of both survivors gives host1, and host3.
        placed = []
        for survivor in LIVE:
            for node in [n for n in self.node_ids
                         if self.ring_host(n) == survivor][:3]:
                inst = self.make_instance(host='host2', node=node,
                                          compute_id=1)
                self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                               provision_state=states.ACTIVE)
                placed.append((inst.uuid, node))
        self.assertEqual(6, len(placed))
        self.fence('host2')
        reported = self.period(LIVE)
        # host3, the one peer of host2's zone, takes every one of them.
        self.assertEqual({'host3'}, {self.instance(u).host
                                     for u, _ in placed})
        self.assertTrue({n for _, n in placed} <= reported['host3'])
        self.assertFalse({n for _, n in placed} & reported['host1'])
        # Settled: the next period moves nothing back.
        self.assertEqual(reported, self.period(LIVE))

    def test_no_peer_of_the_zone_moves_nothing(self) -> None:
        zone(self.ctxt, 'az-a', 'host2')
        uuid, node = self.deployed('host2')
        self.fence('host2')
        reported = self.period(LIVE)
        self.assertEqual('host2', self.instance(uuid).host)
        self.assertFalse(node in reported['host1'] | reported['host3'])


class ClaimTest(base.DriverTestCase):
    """The compare-and-swap itself: one winner, the loser does nothing."""

    FENCED = frozenset({'host2'})
    MEMBERS = frozenset({'host1', 'host3'})

    def setUp(self) -> None:
        super().setUp()
        self.uuid = self.make_instance(host='host2').uuid

    def read(self) -> objects.Instance:
        return objects.Instance.get_by_uuid(self.ctxt, self.uuid)

    def test_second_peer_with_the_same_read_does_nothing(self) -> None:
        # Both peers read the instance before either writes.
        seen1, seen3 = self.read(), self.read()
        self.assertTrue(takeover.move(seen1, 'host1', self.FENCED,
                                     self.MEMBERS))
        self.assertFalse(takeover.move(seen3, 'host3', self.FENCED,
                                      self.MEMBERS))
        inst = self.read()
        self.assertEqual('host1', inst.host)
        self.assertIsNone(inst.task_state)

    def written(self) -> Any:
        """Patch Instance.save; the task states it writes, in order."""
        real = objects.Instance.save
        writes: list[Any] = []

        def save(inst: objects.Instance, *args: Any, **kwargs: Any) -> None:
            writes.append((inst.host, inst.task_state))
            real(inst, *args, **kwargs)

        return writes, mock.patch.object(objects.Instance, 'save', save)

    def test_a_stale_read_after_the_winners_move_writes_nothing(
            self) -> None:
        # Regression: host3 read the instance in its period; host1 then
        # moved it and put its task state (None) back; host3's claim,
        # compared with that same None, succeeded: two writes, and nova's
        # API refused the instance's actions in between.
        seen3 = self.read()
        self.assertTrue(takeover.move(self.read(), 'host1', self.FENCED,
                                     self.MEMBERS))
        writes, patch = self.written()
        with patch:
            self.assertFalse(takeover.move(seen3, 'host3', self.FENCED,
                                          self.MEMBERS))
        self.assertEqual([], writes)
        inst = self.read()
        self.assertEqual(('host1', None), (inst.host, inst.task_state))

    def test_a_move_between_the_fresh_read_and_the_claim_is_kept(
            self) -> None:
        # The residual window: host1's whole move lands after host3's
        # fresh read. host3's claim succeeds, sees the new host and gives
        # the claim back: the instance keeps host1.
        real = objects.Instance.refresh
        raced: list[bool] = []

        def refresh(inst: objects.Instance, *args: Any, **kwargs: Any
                    ) -> None:
            real(inst, *args, **kwargs)
            if not raced:
                raced.append(False)
                raced[0] = takeover.move(self.read(), 'host1',
                                        self.FENCED, self.MEMBERS)

        writes, patch = self.written()
        with mock.patch.object(objects.Instance, 'refresh', refresh), patch:
            self.assertFalse(takeover.move(self.read(), 'host3',
                                          self.FENCED, self.MEMBERS))
        inst = self.read()
        self.assertEqual(('host1', None), (inst.host, inst.task_state))
        # host1's two writes, then host3's claim and its give-back.
        self.assertEqual([('host2', takeover.claim_state('host1', None)),
                          ('host1', None),
                          ('host2', takeover.claim_state('host3', None)),
                          ('host1', None)], writes)
        self.assertEqual([True], raced)

    def claimed_after_refresh(self, task_state: str) -> Any:
        """Patch Instance.refresh: ``task_state`` is written right after
        the first fresh read (another writer between it and the claim).
        """
        real = objects.Instance.refresh
        done: list[bool] = []

        def refresh(inst: objects.Instance, *args: Any, **kwargs: Any
                    ) -> None:
            real(inst, *args, **kwargs)
            if not done:
                done.append(True)
                other = self.read()
                other.task_state = task_state
                other.save()

        return mock.patch.object(objects.Instance, 'refresh', refresh)

    def test_a_claim_under_way_makes_the_other_peer_lose(self) -> None:
        seen3 = self.read()
        # host1 claimed between host3's read and host3's write: the fresh
        # read sees it (the task state changed since host3's read) ...
        held = self.read()
        held.task_state = takeover.claim_state('host1', None)
        held.save()
        self.assertRaises(exception.InstanceUpdateConflict, takeover.move,
                          seen3, 'host3', self.FENCED, self.MEMBERS)
        # ... and so does the claim, when host1's claim lands after it.
        held.task_state = None
        held.save()
        with self.claimed_after_refresh(takeover.claim_state('host1', None)):
            self.assertRaises(exception.InstanceUpdateConflict,
                              takeover.move, self.read(), 'host3',
                              self.FENCED, self.MEMBERS)
        # A fresh read sees the live claimer and keeps off.
        self.assertFalse(takeover.move(self.read(), 'host3', self.FENCED,
                                      self.MEMBERS))
        inst = self.read()
        self.assertEqual('host2', inst.host)
        self.assertEqual(takeover.claim_state('host1', None), inst.task_state)
        # The claimer finishes its own claim.
        self.assertTrue(takeover.move(inst, 'host1', self.FENCED,
                                     self.MEMBERS))
        self.assertEqual(('host1', None),
                         (self.read().host, self.read().task_state))

    def test_a_dead_claimers_claim_is_finished_by_a_live_peer(self) -> None:
        held = self.read()
        held.task_state = takeover.claim_state('host4',
                                              task_states.POWERING_OFF)
        held.save()
        self.assertTrue(takeover.move(self.read(), 'host3', self.FENCED,
                                     self.MEMBERS))
        inst = self.read()
        self.assertEqual(('host3', task_states.POWERING_OFF),
                         (inst.host, inst.task_state))

    def test_an_api_action_first_makes_the_peer_lose(self) -> None:
        seen = self.read()
        other = self.read()
        other.task_state = task_states.DELETING
        other.save(expected_task_state=[None])
        self.assertRaises(exception.InstanceUpdateConflict, takeover.move,
                          seen, 'host1', self.FENCED, self.MEMBERS)
        self.assertEqual('host2', self.read().host)
        # The same when nova's API writes between the fresh read and the
        # claim.
        other = self.read()
        other.task_state = None
        other.save()
        with self.claimed_after_refresh(task_states.REBOOTING):
            self.assertRaises(exception.InstanceUpdateConflict,
                              takeover.move, self.read(), 'host1',
                              self.FENCED, self.MEMBERS)
        self.assertEqual(('host2', task_states.REBOOTING),
                         (self.read().host, self.read().task_state))


    def cut_off(self, claimer: str, to: str | None = None) -> None:
        """A move by ``claimer`` whose second write never lands."""
        real = objects.Instance.save
        calls = []

        def save(inst: objects.Instance, *args: Any, **kwargs: Any) -> None:
            calls.append(inst.task_state)
            if len(calls) == 2:
                raise oslo_messaging.MessagingTimeout('conductor')
            real(inst, *args, **kwargs)

        with mock.patch.object(objects.Instance, 'save', save):
            self.assertRaises(oslo_messaging.MessagingTimeout, takeover.move,
                              self.read(), claimer, self.FENCED,
                              self.MEMBERS, to=to)
        self.assertEqual(('host2', takeover.claim_state(claimer, None)),
                         (self.read().host, self.read().task_state))

    def later(self, seconds: float) -> Any:
        now = timeutils.utcnow() + datetime.timedelta(seconds=seconds)
        return mock.patch.object(timeutils, 'utcnow', return_value=now)

    def test_a_live_claimers_abandoned_claim_is_finished_by_a_peer(
            self) -> None:
        # Regression: host1's second write was cut off and host1 lives on;
        # the claim stayed, and nova's API refused every action but delete.
        self.cut_off('host1')
        # Young: host1's move may be under way.
        self.assertFalse(takeover.move(self.read(), 'host3', self.FENCED,
                                      self.MEMBERS))
        with self.later(takeover.CLAIM_BOUND + 1):
            self.assertTrue(takeover.move(self.read(), 'host3', self.FENCED,
                                         self.MEMBERS))
        self.assertEqual(('host3', None),
                         (self.read().host, self.read().task_state))

    def test_a_claim_left_on_a_hosts_own_instance_is_given_back(
            self) -> None:
        # A drain (host2 hands its own instance to host1) cut off between
        # its writes: nobody takes a drained host's instances over, so the
        # claim would stay for ever. host2's next start gives it back.
        self.cut_off('host2', to='host1')
        with self.assertLogs(
                'nova_ironic_multi.hosts', 'WARNING') as logs:
            self.assertEqual([self.uuid], takeover.release_claims('host2'))
        self.assertEqual(('host2', None),
                         (self.read().host, self.read().task_state))
        self.assertIn('a move by host2 was cut off', logs.output[0])

    def test_a_peers_young_claim_is_its_move_under_way(self) -> None:
        self.cut_off('host1')
        self.assertEqual([], takeover.release_claims('host2'))
        with self.later(takeover.CLAIM_BOUND + 1):
            self.assertEqual([self.uuid], takeover.release_claims('host2'))
        self.assertIsNone(self.read().task_state)

    def test_every_few_periods_a_host_gives_back_its_claims(self) -> None:
        inst = self.make_instance(host=self.HOST)
        inst.task_state = takeover.claim_state(self.HOST,
                                              task_states.REBOOTING)
        inst.save()
        for _ in range(takeover.RELEASE_EVERY):
            self.driver.get_available_nodes()
        got = objects.Instance.get_by_uuid(self.ctxt, inst.uuid)
        self.assertEqual(task_states.REBOOTING, got.task_state)


class ShardFencedTakeoverTest(base.DriverTestCase):
    """The same with ``divide = shards``: the node goes with its shard."""

    def setUp(self) -> None:
        super().setUp()
        self.flags(takeover='fenced', divide='shards', group='ironic_multi')
        for host in HOSTS:
            self.make_service(host)
        # Fixed UUIDs: the division the test relies on (host2 holding
        # nodes of a shard and nodes without one) is the same in every run;
        # random ones left host2 without a shard now and then.
        self.sharded = [self.ironic.add_node(_fixed('shard-%d' % i),
                                             shard='rack-%d' % (i % 6))
                        for i in range(24)]
        self.unsharded = [self.ironic.add_node(_fixed('free-%d' % i))
                          for i in range(12)]
        self.drivers = self.fleet_drivers(HOSTS)
        self.period()

    def period(self, hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        return {h: set(self.drivers[h].get_available_nodes()) for h in hosts}

    def expected_host(self, node: str) -> str:
        ring = rings.load('compatible', LIVE, 5)
        shard = self.ironic.nodes[node].get('shard')
        if shard is None:
            return str(ring.assign([node])[node])
        return str(sharding.assign(ring, self.ironic.shards(),
                                   weighted=False)[shard])

    def fence_host2_with_instances_on(
            self, nodes: list[str]) -> dict[str, str]:
        """host2's instances on ``nodes``, then host2 forced down.

        :returns: instance UUID -> node.
        """
        placed = {}
        for node in nodes:
            inst = self.make_instance(host='host2', node=node, compute_id=1)
            self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                           provision_state=states.ACTIVE)
            placed[inst.uuid] = node
        svc = objects.Service.get_by_compute_host(self.ctxt, 'host2')
        svc.forced_down = True
        svc.save()
        return placed

    def test_fenced_host_instances_go_with_their_shards(self) -> None:
        before = self.period()
        mine = sorted(before['host2'])
        picks = ([n for n in mine if n in self.sharded][:3] +
                 [n for n in mine if n in self.unsharded][:1])
        self.assertEqual(4, len(picks))
        placed = self.fence_host2_with_instances_on(picks)
        reported = self.period(LIVE)
        for uuid, node in placed.items():
            new = self.expected_host(node)
            self.assertEqual(new, objects.Instance.get_by_uuid(
                self.ctxt, uuid).host)
            self.assertIn(node, reported[new])
            self.assertNotIn(node, reported[({'host1', 'host3'} -
                                             {new}).pop()])
        self.assertEqual(reported, self.period(LIVE))

    def test_only_a_peer_of_the_zone_takes_over_whatever_the_shard(
            self) -> None:
        zone(self.ctxt, 'az-a', 'host2', 'host3')
        zone(self.ctxt, 'az-b', 'host1')
        # host2's instances on nodes of a shard the survivors' ring gives
        # host1, of one it gives host3 (host3 lists no shard of host1's),
        # and without a shard.
        picks = ([n for n in self.sharded
                  if self.expected_host(n) == 'host1'][:2] +
                 [n for n in self.sharded
                  if self.expected_host(n) == 'host3'][:1] +
                 [n for n in self.unsharded
                  if self.expected_host(n) == 'host1'][:1])
        self.assertEqual(4, len(picks))
        placed = self.fence_host2_with_instances_on(picks)
        reported = self.period(LIVE)
        self.assertEqual({'host3'}, {objects.Instance.get_by_uuid(
            self.ctxt, u).host for u in placed})
        self.assertTrue(set(picks) <= reported['host3'])
        self.assertFalse(set(picks) & reported['host1'])
        self.assertEqual(reported, self.period(LIVE))
