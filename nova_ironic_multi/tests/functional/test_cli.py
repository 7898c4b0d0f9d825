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
"""The operator command against the cell's database and a real Ironic."""

from __future__ import annotations

import io
import itertools
import json
import types
from typing import Any
from unittest import mock

from nova.db.main import api as main_db_api
from nova import objects

from nova_ironic_multi.cmd import main as cli
from nova_ironic_multi.cmd import takeover as takeover_cmd
from nova_ironic_multi.division import sharding
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.membership import marker
from nova_ironic_multi import rings
from nova_ironic_multi.tests.functional import base


class CliCase(base.IronicCellTestCase):
    """A server on host3, and the command as the operator runs it."""

    def setUp(self) -> None:
        super().setUp()
        self.flavor = self.baremetal_flavor()
        self.server = self.boot(self.flavor, node=self.node_of_host3(),
                                host='host3')
        self.busy = self.server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        self._run_periodics()

    def node_of_host3(self) -> str | None:
        """Hook: the node of host3's server (None: the scheduler's pick)."""
        return None

    def cli(self, name: str, fmt: str = 'json',
            **args: Any) -> tuple[int, Any, str]:
        out, err = io.StringIO(), io.StringIO()
        command = types.SimpleNamespace(name=name, format=fmt, **args)
        code = cli.run(command, out, err)
        text = out.getvalue()
        data = json.loads(text) if fmt == 'json' and text else text
        return code, data, err.getvalue()

    def fence_host3(self) -> None:
        self.computes['host3'].stop()
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              True)

    def takeover(self, execute: bool = False,
                 fmt: str = 'table') -> tuple[int, Any, str]:
        return self.cli('takeover', fmt=fmt, source='host3', dest='host1',
                        execute=execute)


