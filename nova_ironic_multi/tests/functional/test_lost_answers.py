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
"""Answers lost after Ironic acted: nothing is asked of Ironic twice.

The computes talk to the real Ironic through the fault proxy, told to
forward one request of each kind that changes Ironic and then close the
connection instead of passing Ironic's answer on (keystoneauth reports a
``ConnectFailure``, "Connection aborted", as for a refused connection).
Each time the driver reads the node, sees that Ironic took the request,
and goes on: the request reached Ironic once, and the server ends as it
should.
"""

from __future__ import annotations

from typing import Any

from nova.tests.fixtures import cinder as cinder_fixture

from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.fixtures import fault_proxy
from nova_ironic_multi.tests.functional import test_actions

NODE = r'^/v1/nodes/[^/?]+$'
PROVISION = r'^/v1/nodes/[^/?]+/states/provision$'
POWER = r'^/v1/nodes/[^/?]+/states/power$'
TARGETS = r'^/v1/volume/targets$'
RESERVATION = r'"op": "add", "path": "/instance_uuid"'


def target(verb: str) -> str:
    return r'"target": "%s"' % verb


class LostAnswerTest(test_actions.ActionsTestBase):

    def configure(self) -> None:
        self.proxy = self.useFixture(fault_proxy.FaultProxy(self.ironic.url))
        self.flags(endpoint_override=self.proxy.url, api_max_retries=2,
                   api_retry_interval=1, group='ironic')

    def lose(self, method: str, path: str, body: str) -> fault_proxy.Rule:
        """The next matching request reaches Ironic; its answer is lost."""
        return self.proxy.fail(method, path, 1, action='lose', body=body)

    def assert_sent_once(self, rule: fault_proxy.Rule, method: str,
                         path: str, body: str, node: str = '') -> None:
        self.assertEqual(1, rule.total, 'the answer was not lost')
        sent = [r for r in self.proxy.matching(method, path, body=body)
                if node in r.path]
        self.assertEqual(['lose'], [r.outcome for r in sent], body)
        self.assertEqual(200 if method == 'PATCH' else
                         201 if method == 'POST' else 202, sent[0].status)

    def test_every_change_reaches_ironic_once_when_its_answer_is_lost(
            self) -> None:
        # The reservation and the deploy.
        rules = {
            'reserve': self.lose('PATCH', NODE, RESERVATION),
            'deploy': self.lose('PUT', PROVISION, target('active'))}
        server, node = self.boot_whole_disk()
        self.assert_sent_once(rules['reserve'], 'PATCH', NODE, RESERVATION)
        (reservation,) = self.proxy.matching('PATCH', NODE, body=RESERVATION)
        self.assertEqual([server['id']], [op['value'] for op in
                                          reservation.json()])
        self.assert_sent_once(rules['deploy'], 'PUT', PROVISION,
                              target('active'))
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertIn('the node shows Ironic took it; not repeating it',
                      self.stdlog.logger.output)

        # A hard reboot: one reboot, not two.
        rule = self.lose('PUT', POWER, target('rebooting'))
        server = self._reboot_server(server, hard=True)
        self.assert_sent_once(rule, 'PUT', POWER, target('rebooting'), node)
        self.assertEqual(self.deployed(server, power=states.POWER_ON),
                         self.ironic_node(node))

        # A rebuild: a repeat would be a 400 putting the server in ERROR.
        rule = self.lose('PUT', PROVISION, target('rebuild'))
        server = self._rebuild_server(server, test_actions.OTHER_IMAGE['id'])
        self.assert_sent_once(rule, 'PUT', PROVISION, target('rebuild'),
                              node)
        self.assertEqual(self.deployed(server), self.ironic_node(node))

        # Rescue and unrescue.
        for verb, act in (('rescue', self._rescue_server),
                          ('unrescue', self._unrescue_server)):
            rule = self.lose('PUT', PROVISION, target(verb))
            server = act(server)
            self.assert_sent_once(rule, 'PUT', PROVISION, target(verb), node)
        self.assertEqual(self.deployed(server), self.ironic_node(node))

        # The delete.
        rule = self.lose('PUT', PROVISION, target('deleted'))
        self._delete_server(server)
        self.assert_sent_once(rule, 'PUT', PROVISION, target('deleted'),
                              node)
        self.assertIsNone(self.ironic.wait_idle(node).instance_uuid)

    def test_a_volume_target_is_created_once_when_its_answer_is_lost(
            self) -> None:
        node = self.node_uuids[1]
        volume = cinder_fixture.CinderFixture.IMAGE_BACKED_VOL
        rule = self.lose('POST', TARGETS, '"volume_id": "%s"' % volume)
        server: Any = self.boot(self.flavor, node=node, imageRef='',
                                block_device_mapping_v2=[{
                                    'source_type': 'volume',
                                    'destination_type': 'volume',
                                    'boot_index': 0, 'uuid': volume}])
        self.assert_sent_once(rule, 'POST', TARGETS, '"volume_id"')
        self.assertEqual([(volume, 0)], [
            (t.volume_id, t.boot_index) for t in
            self.ironic.client.volume_target.list(node=node, detail=True)])
        self.assertEqual(self.deployed(server), self.ironic_node(node))
