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
"""Deploys given up on, undone by the periods once Ironic allows."""

from __future__ import annotations

import testtools

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.period import abandoned
from nova_ironic_multi.tests.unit import fake_ironic


class AbandonedDeploysTest(testtools.TestCase):

    def setUp(self) -> None:
        super().setUp()
        self.ironic = fake_ironic.FakeIronic()
        self.abandoned = abandoned.AbandonedDeploys(
            self.ironic)  # type: ignore[arg-type]

    def given_up(self, state: str, instance: str = 'inst') -> str:
        node = self.ironic.add_node(provision_state=state,
                                    instance_uuid=instance,
                                    target_provision_state=states.ACTIVE)
        self.abandoned.note(node, instance)
        return node

    def requested(self) -> list[tuple[str, str]]:
        return [(c[0], c[1])
                for c in self.ironic.calls_to('set_provision_state')]

    def test_waits_while_ironic_deploys_then_undeploys_once(self) -> None:
        node = self.given_up(states.DEPLOYING)
        self.abandoned.sweep()
        self.abandoned.sweep()
        self.assertEqual([], self.requested())
        self.ironic.nodes[node]['provision_state'] = states.ACTIVE
        self.abandoned.sweep()
        self.abandoned.sweep()
        self.assertEqual([(node, 'deleted')], self.requested())
        self.assertEqual({}, self.abandoned.pending())
        self.ironic.get_node(node)
        self.assertEqual((states.AVAILABLE, None),
                         (self.ironic.nodes[node]['provision_state'],
                          self.ironic.nodes[node]['instance_uuid']))

    def test_a_hold_is_aborted_then_undeployed(self) -> None:
        node = self.given_up(states.DEPLOYHOLD)
        self.abandoned.sweep()
        self.assertEqual(states.DEPLOYFAIL,
                         self.ironic.nodes[node]['provision_state'])
        self.abandoned.sweep()
        self.assertEqual([(node, 'abort'), (node, 'deleted')],
                         self.requested())

    def test_a_node_holding_another_instance_is_left_alone(self) -> None:
        node = self.given_up(states.DEPLOYING)
        self.ironic.nodes[node].update(provision_state=states.ACTIVE,
                                       instance_uuid='next-tenant')
        self.abandoned.sweep()
        self.assertEqual([], self.requested())
        self.assertEqual({}, self.abandoned.pending())

    def test_outage_stops_the_period_and_keeps_every_node(self) -> None:
        first = self.given_up(states.ACTIVE, 'a')
        second = self.given_up(states.ACTIVE, 'b')
        self.ironic.fail('get_node', ironic.IronicUnavailable('down'))
        self.abandoned.sweep()
        self.assertEqual([(first,), ], self.ironic.calls_to('get_node'))
        self.assertEqual({first: 'a', second: 'b'}, self.abandoned.pending())
        self.abandoned.sweep()
        self.assertEqual([(second, 'deleted'), (first, 'deleted')],
                         self.requested())

    def test_a_refusal_reads_the_node_again_next_period(self) -> None:
        node = self.given_up(states.ACTIVE)
        self.ironic.fail('set_provision_state',
                         ironic.BadRequest('node moved meanwhile'))
        self.abandoned.sweep()
        self.assertEqual({node: 'inst'}, self.abandoned.pending())
        self.abandoned.sweep()
        self.assertEqual({}, self.abandoned.pending())
        self.assertEqual(2, len(self.requested()))

    def test_only_a_batch_per_period(self) -> None:
        for i in range(abandoned.BATCH + 3):
            self.given_up(states.DEPLOYING, 'inst-%d' % i)
        self.abandoned.sweep()
        self.assertEqual(abandoned.BATCH,
                         len(self.ironic.calls_to('get_node')))