class CliTest(CliCase):

    NODES = 12

    def test_ring_show(self) -> None:
        code, data, _ = self.cli('ring', action='show')
        self.assertEqual(0, code)
        self.assertEqual(list(base.HOSTS), data['members'])
        db = self.db_division()
        for host in data['hosts']:
            self.assertEqual('up', host['state'])
            self.assertTrue(host['member'])
            mine = db[host['host']]
            with_instance = 1 if host['host'] == 'host3' else 0
            self.assertEqual(with_instance, host['nodes_with_instance'])
            self.assertEqual(len(mine) - with_instance, host['free_nodes'])
        self.assertEqual(11, data['free_nodes'])
        counts = [h['free_nodes'] for h in data['hosts']]
        self.assertAlmostEqual(max(counts) / (11 / 3),
                               data['balance_peak_to_mean'])
        code, text, _ = self.cli('ring', fmt='table', action='show')
        self.assertIn('Live members (3): host1, host2, host3', text)
        self.assertIn('free-node balance', text)

    def test_ring_show_disabled_host_still_manages_its_instance_node(
            self) -> None:
        self.admin_api.put_service(self.service('host3')['id'],
                                   {'status': 'disabled'})
        self._run_periodics()
        # The driver: host3 left the ring but keeps its instance's node.
        self.assertIn(self.busy, self.reported()['host3'])
        code, data, _ = self.cli('ring', action='show')
        self.assertEqual(0, code)
        self.assertEqual(['host1', 'host2'], data['members'])
        host3 = {h['host']: h for h in data['hosts']}['host3']
        self.assertEqual((False, True), (host3['member'], host3['disabled']))
        self.assertIn(self.busy, host3['managed'])
        self.assertEqual(1, host3['managed_nodes_with_instance'])
        self.assertEqual([], data['hosts_not_managing_their_instances'])
        code, text, _ = self.cli('ring', fmt='table', action='show')
        self.assertNotIn('unmanaged', text)
        self.assertNotIn('takeover', text)
        code, data, _ = self.cli('ring', action='explain', node=self.busy)
        self.assertEqual('host3', data['owner'])
        self.assertIn('host3 is not a ring member (disabled) but runs',
                      data['reason'])

    def test_ring_explain(self) -> None:
        free = next(n for n in self.node_uuids if n != self.busy)
        owner = next(h for h, nodes in self.db_division().items()
                     if free in nodes)
        code, data, _ = self.cli('ring', action='explain', node=free)
        self.assertEqual(0, code)
        self.assertEqual(owner, data['owner'])
        self.assertIn('free node placed by the compatible ring',
                      data['reason'])
        self.assertEqual(sorted(set(base.HOSTS) - {owner}),
                         sorted(data['successors']))
        code, data, _ = self.cli('ring', action='explain', node=self.busy)
        self.assertEqual('host3', data['owner'])
        self.assertIn(self.server['id'], data['reason'])
        code, text, _ = self.cli('ring', fmt='table', action='explain',
                                 node='no-such-node')
        self.assertEqual(1, code)
        self.assertIn('not among the 12 nodes', text)

    def test_ring_simulate(self) -> None:
        free = [n for n in self.node_uuids if n != self.busy]
        before = rings.load('compatible', base.HOSTS, 5).assign(free)
        after = rings.load('compatible', ['host1', 'host2', 'host4'],
                           5).assign(free)
        expected = sorted(n for n in free if before[n] != after[n])
        code, data, _ = self.cli('ring', action='simulate', add=['host4'],
                                 remove=['host3'])
        self.assertEqual(0, code)
        self.assertEqual(expected, data['moved_nodes'])
        self.assertEqual(['host1', 'host2', 'host4'], data['members_after'])
        self.assertEqual(0, data['per_host']['host3']['after'])
        self.assertEqual(sum(1 for v in before.values() if v == 'host3'),
                         data['per_host']['host3']['before'])

    def test_takeover_refuses_an_unfenced_host(self) -> None:
        code, _, err = self.takeover(execute=True)
        self.assertEqual(2, code)
        self.assertIn('nova-compute on host3 is not forced down', err)
        self.assertEqual('host3', self.instance_host(self.server['id']))

    def test_takeover_names_an_unknown_host(self) -> None:
        code, _, err = self.cli('takeover', fmt='table', source='hots3',
                                dest='host1', execute=True)
        self.assertEqual(2, code)
        self.assertIn("Host 'hots3' is not mapped to any cell", err)
        self.assertEqual('host3', self.instance_host(self.server['id']))

    def test_takeover_moves_node_and_instance_and_can_rerun(self) -> None:
        self.fence_host3()
        code, text, _ = self.takeover()
        self.assertEqual(0, code)
        self.assertIn('Dry run: 1 node(s) would move from host3 to host1, '
                      'with 1 instance(s) and 0 deleted instance(s)', text)
        self.assertIn(self.busy, text)
        self.assertEqual('host3', self.instance_host(self.server['id']))

        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        self.assertIn('[1/1] node %s: moved with 1 instance(s)' % self.busy,
                      text)
        self.assertEqual('host1', self.instance_host(self.server['id']))
        self.assertIn(self.busy, self.db_division()['host1'])
        # host1 now manages the node (rule 1), from its next period.
        self.assertIn(self.busy, self.reported()['host1'])
        self.assertEqual('ACTIVE', self.api.get_server(
            self.server['id'])['status'])
        # Run again: nothing left to move.
        code, data, _ = self.takeover(execute=True, fmt='json')
        self.assertEqual((0, []), (code, data['moved']))
        # The server is host1's now: host1 reboots it and deletes it (host3
        # is stopped: a request sent there would never be answered).
        self.notifier.reset()
        self._reboot_server(self.server, hard=True, api=self.admin_api)
        self.admin_api.delete_server(self.server['id'])
        self._wait_until_deleted(self.server)
        done = {n['event_type']: n['publisher_id']
                for n in self.notifier.versioned_notifications
                if n['event_type'] in ('instance.reboot.end',
                                       'instance.delete.end')}
        self.assertEqual({'instance.reboot.end': 'nova-compute:host1',
                          'instance.delete.end': 'nova-compute:host1'}, done)
        node = self.ironic.wait_idle(self.busy)
        self.assertEqual((None, 'available'),
                         (node.instance_uuid, node.provision_state))

    def test_a_takeover_cut_off_is_finished_by_running_it_again(
            self) -> None:
        self.fence_host3()
        real = main_db_api.instance_update_and_get_original
        writes: list[Any] = []

        def second_write_fails(*args: Any, **kwargs: Any) -> Any:
            writes.append(args)
            if len(writes) == 2:
                raise RuntimeError('db went away')
            return real(*args, **kwargs)

        with mock.patch.object(main_db_api, 'instance_update_and_get_original',
                               second_write_fails):
            code, text, _ = self.takeover(execute=True)
        self.assertEqual(1, code)
        self.assertIn('FAILED: db went away', text)
        # The claim holds: the instance and its node are still host3's,
        # and nova's API refuses actions until the move is finished.
        inst = self.instance(self.server['id'])
        self.assertEqual(('host3', 'nim-takeover:host1|'),
                         (inst.host, inst.task_state))
        self.assertIn(self.busy, self.db_division()['host3'])
        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        inst = self.instance(self.server['id'])
        self.assertEqual(('host1', None), (inst.host, inst.task_state))
        self.assertIn(self.busy, self.db_division()['host1'])

    def instance(self, uuid: str) -> objects.Instance:
        with self.cell() as cctxt:
            return objects.Instance.get_by_uuid(cctxt, uuid)

    def test_takeover_is_an_instance_action_notified_and_listed(
            self) -> None:
        self.flags(notify_on_state_change='vm_and_task_state',
                   group='notifications')
        self.fence_host3()
        self.notifier.reset()
        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        actions = self.admin_api.get_instance_actions(self.server['id'])
        self.assertEqual('manual-takeover', actions[0]['action'])
        event = self.admin_api.api_get(
            '/servers/%s/os-instance-actions/%s'
            % (self.server['id'], actions[0]['request_id'])
        ).body['instanceAction']['events']
        self.assertEqual(['takeover_from_host3'], [e['event'] for e in event])
        # nova's own instance.update notifications: the claim, then the
        # host.
        hosts = [n['payload']['nova_object.data']['host']
                 for n in self.notifier.versioned_notifications
                 if n['event_type'] == 'instance.update' and
                 n['payload']['nova_object.data']['uuid'] ==
                 self.server['id']]
        self.assertEqual('host1', hosts[-1], hosts)
        code, data, _ = self.cli('ring', action='show')
        self.assertEqual(
            [(self.server['id'], 'host3', 'host1', 'manual')],
            [(t['instance'], t['from'], t['to'], t['how'])
             for t in data['recent_takeovers']])
        code, text, _ = self.cli('ring', fmt='table', action='show')
        self.assertIn('automatic and by hand', text)

    def test_takeover_leaves_a_server_moved_since_its_plan(self) -> None:
        # Regression: the command wrote the host it planned over a move a
        # peer's automatic takeover made in between.
        self.fence_host3()
        real = takeover_cmd.plan

        def then_a_peer_moves_it(ctxt: Any, source: str,
                                 client: Any) -> Any:
            found = real(ctxt, source, client)
            inst = objects.Instance.get_by_uuid(ctxt, self.server['id'])
            self.assertTrue(takeover.move(inst, 'host2', {'host3'},
                                         {'host1', 'host2'}))
            return found

        with mock.patch.object(takeover_cmd, 'plan', then_a_peer_moves_it):
            code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        self.assertIn('instance %s is on host2 now (moved since the plan): '
                      'left alone' % self.server['id'], text)
        self.assertEqual('host2', self.instance_host(self.server['id']))
        self.assertNotIn(self.busy, self.db_division()['host1'])

    def test_a_server_taken_over_in_flight_is_recovered_by_its_new_host(
            self) -> None:
        # nova's API casts the stop to host3 while it is dead: the server
        # is powering-off when the operator moves it.
        self.computes['host3'].stop()
        self.api.post_server_action(self.server['id'], {'os-stop': None})
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              True)
        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        self.assertEqual('powering-off', self.api.get_server(
            self.server['id'])['OS-EXT-STS:task_state'])
        # host1's next period finds it and does the stop again.
        with self.cell() as cctxt:
            self.computes['host1'].manager.update_available_resource(cctxt)
        server = self._wait_for_state_change(self.server, 'SHUTOFF')
        self.assertEqual(('host1', None),
                         (server['OS-EXT-SRV-ATTR:host'],
                          server['OS-EXT-STS:task_state']))
        node = self.ironic.wait_idle(self.busy)
        self.assertEqual((self.server['id'], 'power off'),
                         (node.instance_uuid, node.power_state))

    def test_takeover_moves_orphans_and_keeps_the_zone(self) -> None:
        doomed = self.boot(self.flavor, host='host3')
        orphan = doomed['OS-EXT-SRV-ATTR:hypervisor_hostname']
        self.fence_host3()
        # Deleted while host3 is down: its node stays deployed for it.
        self.api.delete_server(doomed['id'])
        self._wait_until_deleted(doomed)
        self.assertEqual(doomed['id'], self.ironic.client.node.get(
            orphan, fields=['instance_uuid']).instance_uuid)
        # host2 is in another availability zone than host3 ('nova').
        far = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'far', 'availability_zone': 'az-far'}})
        self.admin_api.add_host_to_aggregate(far['id'], 'host2')

        code, data, _ = self.cli('ring', action='show')
        self.assertIn('(HOST one of: host1)', data['advice']['host3'])
        self.assertEqual(sorted([self.busy, orphan]),
                         data['takeover']['host3']['nodes'])
        self.assertIn("availability zone 'az-far'",
                      data['takeover']['host3']['destinations']['host2'])
        code, _, err = self.cli('takeover', fmt='table', source='host3',
                                dest='host2', execute=True)
        self.assertEqual(2, code)
        self.assertIn("the destination host2 is in availability zone "
                      "'az-far' and the source host3 in 'nova'", err)

        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        self.assertIn('node %s: moved with 0 instance(s) and 1 deleted '
                      'instance(s) to host1' % orphan, text)
        self.assertIn('tears down the nodes of the 1 deleted instance(s)',
                      text)
        self.assertEqual({self.busy, orphan},
                         self.db_division()['host1'] & {self.busy, orphan})
        # host1 lists the orphan, and its reaper tears the node down.
        with self.cell() as cctxt:
            host1 = self.computes['host1'].manager
            host1.update_available_resource(cctxt)
            self.assertIn(doomed['id'], host1.driver.list_instance_uuids())
            host1._cleanup_running_deleted_instances(cctxt)
        node = self.ironic.wait_idle(orphan)
        self.assertEqual((None, 'available'),
                         (node.instance_uuid, node.provision_state))
        # The live server kept its zone.
        self.assertEqual('nova', self.api.get_server(self.server['id'])[
            'OS-EXT-AZ:availability_zone'])


