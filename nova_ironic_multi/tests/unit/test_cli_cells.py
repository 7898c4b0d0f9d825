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
"""The command reads every cell (issues 20.8 and 22.5).

nova's test database with two cells, as nova-manage sees them: the
command's untargeted context reaches only the default database, and the
computes' records are in their cells.
"""

from __future__ import annotations

from collections.abc import Sequence
import io
import json
from typing import Any
import uuid

from nova.conf import CONF
from nova import context as nova_context
from nova import objects

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import ring as ring_cmd
from nova_ironic_multi.tests.unit import base


def node_uuid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


class CliCellsTest(base.DriverTestCase):

    NUMBER_OF_CELLS = 2

    def setUp(self) -> None:
        super().setUp()
        self.flags(service_down_time=24 * 3600)
        self.flags(membership_driver='servicegroup', group='ironic_multi')

    def compute(self, cell: str, host: str,
                nodes: Sequence[str] = ()) -> None:
        """An Ironic host of ``cell`` with the compute nodes of ``nodes``."""
        with nova_context.target_cell(
                self.ctxt, self.cell_mappings[cell]) as cctxt:
            svc = objects.Service(cctxt, host=host, binary='nova-compute',
                                  topic='compute', report_count=1)
            svc.create()
            self.markers.publish(host, svc.uuid)
            for node in nodes:
                base.ironic_compute_node(cctxt, host, node, node)

    def show(self) -> tuple[dict[str, Any], str]:
        fleet = fleet_mod.gather(CONF)
        out = io.StringIO()
        ring_cmd.show(fleet, out, 'json')
        data = json.loads(out.getvalue())
        out = io.StringIO()
        ring_cmd.show(fleet, out, 'table')
        return data, out.getvalue()

    def test_members_and_nodes_are_read_from_a_cell_that_is_not_default(
            self) -> None:
        # The computes are in cell2: the default database has none.
        nodes = [node_uuid(i) for i in range(6)]
        for n in nodes:
            self.ironic.add_node(n)
        self.compute('cell2', 'host4', nodes[:3])
        self.compute('cell2', 'host5', nodes[3:])
        fleet = fleet_mod.gather(CONF)
        self.assertEqual(frozenset({'host4', 'host5'}), fleet.members)
        self.assertEqual(set(nodes), fleet.hosts['host4'].managed |
                         fleet.hosts['host5'].managed)
        self.assertEqual(set(nodes[:3]), fleet.hosts['host4'].reported)
        self.assertEqual([], fleet.cell_conflicts)

    def test_one_conductor_group_per_cell_is_no_conflict(self) -> None:
        a = [node_uuid(i) for i in range(4)]
        b = [node_uuid(i) for i in range(4, 8)]
        for n in a:
            self.ironic.add_node(n, conductor_group='rack-a')
        for n in b:
            self.ironic.add_node(n, conductor_group='rack-b')
        self.compute('cell1', 'host1', a)
        self.compute('cell2', 'host4', b[:2])
        self.compute('cell2', 'host5', b[2:])
        data, text = self.show()
        self.assertEqual([], data['cell_conflicts'])
        self.assertNotIn('cell', text)
        # The command, configured as cell2's computes, counts cell2's.
        self.flags(partition_key='rack-b', peer_list=['host4', 'host5'],
                   group='ironic_multi')
        fleet = fleet_mod.gather(CONF)
        self.assertEqual(frozenset({'host4', 'host5'}), fleet.members)
        self.assertEqual(set(b), fleet.hosts['host4'].managed |
                         fleet.hosts['host5'].managed)

    def test_a_scope_and_a_node_served_from_two_cells_are_reported(
            self) -> None:
        a = [node_uuid(i) for i in range(4)]
        for n in a:
            self.ironic.add_node(n, conductor_group='rack-a')
        self.ironic.add_node(node_uuid(9), conductor_group='rack-b')
        self.compute('cell1', 'host1', a[:3])
        # cell2's computes serve rack-a too, and claimed a[2] again.
        self.compute('cell2', 'host4', a[2:])
        self.compute('cell2', 'host5', [node_uuid(9)])
        data, text = self.show()
        self.assertEqual([
            'node %s has compute nodes in cells cell1 (host1) and cell2 '
            '(host4)' % a[2],
            "conductor group 'rack-a' is served from cells cell1 (host1) "
            "and cell2 (host4)",
        ], data['cell_conflicts'])
        self.assertIn('One Ironic scope belongs to one cell', text)
        for line in data['cell_conflicts']:
            self.assertIn(line, text)

    def test_live_members_of_a_scope_in_two_cells_are_reported(self) -> None:
        # No compute node yet anywhere: the members say it.
        self.ironic.add_node(node_uuid(0), conductor_group='rack-a')
        self.compute('cell1', 'host1')
        self.compute('cell2', 'host4')
        self.flags(partition_key='rack-a', peer_list=['host1', 'host4'],
                   group='ironic_multi')
        data, _ = self.show()
        self.assertEqual(
            ["the live members of conductor group 'rack-a' are in cells "
             "cell1 (host1) and cell2 (host4)"], data['cell_conflicts'])
