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
"""Only hosts that run this driver are peers (servicegroup membership).

A compute of nova's fake driver runs in the same cell as the three Ironic
hosts: while it starts without a compute node (a new or crash-looping host
of another hypervisor), once it has one, and across its restarts, the
Ironic hosts divide their nodes exactly as before.
"""

from __future__ import annotations

import contextlib
from typing import Any
from unittest import mock

from nova import context as nova_context
from nova import exception
from nova import objects
from nova.virt import fake

from nova_ironic_multi.membership import marker
from nova_ironic_multi.tests.functional import base


class OtherHypervisorTest(base.IronicCellTestCase):

    NODES = 12

    def members(self) -> dict[str, frozenset[str]]:
        return {h: c.manager.driver._inventory.cached().members
                for h, c in self.computes.items()}

    def division(self) -> tuple[dict[str, set[str]], dict[str, Any]]:
        """What each Ironic host reports and the members it saw."""
        self._run_periodics()
        return self.reported(), self.members()

    def start_other(self, host: str, nodes: bool) -> Any:
        """A compute of nova's fake driver; without nodes: none yet."""
        if host not in self.host_mappings:
            # (nova's helper looks the compute node up for the mapping.)
            hm = objects.HostMapping(
                context=nova_context.get_admin_context(), host=host,
                cell_mapping=self.cell_mappings['cell1'])
            hm.create()
            self.host_mappings[host] = hm
        self.flags(compute_driver='fake.SmallFakeDriver')
        try:
            with contextlib.ExitStack() as stack:
                if not nodes:
                    stack.enter_context(mock.patch.object(
                        fake.FakeDriver, 'get_available_nodes',
                        return_value=[]))
                return self.start_service('compute', host=host)
        finally:
            self.flags(compute_driver=self.compute_driver)

    def service_uuid(self, host: str) -> str:
        with self.cell() as cctxt:
            return objects.Service.get_by_host_and_binary(
                cctxt, host, 'nova-compute').uuid

    def test_a_compute_of_another_hypervisor_never_changes_the_division(
            self) -> None:
        ironic_hosts = frozenset(base.HOSTS)
        before = self.division()
        self.assertEqual({h: ironic_hosts for h in base.HOSTS}, before[1])
        self.assertEqual(set(self.node_uuids),
                         set().union(*before[0].values()))

        # Starts, up and enabled, with no compute node (it fails before
        # creating one, or has not got that far yet).
        other = self.start_other('libvirt1', nodes=False)
        other_uuid = self.service_uuid('libvirt1')
        with self.cell() as cctxt:
            self.assertRaises(
                exception.ComputeHostNotFound,
                objects.ComputeNodeList.get_all_by_host, cctxt, 'libvirt1')
        self.assertEqual(before, self.division())
        self.assertNotIn(other_uuid, marker.read())

        # Runs: its compute node appears.
        other.manager.update_available_resource(self.ctxt)
        with self.cell() as cctxt:
            types = {cn.hypervisor_type for cn in
                     objects.ComputeNodeList.get_all_by_host(cctxt,
                                                             'libvirt1')}
        self.assertEqual({'fake'}, types)
        self.assertEqual(before, self.division())

        # Restarts, twice (a crash loop keeps its service record up).
        for _ in range(2):
            other = self.restart_compute_service(other)
            self.assertEqual(before, self.division())
        self.assertNotIn(other_uuid, marker.read())
        # The Ironic hosts published theirs.
        ironic = {self.service_uuid(h) for h in base.HOSTS}
        self.assertEqual(ironic, marker.read())