class ShardCliTest(base.ShardMode, CliCase):
    """``divide = shards``: nova's static shard scope is not in use."""

    NODES = 12
    shard_of: dict[str, str | None]

    def node_of_host3(self) -> str | None:
        # A node with a shard: host3 alone lists that shard.
        return sorted(n for n in self.reported()['host3']
                      if self.shard_of[n] is not None)[0]

    def test_takeover_accepts_any_host_of_the_group(self) -> None:
        self.fence_host3()
        # The survivors have not run since: neither lists host3's shards.
        code, data, _ = self.cli('ring', action='show')
        self.assertIn('(HOST one of: host1, host2)',
                      data['advice']['host3'])
        code, text, _ = self.takeover(execute=True)
        self.assertEqual(0, code, text)
        self.assertEqual('host1', self.instance_host(self.server['id']))
        self.assertIn(self.busy, self.reported()['host1'])


class CliGroupsTest(CliCase):
    """host1-3 serve Ironic's default group; host4 serves rack-b."""

    NODES = 6
    OTHER_GROUPS = {'rack-b': 2}

    def configure(self) -> None:
        self.flags(partition_key='', peer_list=list(base.HOSTS),
                   group='ironic_multi')

    def add_host4(self) -> None:
        """A nova-compute of conductor group rack-b, as nova records it."""
        with self.cell() as cctxt:
            svc = objects.Service(cctxt, host='host4', binary='nova-compute',
                                  topic='compute')
            svc.create()
            # (A host of this driver publishes its marker in its period.)
            marker.publish('host4', svc.uuid)
            for node in self.group_nodes['rack-b']:
                objects.ComputeNode(
                    cctxt, host='host4', service_id=svc.id, uuid=node,
                    hypervisor_hostname=node, hypervisor_type='ironic',
                    hypervisor_version=1, cpu_info='', vcpus=0,
                    memory_mb=0, local_gb=0, vcpus_used=0, memory_mb_used=0,
                    local_gb_used=0).create()

    def test_takeover_to_a_host_of_another_group_is_refused(self) -> None:
        self.add_host4()
        self.computes['host3'].stop()
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              True)
        code, _, err = self.cli('takeover', fmt='table', source='host3',
                                dest='host4', execute=True)
        self.assertEqual(2, code)
        self.assertIn("host4 manages 2 Ironic node(s), none in conductor "
                      "group ''", err)
        self.assertIn("is in conductor group 'rack-b'", err)
        self.assertIn('never manage node %s' % self.busy, err)
        self.assertEqual('host3', self.instance_host(self.server['id']))
        # ring show advises only the destinations takeover accepts.
        code, data, _ = self.cli('ring', action='show')
        advice = data['advice']['host3']
        self.assertIn('(HOST one of: host1, host2)', advice)
        code, text, _ = self.takeover()
        self.assertEqual(0, code, text)
        self.assertIn('Dry run: 1 node(s)', text)


