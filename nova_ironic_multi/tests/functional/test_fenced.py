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
"""takeover = fenced: a dead, fenced host's servers are manageable again.

One deployment, one fence: servers on all three hosts, host2's with one
caught mid-reboot and one deleted while host2 was down (an orphan). After
one period of the survivors each of host2's servers is rebooted, stopped,
started, rebuilt and deleted through nova's API on its new host, the
orphan is torn down, and Ironic shows each node as nova expects.

With tooz membership (a real Redis), a shorter run: host2 stopped leaves
its group, nothing moves until it is forced down, then its two servers are
on their new hosts and reboot there.

Both again with ``divide = shards``: host2's servers go to the survivors
the ring of shards names, and the same checks hold.
"""

from __future__ import annotations

import io
import json
import time
import types
from typing import Any

from nova.conf import CONF

from nova_ironic_multi.cmd import main as cli
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.ironic import states
from nova_ironic_multi import rings
from nova_ironic_multi.tests.fixtures import redis_server
from nova_ironic_multi.tests.functional import base
from nova_ironic_multi.tests.functional import test_actions

SURVIVORS = ('host1', 'host3')


class FencedCase(base.IronicCellTestCase):
    """A cell with ``takeover = fenced`` and what its tests look at."""

    # host2 gets five of them; the survivors' ring gives one to host3.
    NODES = 18

    def configure(self) -> None:
        super().configure()
        self.flags(takeover='fenced', group='ironic_multi')

    def period(self, hosts: tuple[str, ...]) -> None:
        """One resource-tracker period on each of ``hosts``."""
        with self.cell() as cctxt:
            for host in hosts:
                self.computes[host].manager.update_available_resource(cctxt)

    def setUp(self) -> None:
        super().setUp()
        for image in (test_actions.WHOLE_DISK_IMAGE,
                      test_actions.OTHER_IMAGE):
            self.glance.create(None, dict(image))

    def host2_returns(self, compute2: Any) -> None:
        """host2, unfenced, starts again and runs two periods."""
        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              False)
        self.computes['host2'] = self.restart_compute_service(
            compute2, keep_hypervisor_state=False)
        for _ in range(2):
            self._run_periodics()

    def ironic_node(self, node: str) -> dict[str, Any]:
        got = self.ironic.wait_idle(node)
        return {'instance_uuid': got.instance_uuid,
                'provision_state': got.provision_state}

    def deployed(self, node: str) -> tuple[Any, ...]:
        """(instance, provision state, power state) of a node in Ironic."""
        got = self.ironic.wait_idle(node)
        return got.instance_uuid, got.provision_state, got.power_state

    def ring_show(self) -> dict[str, Any]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.run(types.SimpleNamespace(name='ring', format='json',
                                             action='show'), out, err)
        self.assertEqual(0, code, err.getvalue())
        shown: dict[str, Any] = json.loads(out.getvalue())
        return shown

    def owners(self, hosts: tuple[str, ...]) -> dict[str, str]:
        """Node -> the host of ``hosts`` whose share the ring puts it in."""
        return {n: str(h) for n, h in rings.load(
            'compatible', hosts, 5).assign(self.node_uuids).items()}

    def ring_host(self, node: str) -> str:
        """The survivor the ring of the survivors names for ``node``."""
        return self.owners(SURVIVORS)[node]

    def host2_nodes(self) -> tuple[list[str], list[str]]:
        """host2's nodes, and of them one the survivors' ring hands to each
        survivor (in the order of ``SURVIVORS``).

        host2's nodes are those the ring over all hosts gives host2.
        """
        everyone = self.owners(base.HOSTS)
        host2 = [n for n in self.node_uuids if everyone[n] == 'host2']
        chosen = [next(n for n in host2 if self.ring_host(n) == h)
                  for h in SURVIVORS]
        return host2, chosen


