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
"""takeover = fenced: a dead, fenced host's servers are manageable again."""

from __future__ import annotations

from typing import Any

from nova_ironic_multi import rings
from nova_ironic_multi import states
from nova_ironic_multi.tests.functional import base

SURVIVORS = ('host1', 'host3')


class FencedTakeoverTest(base.IronicCellTestCase):

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

    def ironic_node(self, node: str) -> dict[str, Any]:
        got = self.ironic.wait_idle(node)
        return {'instance_uuid': got.instance_uuid,
                'provision_state': got.provision_state}

    @staticmethod
    def ring_host(node: str) -> str:
        return str(rings.load('compatible', SURVIVORS, 5).assign(
            [node])[node])

    def test_fenced_host_servers_are_managed_by_their_new_hosts(
            self) -> None:
        flavor = self.baremetal_flavor()
        everyone = rings.load('compatible', base.HOSTS, 5).assign(
            self.node_uuids)
        host2 = [n for n in self.node_uuids if everyone[n] == 'host2']
        # One server the ring hands to each survivor.
        chosen = [next(n for n in host2 if self.ring_host(n) == h)
                  for h in SURVIVORS]
        servers = [self.boot(flavor, host='host2', node=n) for n in chosen]
        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in servers}
        records = self.records()

        compute2 = self.computes['host2']
        compute2.stop()
        # Merely down is not a fence: nothing moves.
        self.period(SURVIVORS)
        self.assertEqual({'host2'}, {self.instance_host(s['id'])
                                     for s in servers})

        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              True)
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
            got = self.api.get_server(server['id'])
            self.assertEqual(('ACTIVE', new, None),
                             (got['status'], got['OS-EXT-SRV-ATTR:host'],
                              got['OS-EXT-STS:task_state']))
        self.assertIn('is forced down (fenced)', self.stdlog.logger.output)
        # Same compute node rows and providers: moved, never re-created.
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))
        self.assert_same_records(records, self.records())
        for server in servers:
            self.assertEqual(
                {nodes[server['id']]},
                set(self._get_allocations_by_server_uuid(server['id'])))

        # host2 comes back and is unfenced: it keeps off the moved servers
        # and nothing flaps back.
        self.admin_api.put_service_force_down(self.service('host2')['id'],
                                              False)
        self.computes['host2'] = self.restart_compute_service(
            compute2, keep_hypervisor_state=False)
        for _ in range(2):
            self._run_periodics()
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

        # Every server is manageable through nova's API on its new host.
        for server in servers:
            node = nodes[server['id']]
            server = self._reboot_server(server, hard=True)
            self.assertEqual('ACTIVE', server['status'])
            self.assertEqual(states.POWER_ON,
                             self.ironic.wait_idle(node).power_state)
            self._delete_server(server)
            self.assertEqual({'instance_uuid': None,
                              'provision_state': states.AVAILABLE},
                             self.ironic_node(node))
            self.assertEqual({}, self._get_allocations_by_server_uuid(
                server['id']))
