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
"""A boot-from-volume server on the real Ironic (nova's cinder fixture).

Ironic 39 deletes volume targets only through its API, never in its
tear-down: the driver removes them (at once if the node rests, else in a
period once cleaning is over), and a node's next deploy starts clean.
"""

from __future__ import annotations

import time
from typing import Any

from nova.tests.fixtures import cinder as cinder_fixture

from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.fixtures import ironic_server
from nova_ironic_multi.tests.functional import test_actions

VOLUME = cinder_fixture.CinderFixture.IMAGE_BACKED_VOL
#: The image in VOLUME (nova's 2.92 rebuild must name it).
VOLUME_IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'


#: How long Ironic's automated cleaning of a node lasts, where a test turns
#: it on (fake-hardware's one clean step, the vendor interface's, waits).
CLEAN_SECONDS = 20


class BootFromVolumeTest(test_actions.ActionsTestBase):

    IRONIC_CONF = '[fake]\nvendor_delay = %d\n' % CLEAN_SECONDS

    def targets(self, node: str) -> list[tuple[str, int]]:
        return sorted((t.volume_id, t.boot_index) for t in
                      self.ironic.client.volume_target.list(node=node,
                                                            detail=True))

    def boot_from_volume(self, node: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            'imageRef': '',
            'block_device_mapping_v2': [{
                'source_type': 'volume', 'destination_type': 'volume',
                'boot_index': 0, 'uuid': VOLUME}]}
        return self.boot(self.flavor, node=node, **body)

    def test_delete_returns_while_the_node_cleans_and_targets_go_after(
            self) -> None:
        node = self.node_uuids[1]
        self.ironic.client.node.update(node, [
            {'op': 'replace', 'path': '/automated_clean', 'value': True}])
        server = self.boot_from_volume(node)
        self.assertEqual([(VOLUME, 0)], self.targets(node))
        started = time.monotonic()
        self._delete_server(server)
        # nova's delete (its instance lock, an RPC worker, the Cinder
        # attachment) was over while Ironic was still cleaning the node;
        # nothing was asked of the node meanwhile.
        ironic_node = self.ironic.node(node)
        self.assertIn(ironic_node.provision_state,
                      (states.CLEANING, states.CLEANWAIT),
                      'delete took %.1f s' % (time.monotonic() - started))
        self.assertIsNone(ironic_node.instance_uuid)
        self.assertEqual([(VOLUME, 0)], self.targets(node))
        # Once cleaning is over, a period removes the leftover target.
        ironic_node = ironic_server.wait_idle(self.ironic.client, node,
                                              timeout=CLEAN_SECONDS * 3)
        self.assertEqual(states.AVAILABLE, ironic_node.provision_state)
        self._run_periodics()
        self.assertEqual([], self.targets(node))

    def test_deploy_refused_rebuild_delete_and_a_clean_next_boot(
            self) -> None:
        node = self.node_uuids[0]
        server = self.boot_from_volume(node)
        self.assertEqual(node, server['OS-EXT-SRV-ATTR:hypervisor_hostname'])
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertEqual([(VOLUME, 0)], self.targets(node))
        self.assertNotIn('image_source', self.ironic.instance_info(node))

        # Rebuild at the latest microversion: the root disk is a volume,
        # which Ironic cannot re-image; nova keeps the server as it was.
        self.api.post_server_action(
            server['id'], {'rebuild': {'imageRef': VOLUME_IMAGE}})
        event = self.event(server, 'rebuild', 'compute_rebuild_instance')
        self.assertEqual('Error', event['result'])
        server = self._wait_for_server_parameter(
            server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertEqual([(VOLUME, 0)], self.targets(node))
        self.assertIn('boots from a volume', self.stdlog.logger.output)

        # Deleted: torn down, and no volume target left behind. (The
        # delete removes them at once if it finds the node resting; if it
        # reads the node in the instant of Ironic's cleaning, which it
        # never waits for, the next period does: seen in CI.)
        self._delete_server(server)
        ironic_server.wait_idle(self.ironic.client, node)
        self.assertEqual({'instance_uuid': None,
                          'provision_state': states.AVAILABLE,
                          'power_state': states.POWER_OFF},
                         self.ironic_node(node))
        self._run_periodics()
        self.assertEqual([], self.targets(node))

        # A target left by a tear-down that ran into cleaning (or by the
        # in-tree driver) is removed before the node's next deploy.
        self.ironic.client.volume_target.create(
            node_uuid=node, volume_type='iscsi', volume_id='stale-volume',
            boot_index=0, properties={})
        self._run_periodics()
        server = self.boot(self.flavor, node=node,
                           imageRef=test_actions.WHOLE_DISK_IMAGE['id'])
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertEqual([], self.targets(node))
        self.assertEqual(test_actions.WHOLE_DISK_IMAGE['id'],
                         self.ironic.instance_info(node)['image_source'])
