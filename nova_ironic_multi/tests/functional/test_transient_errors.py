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
"""A mass boot through a saturated Ironic: 503s and failed polls.

The computes talk to the real Ironic through a fault-injecting proxy
(:mod:`nova_ironic_multi.tests.fixtures.fault_proxy`) that answers like an
Ironic whose conductor workers are all busy (503 NoFreeConductorWorker,
before acting) and drops connections during the deploy waits.
"""

from __future__ import annotations

import collections

from nova_ironic_multi.tests.fixtures import fault_proxy
from nova_ironic_multi.tests.functional import base

SERVERS = 6
#: nova's [ironic] api_max_retries for these tests: 3 attempts a request.
RETRIES = 2
PROVISION = r'^/v1/nodes/[^/?]+/states/provision$'
POWER = r'^/v1/nodes/[^/?]+/states/power$'
#: A node read by node uuid (the tear-down wait's poll).
BY_NODE = r'^/v1/nodes/[0-9a-f-]{36}\?fields='
RESERVATION = r'"op": "add", "path": "/instance_uuid"'


class SaturatedIronicTest(base.IronicCellTestCase):
    """Servers go ACTIVE, stop and go away although Ironic is saturated."""

    def configure(self) -> None:
        self.proxy = self.useFixture(fault_proxy.FaultProxy(self.ironic.url))
        self.flags(endpoint_override=self.proxy.url,
                   api_max_retries=RETRIES, api_retry_interval=1,
                   group='ironic')

    def reservations(self) -> list[tuple[str, str, str]]:
        """(node, instance, outcome) of every reservation PATCH sent."""
        found = []
        for r in self.proxy.matching('PATCH', r'^/v1/nodes/[^/?]+$',
                                     body=RESERVATION):
            (op,) = [o for o in r.json() if o['path'] == '/instance_uuid']
            found.append((r.path.rsplit('/', 1)[-1], op['value'], r.outcome))
        return found

    def test_mass_boot_through_503s_and_failed_polls(self) -> None:
        flavor = self.baremetal_flavor()

        # A reservation answered 503 is never retried: nova reschedules
        # the server onto another node.
        refused = self.proxy.fail('PATCH', r'^/v1/nodes/[^/?]+$', 1,
                                  body=RESERVATION)
        first = self.boot(flavor, name='first', wait=None)
        first = self._wait_for_state_change(first, 'ACTIVE', max_retries=120)
        self.assertEqual(1, refused.total)
        self.proxy.clear()
        ((refused_node, refused_for),) = [
            (node, inst) for node, inst, outcome in self.reservations()
            if outcome == '503']
        self.assertEqual(first['id'], refused_for)
        self.assertNotEqual(refused_node,
                            first['OS-EXT-SRV-ATTR:hypervisor_hostname'])
        self.assertIsNone(self.ironic.node(refused_node).instance_uuid)

        # The mass boot. Every node's first two deploy requests: 503
        # (retried). Every instance's first RETRIES + 3 reads by instance:
        # dropped connections, so its first poll fails even after its
        # retries (the deploy wait must poll past it) and its second
        # succeeds on its third attempt.
        provision = self.proxy.fail('PUT', PROVISION, 2, per_path=True)
        # (Not the first server's: its delete reads by instance too.)
        polls = self.proxy.fail(
            'GET', r'^/v1/nodes/?\?instance_uuid=(?!%s)' % first['id'],
            RETRIES + 3, action='drop', per_path=True)
        servers = [self.boot(flavor, wait=None, name='mass-%d' % i)
                   for i in range(SERVERS - 1)]
        servers = [self._wait_for_state_change(s, 'ACTIVE', max_retries=240)
                   for s in servers]

        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in [first] + servers}
        self.assertEqual(SERVERS, len(set(nodes.values())))
        for server_id, node_uuid in nodes.items():
            node = self.ironic.node(node_uuid)
            self.assertEqual(('active', server_id),
                             (node.provision_state, node.instance_uuid))
        # The faults happened, to every server of the mass boot.
        mass_nodes = {nodes[s['id']] for s in servers}
        self.assertEqual({n: 2 for n in mass_nodes},
                         {p.split('/')[3]: c
                          for p, c in provision.hits.items()})
        self.assertEqual(sorted(s['id'] for s in servers), sorted(
            p.split('=')[1].split('&')[0] for p in polls.hits))
        self.assertEqual({RETRIES + 3}, set(polls.hits.values()))
        # Each deploy wait polled past one failed poll; none was undone.
        log = self.stdlog.logger.output
        self.assertEqual(SERVERS - 1, log.count('(1 failed polls so far)'),
                         log)
        self.assertNotIn('(2 failed polls so far)', log)
        self.assertEqual([], self.proxy.matching(
            'PUT', PROVISION, body='"target": "deleted"'))
        # One reservation PATCH per (node, instance), the refused one too.
        self.assertEqual([], [k for k, c in collections.Counter(
            (node, inst) for node, inst, _ in self.reservations()).items()
            if c > 1])
        self.assertEqual(SERVERS + 1, len(self.reservations()))

        # Power: two servers stop through 503s on their power requests.
        self.proxy.clear()
        power = self.proxy.fail('PUT', POWER, 2, per_path=True)
        stopped = servers[:2]
        for server in stopped:
            self.api.post_server_action(server['id'], {'os-stop': None})
        for server in stopped:
            self._wait_for_state_change(server, 'SHUTOFF', max_retries=120)
            self.assertEqual('power off', self.ironic.node(
                nodes[server['id']]).power_state)
        self.assertEqual(2 * 2, power.total)

        # Delete all: 503s on the undeploy requests, dropped polls in the
        # tear-down waits.
        self.proxy.clear()
        undeploy = self.proxy.fail('PUT', PROVISION, 1, per_path=True)
        teardown_polls = self.proxy.fail('GET', BY_NODE, RETRIES + 2,
                                         action='drop', per_path=True)
        for server in [first] + servers:
            self.api.delete_server(server['id'])
        for server in [first] + servers:
            self._wait_until_deleted(server)
        for node_uuid in nodes.values():
            node = self.ironic.wait_idle(node_uuid)
            self.assertEqual(('available', None),
                             (node.provision_state, node.instance_uuid))
        self.assertEqual(SERVERS, undeploy.total)
        undeploys = self.proxy.matching('PUT', PROVISION,
                                        body='"target": "deleted"')
        self.assertEqual({(503, SERVERS), (202, SERVERS)}, set(
            collections.Counter(r.status for r in undeploys
                                if r.status in (202, 503)).items()),
            [(r.path, r.status) for r in undeploys])
        self.assertEqual({n: RETRIES + 2 for n in nodes.values()},
                         {p.split('/')[3].split('?')[0]: c
                          for p, c in teardown_polls.hits.items()})