class FencedTakeoverTest(FencedCase):

    def test_fenced_host_servers_are_managed_by_their_new_hosts(
            self) -> None:
        flavor = self.baremetal_flavor()
        # One server the ring hands to each survivor.
        host2, chosen = self.host2_nodes()
        image = test_actions.WHOLE_DISK_IMAGE
        servers = [self.boot(flavor, host='host2', node=n,
                             imageRef=image['id']) for n in chosen]
        # One more of host2's, deleted while host2 is down (an orphan), and
        # one on each survivor, which stays where it is.
        orphan = self.boot(flavor, host='host2', node=next(
            n for n in host2 if n not in chosen))
        staying = [self.boot(flavor, host=h) for h in SURVIVORS]
        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in servers + [orphan] + staying}
        records = self.records()

        compute2 = self.computes['host2']
        compute2.stop()
        # The first server is caught mid-reboot: nova's API took the
        # reboot (REBOOTING_HARD), host2 never did it.
        rebooting = servers[0]
        self.api.post_server_action(rebooting['id'],
                                    {'reboot': {'type': 'HARD'}})
        self.assertEqual('HARD_REBOOT', self.api.get_server(
            rebooting['id'])['status'])
        # Merely down is not a fence: nothing moves.
        self.period(SURVIVORS)
        self.assertEqual({'host2'}, {self.instance_host(s['id'])
                                     for s in servers + [orphan]})

        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              True)
        # host2 is down: nova's API deletes the orphan on its own, and
        # Ironic keeps its node deployed.
        self.api.delete_server(orphan['id'])
        self._wait_until_deleted(orphan)
        orphan_node = nodes[orphan['id']]
        self.assertEqual({'instance_uuid': orphan['id'],
                          'provision_state': states.ACTIVE},
                         self.ironic_node(orphan_node))
        # One period of the survivors.
        self.period(SURVIVORS)
        db = self.db_division()
        self.assertEqual(set(SURVIVORS), {self.instance_host(s['id'])
                                         for s in servers})
        for server in servers:
            node = nodes[server['id']]
            new = self.ring_host(node)
            self.assertEqual(new, self.instance_host(server['id']))
            self.assertIn(node, db[new])
            self.assertEqual({'instance_uuid': server['id'],
                              'provision_state': states.ACTIVE},
                             self.ironic_node(node))
            # The one caught mid-reboot is rebooted by its new host.
            got = self._wait_for_server_parameter(
                server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
            self.assertEqual(new, got['OS-EXT-SRV-ATTR:host'])
        self.assertEqual((rebooting['id'], states.ACTIVE, states.POWER_ON),
                         self.deployed(nodes[rebooting['id']]))
        self.assertIn('is forced down (fenced)', self.stdlog.logger.output)
        # The survivors' own servers did not move.
        for server in staying:
            self.assertEqual(server['OS-EXT-SRV-ATTR:host'],
                             self.instance_host(server['id']))
        # The orphan went with its node; its new host's reaper tears the
        # node down.
        reaper = self.ring_host(orphan_node)
        with self.cell() as cctxt:
            self.computes[reaper].manager._cleanup_running_deleted_instances(
                cctxt)
        self.assertEqual({'instance_uuid': None,
                          'provision_state': states.AVAILABLE},
                         self.ironic_node(orphan_node))
        # ring show reports each automatic takeover.
        shown = {t['instance']: (t['from'], t['to'])
                 for t in self.ring_show()['recent_takeovers']}
        self.assertEqual(
            {s['id']: ('host2', self.ring_host(nodes[s['id']]))
             for s in servers + [orphan]}, shown)
        # Same compute node rows and providers: moved, never re-created.
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))
        self.assert_same_records(records, self.records())
        for server in servers:
            self.assertEqual(
                {nodes[server['id']]},
                set(self._get_allocations_by_server_uuid(server['id'])))

        # host2 comes back and is unfenced: it keeps off the moved servers
        # and nothing flaps back.
        self.host2_returns(compute2)
        reported = self.reported()
        for server in servers:
            node = nodes[server['id']]
            new = self.ring_host(node)
            self.assertEqual(new, self.instance_host(server['id']))
            self.assertNotIn(node, reported['host2'])
            self.assertIn(node, reported[new])
            self.assertIn(node, self.db_division()[new])
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))
        self.assert_same_records(records, self.records())

        # Every server is manageable through nova's API on its new host,
        # and Ironic shows its node as nova expects after each action.
        for server in servers:
            node = nodes[server['id']]
            uuid = server['id']
            server = self._reboot_server(server, hard=True)
            self.assertEqual((uuid, states.ACTIVE, states.POWER_ON),
                             self.deployed(node))
            server = self._stop_server(server)
            self.assertEqual((uuid, states.ACTIVE, states.POWER_OFF),
                             self.deployed(node))
            server = self._start_server(server)
            self.assertEqual((uuid, states.ACTIVE, states.POWER_ON),
                             self.deployed(node))
            # (What Ironic would have read from Glance: see test_actions.)
            self.ironic.client.node.update(node, [
                {'op': 'add', 'path': '/instance_info/image_type',
                 'value': test_actions.image_type(image)}])
            other = test_actions.OTHER_IMAGE['id']
            server = self._rebuild_server(server, other)
            self.assertEqual((other, self.ring_host(node)),
                             (server['image']['id'],
                              server['OS-EXT-SRV-ATTR:host']))
            self.assertEqual((uuid, states.ACTIVE),
                             self.deployed(node)[:2])
            self.assertEqual(other,
                             self.ironic.instance_info(node)['image_source'])
            self._delete_server(server)
            self.assertEqual({'instance_uuid': None,
                              'provision_state': states.AVAILABLE},
                             self.ironic_node(node))
            self.assertEqual({}, self._get_allocations_by_server_uuid(
                server['id']))


