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
"""Scenarios d, g and h: a compute dies, Ironic dies, a node is fenced."""

from __future__ import annotations

import collections

from nova import exception

from nova_ironic_multi.tests.functional import base

SURVIVORS = ('host1', 'host2')


class TakeoverTest(base.IronicCellTestCase):
    """d. A compute stops and is marked down, then comes back."""

    NODES = 12

    def period(self, hosts: tuple[str, ...]) -> None:
        """One resource-tracker period on each of ``hosts``."""
        with self.cell() as cctxt:
            for host in hosts:
                self.computes[host].manager.update_available_resource(cctxt)

    def test_regression_1714248_1853009_takeover_and_return(self) -> None:
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, host='host3')
        busy = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        before = self.reported()
        self.assertIn(busy, before['host3'])
        host3_free = before['host3'] - {busy}
        self.assertTrue(host3_free)
        providers = {p['uuid'] for p in self._get_all_providers()}
        # Same UUIDs prove nothing: a compute node and its provider deleted
        # and created again keep the node's UUID. Same rows do.
        records = self.records()

        compute3 = self.computes['host3']
        compute3.stop()
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              True)
        # Within one period the survivors manage every free node of host3.
        self.period(SURVIVORS)
        db = self.db_division()
        taken = db.get('host1', set()) | db.get('host2', set())
        self.assertLessEqual(host3_free, taken)
        # The instance's node stays with the instance's host.
        self.assertEqual({busy}, db['host3'])
        self.assertEqual('host3', self.instance_host(server['id']))
        self.assertNotIn(busy, taken)
        self.assertEqual(12, len(self.assert_no_duplicates()))
        self.assertEqual(providers,
                         {p['uuid'] for p in self._get_all_providers()})
        self.assert_same_records(records, self.records())
        self.assertEqual('ACTIVE', self.api.get_server(server['id'])[
            'status'])

        # host3 returns: the division goes back to what it was.
        self.admin_api.put_service_force_down(self.service('host3')['id'],
                                              False)
        self.computes['host3'] = self.restart_compute_service(
            compute3, keep_hypervisor_state=False)
        for _ in range(2):
            self._run_periodics()
            self.assert_no_duplicates()
        self.assertEqual(before, self.reported())
        self.assertEqual(before, self.db_division())
        self.assertEqual(providers,
                         {p['uuid'] for p in self._get_all_providers()})
        self.assert_same_records(records, self.records())

    def test_disabled_compute_keeps_its_instance_claims_no_free_node(
            self) -> None:
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, host='host2')
        busy = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        self.admin_api.put_service(self.service('host2')['id'],
                                   {'status': 'disabled'})
        self._run_periodics()
        reported = self.reported()
        self.assertEqual({busy}, reported['host2'])
        self.assertEqual(set(self.node_uuids) - {busy},
                         reported['host1'] | reported['host3'])
        self.assertFalse(reported['host1'] & reported['host3'])
        self.assertEqual(12, len(self.assert_no_duplicates()))


class IronicOutageTest(base.IronicCellTestCase):
    """g. Ironic stops: nova keeps everything; Ironic returns: normal."""

    def configure(self) -> None:
        super().configure()
        # No wait between retries: a retried request shows in the counts
        # below without holding the test for minutes.
        self.flags(api_max_retries=60, api_retry_interval=0, group='ironic')

    def test_regression_1750450_outage_keeps_compute_nodes(self) -> None:
        before = self.db_division()
        providers = self._get_all_providers()
        drivers = {h: c.manager.driver for h, c in self.computes.items()}
        sent = {h: collections.Counter(d._ironic.requests)
                for h, d in drivers.items()}
        self.ironic.stop()
        mark = len(self.stdlog.logger.output)
        self._run_periodics()
        for host, drv in drivers.items():
            # Each request of the period asked once: the division's
            # requests (the listing, or the shard count) once, and one
            # "does it exist" per compute node nobody reports.
            delta = collections.Counter(drv._ironic.requests)
            delta.subtract(sent[host])
            self.assertLessEqual(delta['list'] + delta['shards'], 1,
                                 (host, delta))
            self.assertLessEqual(delta['get'], len(self.node_uuids),
                                 (host, delta))
            # What the rows cannot show (nova keeps them whenever the
            # driver does not say "deleted"): the period is NotReady.
            self.assertRaises(exception.VirtDriverNotReady,
                              drv.get_available_nodes)
        self.assertEqual(before, self.db_division())
        self.assertEqual(providers, self._get_all_providers())
        since = self.stdlog.logger.output[mark:]
        self.assertIn('Virt driver is not ready', since)
        self.assertEqual(len(drivers) * 2,
                         since.count('Ironic nodes not refreshed'))
        self.ironic.restart()
        self._run_periodics()
        self.assertEqual(before, self.db_division())
        self.assertEqual(before, self.reported())
        self.assertEqual(9, len(self.assert_no_duplicates()))


class ShardIronicOutageTest(base.ShardMode, IronicOutageTest):
    """g, with ``divide = shards``: the shard count and the node reads."""


class MaintenanceTest(base.IronicCellTestCase):
    """h. A node into maintenance and back."""

    def test_regression_1839560_maintenance_round_trip(self) -> None:
        node = self.node_uuids[0]
        owner = next(h for h, n in self.db_division().items() if node in n)
        self.ironic.client.node.set_maintenance(node, True,
                                                maint_reason='disk swap')
        self._run_periodics()
        self.assertIn(node, self.reported()[owner])
        inventory = self._get_provider_inventory(node)['CUSTOM_BAREMETAL']
        self.assertEqual(1, inventory['reserved'])
        self.ironic.client.node.set_maintenance(node, False)
        self._run_periodics()
        self.assertIn(node, self.reported()[owner])
        inventory = self._get_provider_inventory(node)['CUSTOM_BAREMETAL']
        self.assertEqual(0, inventory['reserved'])
        self.assertEqual(9, len(self.assert_no_duplicates()))
        self.assertNotIn('DBDuplicateEntry', self.stdlog.logger.output)
        self.assertNotIn('orphan compute node', self.stdlog.logger.output)


class ShardTakeoverTest(base.ShardMode, TakeoverTest):
    """d, with ``divide = shards``: a dead host's shards move, and back."""