class ShardsCliTest(base.IronicCellTestCase):
    """``shards plan|apply`` on the real Ironic, then the hosts divide."""

    NODES = 12
    cli = CliTest.cli

    def count(self) -> int:
        """A shard count that gives each host a shard of these nodes.

        (A host without any node has no Ironic compute node left, and the
        servicegroup membership counts only hosts that have one.)
        """
        ring = rings.load('compatible', base.HOSTS, 5)
        for count in itertools.count(3):
            names = {sharding.label(u, count) for u in self.node_uuids}
            placed = sharding.assign(ring, dict.fromkeys(names, 1), False)
            if set(placed.values()) == set(base.HOSTS):
                return count
        raise AssertionError('unreachable')

    def test_plan_apply_rerun_and_ring_show(self) -> None:
        # No service reports in during the test: keep them all up however
        # long it takes on a busy machine.
        self.flags(service_down_time=3600)
        count = self.count()
        code, data, _ = self.cli('shards', action='plan', count=count,
                                 relabel_all=False)
        self.assertEqual(0, code)
        self.assertEqual(12, len(data['changes']))
        # divide = nodes: labels move nothing.
        self.assertEqual([], data['free_nodes_changing_hands'])
        self.assertFalse(data['applied'])
        client = self.computes['host1'].manager.driver._ironic
        self.assertEqual({'None': 12}, client.shards())
        code, data, _ = self.cli('shards', action='apply', count=count,
                                 relabel_all=False)
        self.assertEqual(0, code)
        self.assertTrue(data['applied'])
        counts = client.shards()
        self.assertEqual(12, sum(counts.values()))
        self.assertNotIn('None', counts)
        code, data, _ = self.cli('shards', action='apply', count=count,
                                 relabel_all=False)
        self.assertEqual([], data['changes'])
        # Every host divides by shard; ring show says who lists what.
        self.flags(divide='shards', group='ironic_multi')
        self._run_periodics()
        self._run_periodics()
        reported = self.reported()
        self.assertEqual(set(self.node_uuids),
                         set().union(*reported.values()))
        self.assertEqual(12, sum(len(n) for n in reported.values()))
        self.assertEqual(12, len(self.assert_no_duplicates()))
        code, data, _ = self.cli('ring', action='show')
        by_host = data['shards']['by_host']
        for host, compute in self.computes.items():
            listed = set(compute.manager.driver._inventory.cached().shards)
            self.assertEqual(set(by_host[host]), listed - {'None'})
            self.assertEqual(len(reported[host]),
                             sum(by_host[host].values()))