class QueuedRequestsTest(FencedCase):
    """Requests nova's API queued for host2 while it was down.

    nova's API casts rescue, unrescue and stop to a server's host without
    asking whether it is up: the casts wait in host2's queue while host2 is
    fenced, its servers move and their new hosts settle what the API had
    started. When host2 comes back it reads them; each server must stay as
    its new host has it: no ERROR, no fault, Ironic's node untouched.
    """

    def server_view(self, server: dict[str, Any]) -> tuple[Any, ...]:
        got = self.api.get_server(server['id'])
        return (got['status'], got['OS-EXT-STS:task_state'],
                got['OS-EXT-SRV-ATTR:host'], got.get('fault'))

    def test_requests_queued_while_down_leave_moved_servers_alone(
            self) -> None:
        test_actions.ActionsTestBase.unbinding_an_unbound_port_is_fine(self)
        flavor = self.baremetal_flavor()
        host2, _ = self.host2_nodes()
        image = test_actions.WHOLE_DISK_IMAGE
        rescue, unrescue, stop = [
            self.boot(flavor, host='host2', node=n, imageRef=image['id'])
            for n in host2[:3]]
        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in (rescue, unrescue, stop)}
        unrescue = self._rescue_server(unrescue)

        compute2 = self.computes['host2']
        compute2.stop()
        self.api.post_server_action(rescue['id'], {'rescue': {}})
        self.api.post_server_action(unrescue['id'], {'unrescue': None})
        self.api.post_server_action(stop['id'], {'os-stop': None})
        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              True)
        # The survivors take host2's servers over and settle what nova's
        # API had started: Ironic never got the rescue (cleared), the
        # unrescue and the stop are done again.
        expected = {rescue['id']: 'ACTIVE', unrescue['id']: 'ACTIVE',
                    stop['id']: 'SHUTOFF'}
        for _ in range(5):
            self.period(SURVIVORS)
            if all(self.server_view(s)[:2] == (expected[s['id']], None)
                   for s in (rescue, unrescue, stop)):
                break
            time.sleep(0.5)
        settled = {}
        for server in (rescue, unrescue, stop):
            new = self.ring_host(nodes[server['id']])
            self.assertEqual((expected[server['id']], None, new, None),
                             self.server_view(server))
            settled[server['id']] = self.server_view(server)
        # Ironic: every node still deployed with its server (none rescued),
        # the stopped one powered off. (fake-hardware's deploy leaves the
        # power as it was: the others' power is whatever it is now.)
        ironic = {s['id']: self.deployed(nodes[s['id']])
                  for s in (rescue, unrescue, stop)}
        for server in (rescue, unrescue, stop):
            self.assertEqual((server['id'], states.ACTIVE),
                             ironic[server['id']][:2])
        self.assertEqual(states.POWER_OFF, ironic[stop['id']][2])

        # host2 comes back, unfenced, and reads the three queued casts.
        self.host2_returns(compute2)
        for server, method in ((rescue, 'rescue_instance'),
                               (unrescue, 'unrescue_instance'),
                               (stop, 'stop_instance')):
            # As its new host left it: no ERROR, no fault, same host.
            self.assertEqual(settled[server['id']], self.server_view(server))
            # Ironic's node as its new host left it.
            self.assertEqual(ironic[server['id']],
                             self.deployed(nodes[server['id']]))
            self.assertIn('Dropped a %s request for instance %s: it is on '
                          'host %s now' % (method, server['id'],
                                           settled[server['id']][2]),
                          self.stdlog.logger.output)
        # No action event failed: the dropped requests recorded nothing.
        for server in (rescue, unrescue, stop):
            events = [e for a in self.admin_api.get_instance_actions(
                server['id']) for e in self.admin_api.api_get(
                    '/servers/%s/os-instance-actions/%s'
                    % (server['id'], a['request_id'])
                ).body['instanceAction'].get('events', [])]
            self.assertEqual([], [e for e in events
                                  if e['result'] == 'Error'], events)

    def test_a_soft_delete_or_restore_in_flight_is_done_by_the_new_host(
            self) -> None:
        # Regression: the recovery cleared a soft delete's task state (the
        # server stayed ACTIVE: the user's delete was dropped) and left a
        # restore's set (every action but delete refused for ever).
        self.flags(reclaim_instance_interval=3600)
        flavor = self.baremetal_flavor()
        host2, _ = self.host2_nodes()
        image = test_actions.WHOLE_DISK_IMAGE
        deleted, restored = [
            self.boot(flavor, host='host2', node=n, imageRef=image['id'])
            for n in host2[:2]]
        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in (deleted, restored)}
        self.api.delete_server(restored['id'])
        self._wait_for_state_change(restored, 'SOFT_DELETED')

        compute2 = self.computes['host2']
        compute2.stop()
        # host2's last report is recent: nova's API takes it for up and
        # casts the soft delete to it; a restore is cast without asking.
        self.api.delete_server(deleted['id'])
        self.api.post_server_action(restored['id'], {'restore': None})
        self.assertEqual(('ACTIVE', 'soft-deleting'),
                         self.server_view(deleted)[:2])
        self.assertEqual(('SOFT_DELETED', 'restoring'),
                         self.server_view(restored)[:2])
        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              True)
        expected = {deleted['id']: 'SOFT_DELETED', restored['id']: 'ACTIVE'}
        for _ in range(5):
            self.period(SURVIVORS)
            if all(self.server_view(s)[:2] == (expected[s['id']], None)
                   for s in (deleted, restored)):
                break
            time.sleep(0.5)
        settled = {}
        for server in (deleted, restored):
            new = self.ring_host(nodes[server['id']])
            self.assertEqual((expected[server['id']], None, new, None),
                             self.server_view(server))
            settled[server['id']] = self.server_view(server)
        # Ironic: both still deployed with their servers; the soft-deleted
        # one powered off, the restored one on.
        self.assertEqual((deleted['id'], states.ACTIVE, states.POWER_OFF),
                         self.deployed(nodes[deleted['id']]))
        self.assertEqual((restored['id'], states.ACTIVE, states.POWER_ON),
                         self.deployed(nodes[restored['id']]))

        # host2 comes back and reads the two queued casts: dropped.
        self.host2_returns(compute2)
        for server, method in ((deleted, 'soft_delete_instance'),
                               (restored, 'restore_instance')):
            self.assertEqual(settled[server['id']], self.server_view(server))
            self.assertIn('Dropped a %s request for instance %s'
                          % (method, server['id']),
                          self.stdlog.logger.output)
        self.assertEqual(states.POWER_ON,
                         self.deployed(nodes[restored['id']])[2])


