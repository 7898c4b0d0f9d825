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
"""Scenarios b and c: servers through the nova API onto real Ironic nodes."""

from __future__ import annotations

import base64
from collections.abc import Callable
import gzip
import threading
from typing import Any, NoReturn

from nova import exception
from nova.tests.unit import fake_instance

from nova_ironic_multi.tests.functional import base


class ServerLifeTest(base.IronicCellTestCase):
    """b. Boot, then delete, with the state Ironic ends up in."""

    def test_boot_and_delete(self) -> None:
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, config_drive=True,
                           metadata={'role': 'web'})
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        host = server['OS-EXT-SRV-ATTR:host']
        self.assertIn(node, self.node_uuids)
        # The node is the reporting host's, and Ironic agrees.
        self.assertIn(node, self.reported()[host])
        ironic_node = self.ironic.node(node)
        self.assertEqual(server['id'], ironic_node.instance_uuid)
        self.assertEqual('active', ironic_node.provision_state)
        allocations = self._get_allocations_by_server_uuid(server['id'])
        self.assertEqual({node: {'CUSTOM_BAREMETAL': 1}},
                         {rp: a['resources']
                          for rp, a in allocations.items()})
        # The config drive is an ISO with this server's metadata.
        info = self.ironic.instance_info(node)
        iso = gzip.decompress(base64.b64decode(info['configdrive']))
        self.assertEqual(b'CD001', iso[0x8001:0x8006])
        self.assertIn(b'config-2', iso)
        self.assertIn(server['id'].encode(), iso)
        self.assertIn(b'"role": "web"', iso)
        self.assertEqual(server['name'], info['display_name'])
        # In use: reserved in placement, not offered to anyone else.
        self._run_periodics()
        self.assertEqual(1, self._get_provider_inventory(node)[
            'CUSTOM_BAREMETAL']['reserved'])

        self._delete_server(server)
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        ironic_node = self.ironic.wait_idle(node)
        self.assertIsNone(ironic_node.instance_uuid)
        self.assertEqual('available', ironic_node.provision_state)
        self.assertEqual({}, self.ironic.instance_info(node))
        self._run_periodics()
        self.assertEqual(0, self._get_provider_inventory(node)[
            'CUSTOM_BAREMETAL']['reserved'])


class RaceTest(base.IronicCellTestCase):
    """c. Two boots racing for one node: one deploys, one reschedules."""

    # nova's test classes are Any to mypy (nova has no type information):
    # fail() raises, as unittest's does.
    fail: Callable[..., NoReturn]

    def test_two_computes_reserving_one_node(self) -> None:
        # Two services that briefly both claim a node (a rebalance in
        # flight) are asked to build on it at the same moment.
        node = self.node_uuids[0]
        ctxt = self.ctxt
        results: dict[str, Any] = {}
        barrier = threading.Barrier(2)

        def prepare(host: str) -> None:
            inst = fake_instance.fake_instance_obj(ctxt, node=node,
                                                   host=host)
            barrier.wait()
            try:
                self.computes[host].manager.driver.prepare_for_spawn(inst)
                results[host] = inst.uuid
            except exception.ComputeResourcesUnavailable as e:
                results[host] = e

        threads = [threading.Thread(target=prepare, args=(h,))
                   for h in ('host1', 'host2')]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [v for v in results.values() if isinstance(v, str)]
        losers = [v for v in results.values()
                  if isinstance(v, exception.ComputeResourcesUnavailable)]
        self.assertEqual((1, 1), (len(winners), len(losers)), results)
        self.assertEqual(winners[0], self.ironic.node(node).instance_uuid)
        # The loser read the node either before the winner's reservation
        # (Ironic then refuses its own) or after it: both say who won.
        message = str(losers[0])
        self.assertTrue(
            'Ironic node %s was reserved by another instance' % node
            in message or
            'Ironic node %s is used by instance %s' % (node, winners[0])
            in message, message)

    def test_boot_onto_a_node_taken_behind_novas_back_reschedules(
            self) -> None:
        flavor = self.baremetal_flavor()
        # Only two schedulable nodes: placement still offers "taken", but
        # Ironic already gave it to an instance nova's scheduler cannot
        # know about (a concurrent build elsewhere).
        taken, other = self.node_uuids[:2]
        for node in self.node_uuids[2:]:
            self.ironic.client.node.set_maintenance(node, True)
        self._run_periodics()
        intruder = '5bd0b1f6-0c7b-4f9f-9d49-1f1de2c1a9a1'
        self.ironic.client.node.update(taken, [
            {'op': 'add', 'path': '/instance_uuid', 'value': intruder}])
        servers = [self.boot(flavor, wait=None) for _ in range(2)]
        finals = [self._wait_until_server_settles(s) for s in servers]
        states = sorted(s['status'] for s in finals)
        self.assertEqual(['ACTIVE', 'ERROR'], states)
        active = next(s for s in finals if s['status'] == 'ACTIVE')
        self.assertEqual(other,
                         active['OS-EXT-SRV-ATTR:hypervisor_hostname'])
        # Never deployed twice, never touched the intruder's node.
        self.assertEqual(intruder, self.ironic.node(taken).instance_uuid)
        self.assertEqual('available', self.ironic.node(taken).provision_state)
        # The build that met the taken node was rescheduled, and with no
        # node left it ran out of hosts (rather than deploying twice).
        errored = next(s for s in finals if s['status'] == 'ERROR')
        self.assertIn('Exhausted all hosts available for retrying build '
                      'failures', errored['fault']['message'])

    def _wait_until_server_settles(self, server: dict[str, Any]
                                   ) -> dict[str, Any]:
        import time
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            server = self.api.get_server(server['id'])
            if server['status'] in ('ACTIVE', 'ERROR'):
                return server
            time.sleep(0.1)
        self.fail('server %s stuck in %s' % (server['id'],
                                             server['status']))