class UpgradeCheckTest(base.IronicCellTestCase):
    """``upgrade check`` on what the hosts published in the real placement.

    It names the hosts whose settings differ.
    """

    def check(self) -> tuple[int, dict[str, tuple[int, str]]]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.run(types.SimpleNamespace(
            name='upgrade', action='check', format='json'), out, err)
        self.assertEqual('', err.getvalue())
        return code, {c['check']: (c['result'], c['details'] or '')
                      for c in json.loads(out.getvalue())['checks']}

    def published(self) -> list[str]:
        return sorted(t for t in self.placement.get(
            '/traits?name=startswith:CUSTOM_NOVA_IRONIC_MULTI_CFG_',
            version='1.6').body['traits'])

    def test_two_hosts_with_different_ring_settings_fail_naming_them(
            self) -> None:
        code, results = self.check()
        self.assertEqual((0, 'all nodes: host1, host2, host3'),
                         results['Same settings in each scope'])
        self.assertEqual(0, code, results)
        self.assertEqual(3, len(self.published()))
        # host3 restarted with another ring: its next period publishes it.
        self.flags(ring_algorithm='balanced', hash_partition_exponent=6,
                   group='ironic_multi')
        with self.cell() as cctxt:
            self.computes['host3'].manager.update_available_resource(cctxt)
        # Its old settings are gone: one trait per host.
        self.assertEqual(3, len(self.published()))
        self.flags(ring_algorithm='compatible', hash_partition_exponent=5,
                   group='ironic_multi')
        code, results = self.check()
        self.assertEqual(2, code)
        verdict, details = results['Same settings in each scope']
        self.assertEqual(2, verdict)
        self.assertIn(
            'all nodes is divided by hosts that disagree on [ironic_multi] '
            'ring_algorithm/hash_partition_exponent: compatible/2^5 on host1, '
            'host2; balanced/2^6 on host3', details)
