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
"""``takeover`` hands nodes only to a host that would manage them (23.1).

It must run this driver (servicegroup membership's rule: the host
published this driver's marker and has no compute node of another
hypervisor type), be in the source's availability zone, and serve the
nodes' conductor group (and shard, unless ``divide = shards``). The nodes
of the source's orphans move too.
"""

from __future__ import annotations

import io
import json
from typing import Any

from nova import context as nova_context
from nova import objects
from oslo_utils.fixture import uuidsentinel as uuids

from nova_ironic_multi.cmd import takeover
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import test_membership


class TakeoverCase(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(service_down_time=24 * 3600)
        self.dead = test_membership.make_service(self.ctxt, 'dead',
                                                 hypervisor_type=None,
                                                 marked=False)
        self.dead.forced_down = True
        self.dead.save()
        objects.HostMapping(
            self.ctxt, host='dead',
            cell_mapping=self.cell_mappings['cell1']).create()

    def service(self, host: str, hypervisor_type: str | None,
                marked: bool) -> objects.Service:
        svc = test_membership.make_service(
            self.ctxt, host, hypervisor_type=hypervisor_type, marked=False)
        if marked:
            self.markers.publish(host, svc.uuid)
        return svc

    def check(self, dest: str, moves: Any = (),
              by_shard: bool = False) -> tuple[Any, Any]:
        src, dst = takeover.services(self.ctxt, 'dead', dest)
        takeover.check(self.ctxt, src, dst, moves,
                       takeover.Scopes(self.ironic),  # type: ignore[arg-type]
                       by_shard)
        return src, dst

    def zone(self, name: str, *hosts: str) -> None:
        agg = objects.Aggregate(self.ctxt, name='agg-' + name,
                                metadata={'availability_zone': name})
        agg.create()
        for host in hosts:
            agg.add_host(host)

    def compute_node(self, host: str, node: str) -> int:
        svc = objects.Service.get_by_compute_host(self.ctxt, host)
        cn = objects.ComputeNode(
            self.ctxt, host=host, service_id=svc.id, uuid=node,
            hypervisor_hostname=node, hypervisor_type='ironic',
            hypervisor_version=1, vcpus=0, memory_mb=0, local_gb=0,
            vcpus_used=0, memory_mb_used=0, local_gb_used=0, cpu_info='',
            disk_available_least=0, free_ram_mb=0, free_disk_gb=0,
            current_workload=0, running_vms=0)
        cn.create()
        return int(cn.id)

    def instance(self, host: str, node: str) -> objects.Instance:
        """An instance of ``host`` on the compute node of ``node``."""
        cn = objects.ComputeNode.get_by_nodename(self.ctxt, node)
        return self.make_instance(host, node=node, compute_id=cn.id)

    def run_cli(self, dest: str, execute: bool) -> tuple[int, Any]:
        out = io.StringIO()
        code = takeover.run('dead', dest, execute, out, 'json')
        return code, json.loads(out.getvalue())


class TakeoverDestinationTest(TakeoverCase):

    def test_a_libvirt_destination_is_refused(self) -> None:
        self.service('libvirt1', 'QEMU', marked=False)
        exc = self.assertRaises(takeover.Refused, self.check, 'libvirt1')
        self.assertIn('does not run this driver', str(exc))
        self.assertIn('has not published the marker', str(exc))

    def test_a_host_reinstalled_with_another_hypervisor_is_refused(
            self) -> None:
        self.service('again', 'QEMU', marked=True)
        exc = self.assertRaises(takeover.Refused, self.check, 'again')
        self.assertIn('compute nodes of hypervisor type QEMU', str(exc))

    def test_an_ironic_host_with_or_without_nodes_is_accepted(self) -> None:
        self.service('empty', None, marked=True)
        self.service('busy', 'ironic', marked=True)
        for dest in ('empty', 'busy'):
            src, dst = self.check(dest)
            self.assertEqual(('dead', dest), (src.host, dst.host))


    def test_a_source_without_compute_nodes_has_nothing_to_move(
            self) -> None:
        # Every node moved already (a rerun): nova records none for it.
        self.service('busy', 'ironic', marked=True)
        code, data = self.run_cli('busy', execute=True)
        self.assertEqual((0, [], []), (code, data['nodes'], data['moved']))


class TakeoverZoneTest(TakeoverCase):
    """The instances' availability zone must not change."""

    def test_a_destination_of_another_zone_is_refused(self) -> None:
        self.service('far', 'ironic', marked=True)
        self.zone('az-far', 'far')
        exc = self.assertRaises(takeover.Refused, self.check, 'far')
        self.assertIn("the destination far is in availability zone "
                      "'az-far' and the source dead in 'nova': the "
                      "instances would change zone. Choose a destination "
                      "in availability zone 'nova'", str(exc))

    def test_only_a_destination_of_the_source_zone_is_accepted(
            self) -> None:
        self.service('near', 'ironic', marked=True)
        self.service('plain', 'ironic', marked=True)
        self.zone('az-a', 'dead', 'near')
        self.check('near')
        # 'plain' is in no aggregate: nova's default zone.
        self.flags(default_availability_zone='az-default')
        exc = self.assertRaises(takeover.Refused, self.check, 'plain')
        self.assertIn("'az-default' and the source dead in 'az-a'",
                      str(exc))


class TakeoverOrphansTest(TakeoverCase):
    """A dead host's orphans move with their nodes, for the new reaper."""

    def setUp(self) -> None:
        super().setUp()
        self.service('live', None, marked=True)
        for node in (uuids.live, uuids.orphan, uuids.gone,
                     uuids.stranger, uuids.free):
            self.compute_node('dead', node)
        live = self.instance('dead', uuids.live)
        orphan = self.instance('dead', uuids.orphan)
        gone = self.instance('dead', uuids.gone)
        stranger = self.instance('elsewhere', uuids.stranger)
        for inst in (orphan, gone, stranger):
            inst.destroy()
        self.live, self.orphan = live.uuid, orphan.uuid
        self.ironic.add_node(uuids.live, instance_uuid=live.uuid,
                             provision_state='active')
        self.ironic.add_node(uuids.orphan, instance_uuid=orphan.uuid,
                             provision_state='active')
        # Torn down already: nothing left to reap.
        self.ironic.add_node(uuids.gone)
        # Another host's deleted instance: not this host's orphan.
        self.ironic.add_node(uuids.stranger, instance_uuid=stranger.uuid,
                             provision_state='active')
        self.ironic.add_node(uuids.free)

    def host_of(self, instance_uuid: str) -> str:
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        host: str = objects.Instance.get_by_uuid(ctxt, instance_uuid).host
        return host

    def test_plan_lists_orphans_whose_node_is_still_deployed(self) -> None:
        moves = takeover.plan(self.ctxt, 'dead',
                              self.ironic)  # type: ignore[arg-type]
        self.assertEqual(
            {uuids.live: ([self.live], []),
             uuids.orphan: ([], [self.orphan])},
            {m.node: ([u for u, _ in m.instances], m.orphans)
             for m in moves})

    def test_orphans_move_in_their_node_transaction(self) -> None:
        code, data = self.run_cli('live', execute=False)
        self.assertEqual(0, code)
        self.assertEqual(
            {uuids.live: {'instances': [self.live], 'orphans': []},
             uuids.orphan: {'instances': [], 'orphans': [self.orphan]}},
            {n.pop('node'): n for n in data['nodes']})
        self.assertEqual('dead', self.host_of(self.orphan))
        code, data = self.run_cli('live', execute=True)
        self.assertEqual(0, code)
        self.assertEqual({uuids.live, uuids.orphan}, set(data['moved']))
        self.assertEqual(('live', 'live'),
                         (self.host_of(self.live), self.host_of(self.orphan)))
        nodes = {cn.hypervisor_hostname: cn.host for cn in
                 objects.ComputeNodeList.get_all(self.ctxt)}
        self.assertEqual(('live', 'live', 'dead'),
                         (nodes[uuids.live], nodes[uuids.orphan],
                          nodes[uuids.free]))
        # The other host's deleted instance stays its own.
        self.assertEqual('dead', nodes[uuids.stranger])


class TakeoverShardModeTest(TakeoverCase):
    """``divide = shards``: nova's static shard scope is not in use."""

    def setUp(self) -> None:
        super().setUp()
        self.service('peer', None, marked=True)
        self.compute_node('dead', uuids.s1)
        inst = self.instance('dead', uuids.s1)
        self.ironic.add_node(uuids.s1, instance_uuid=inst.uuid, shard='s1',
                             provision_state='active')
        # The peer lists shard s2 only, and a node of group 'other'.
        self.ironic.add_node(uuids.s2, shard='s2')
        self.compute_node('peer', uuids.s2)

    def test_a_host_of_another_shard_is_refused_when_dividing_nodes(
            self) -> None:
        code = self.assertRaises(takeover.Refused, self.run_cli, 'peer',
                                 False)
        self.assertIn("its [ironic] shard is not 's1'", str(code))

    def test_any_host_of_the_group_is_accepted_when_dividing_shards(
            self) -> None:
        self.flags(divide='shards', group='ironic_multi')
        code, data = self.run_cli('peer', execute=True)
        self.assertEqual((0, [uuids.s1]), (code, data['moved']))

    def test_the_conductor_group_still_counts_when_dividing_shards(
            self) -> None:
        self.flags(divide='shards', group='ironic_multi')
        self.ironic.nodes[uuids.s2]['conductor_group'] = 'other'
        exc = self.assertRaises(takeover.Refused, self.run_cli, 'peer',
                                False)
        self.assertIn("none in conductor group ''", str(exc))
        self.assertIn("Choose a destination that serves the conductor "
                      "group of these nodes", str(exc))
