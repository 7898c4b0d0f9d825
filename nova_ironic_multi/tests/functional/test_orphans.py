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
"""A server deleted while its compute is down: nova's reaper cleans up.

nova-api deletes the instance locally; the node stays deployed with the
deleted instance's UUID. The 2016 design of the multi-compute Ironic driver
relies on ``running_deleted_instance_action = reap`` to tear such a node
down once the compute is back, which needs that compute to list it.
"""

from __future__ import annotations

from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.functional import base


class OrphanTest(base.IronicCellTestCase):

    NODES = 6

    def ironic_node(self, node: str) -> dict[str, object]:
        got = self.ironic.client.node.get(
            node, fields=['instance_uuid', 'provision_state'])
        return {'instance_uuid': got.instance_uuid,
                'provision_state': got.provision_state}

    def test_deleted_while_down_is_reaped_when_the_compute_returns(
            self) -> None:
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, host='host3')
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']

        compute3 = self.computes['host3']
        compute3.stop()
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              True)
        # host3 is down: nova-api deletes the instance on its own.
        self.api.delete_server(server['id'])
        self._wait_until_deleted(server)
        self.assertEqual({'instance_uuid': server['id'],
                          'provision_state': states.ACTIVE},
                         self.ironic_node(node))
        # No survivor takes the node of host3's deleted instance.
        reported = self.reported()
        self.assertNotIn(node, reported['host1'] | reported['host2'])

        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              False)
        self.computes['host3'] = self.restart_compute_service(
            compute3, keep_hypervisor_state=False)
        driver3 = self.computes['host3'].manager.driver
        self.assertIn(node, driver3.get_available_nodes())
        self.assertIn(server['id'], driver3.list_instance_uuids())
        self.assertIn('which nova deleted while this host was down',
                      self.stdlog.logger.output)

        # nova's periodic task for running deleted instances (reap).
        with self.cell() as cctxt:
            self.computes['host3'].manager._cleanup_running_deleted_instances(
                cctxt)
        self.assertEqual({'instance_uuid': None,
                          'provision_state': states.AVAILABLE},
                         self.ironic_node(node))
        # Free again: reported by exactly one host, the ring's choice.
        self._run_periodics()
        reported = self.reported()
        self.assertEqual(1, sum(node in nodes for nodes in reported.values()))
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))