class ToozFencedTakeoverTest(FencedCase):
    """The same takeover with ``membership_driver = tooz`` (a real Redis).

    A stopped host leaves its tooz group at once, so its peers stop counting
    it long before nova would call it down: that is still no fence.
    """

    HEARTBEAT = 0.2
    MEMBER_TIMEOUT = 2
    #: How long the members may take to settle on a busy machine.
    SETTLE = MEMBER_TIMEOUT + 10 * HEARTBEAT + 10.0

    def configure(self) -> None:
        super().configure()
        self.redis = redis_server.RedisServer()
        url = self.redis.start()
        self.addCleanup(self.redis.stop)
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url=url,
                   tooz_member_timeout=self.MEMBER_TIMEOUT,
                   tooz_heartbeat_interval=self.HEARTBEAT)

    def setUp(self) -> None:
        super().setUp()
        # The hosts joined one by one: once each reads all three, the
        # ring of the three settles.
        self.wait_members(base.HOSTS, set(base.HOSTS))
        self._run_periodics()

    def members(self, host: str) -> set[str]:
        """What tooz membership tells ``host`` its peers are now."""
        plugin = self.computes[host].manager.driver._inventory.in_force.plugin
        assert plugin is not None and plugin.name == 'tooz'
        return set(plugin.live_peers(partition_opts.resolve(CONF, host)))

    def wait_members(self, hosts: tuple[str, ...], expected: set[str]) -> None:
        began = time.monotonic()
        while any(self.members(h) != expected for h in hosts):
            if time.monotonic() - began > self.SETTLE:
                self.fail('tooz members %s, not %s' % (
                    {h: sorted(self.members(h)) for h in hosts},
                    sorted(expected)))
            time.sleep(self.HEARTBEAT / 2)

    def reports(self, host: str) -> set[str]:
        """Nodes ``host``'s driver reports now (a fresh refresh)."""
        return set(self.computes[host].manager.driver.get_available_nodes())

    def host2_servers(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Two servers of host2's and their nodes, by server.

        The survivors' ring hands one node to each survivor.
        """
        flavor = self.baremetal_flavor()
        _, chosen = self.host2_nodes()
        image = test_actions.WHOLE_DISK_IMAGE
        servers = [self.boot(flavor, host='host2', node=n,
                             imageRef=image['id']) for n in chosen]
        return servers, {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                         for s in servers}

    def test_fenced_host_servers_move_with_tooz_membership(self) -> None:
        servers, nodes = self.host2_servers()
        self.computes['host2'].stop()
        # host2 left its group: the survivors count only each other ...
        self.wait_members(SURVIVORS, set(SURVIVORS))
        # ... but merely down is not a fence: nothing of host2's moves.
        self.period(SURVIVORS)
        db = self.db_division()
        for server in servers:
            self.assertEqual('host2', self.instance_host(server['id']))
            self.assertIn(nodes[server['id']], db['host2'])
            for host in SURVIVORS:
                self.assertNotIn(nodes[server['id']], self.reports(host))

        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              True)
        self.period(SURVIVORS)
        db = self.db_division()
        reported = {h: self.reports(h) for h in SURVIVORS}
        for server in servers:
            node = nodes[server['id']]
            new = self.ring_host(node)
            other, = set(SURVIVORS) - {new}
            self.assertEqual(new, self.instance_host(server['id']))
            self.assertIn(node, db[new])
            self.assertNotIn(node, db.get('host2', set()))
            self.assertIn(node, reported[new])
            self.assertNotIn(node, reported[other])
            self.assertNotIn(node, db.get(other, set()))
            # nova's API reboots it on its new host.
            server = self._reboot_server(server, hard=True)
            self.assertEqual(('ACTIVE', new), (
                server['status'], server['OS-EXT-SRV-ATTR:host']))
            self.assertEqual((server['id'], states.ACTIVE, states.POWER_ON),
                             self.deployed(node))
        self.assertIn('is forced down (fenced)', self.stdlog.logger.output)


class ShardFenced(base.ShardMode):
    """Mix in before a fenced case: ``divide = shards``.

    A fenced host's shards go whole to the survivor the ring of shard names
    over the survivors gives each (its nodes without a shard node by node).
    Nine nodes: host2 lists two shards, one for each survivor then, one of
    them with two nodes (a server's and the orphan's).
    """

    NODES = 9
    shard_of: dict[str, str | None]

    def owners(self, hosts: tuple[str, ...]) -> dict[str, str]:
        return base.shard_owners(self.shard_of, hosts)


class ShardFencedTakeoverTest(ShardFenced, FencedTakeoverTest):
    """The whole takeover with ``divide = shards``."""


class ToozShardFencedTakeoverTest(ShardFenced, ToozFencedTakeoverTest):
    """The tooz takeover with ``divide = shards``."""
