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
"""Volume targets left on free nodes, removed by the periods."""

from __future__ import annotations

from typing import Any

import fixtures

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states
from nova_ironic_multi.period import leftovers
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import test_driver_provision

HOSTS = ('host1', 'host2', 'host3')


class LeftoverTargetsTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        for host in HOSTS:
            self.make_service(host)
        self.nodes = [self.ironic.add_node() for _ in range(12)]
        self.drivers = self.fleet_drivers(HOSTS)

    def period(self) -> dict[str, set[str]]:
        return {h: set(d.get_available_nodes())
                for h, d in self.drivers.items()}

    def owner(self, node: str, managed: dict[str, set[str]]) -> str:
        (host,) = [h for h, nodes in managed.items() if node in nodes]
        return host

    def add_targets(self, node: str, *volumes: str) -> None:
        for i, volume in enumerate(volumes):
            self.ironic.create_volume_target(
                node_uuid=node, volume_id=volume, volume_type='iscsi',
                boot_index=i)
        self.ironic.calls.clear()

    def cleaning(self, node: str) -> None:
        self.ironic.nodes[node].update(
            instance_uuid=None, provision_state=states.CLEANING,
            target_provision_state=states.AVAILABLE)

    def clean_done(self, node: str) -> None:
        self.ironic.nodes[node].update(
            provision_state=states.AVAILABLE, target_provision_state=None,
            power_state=states.POWER_OFF, _pending=None)

    # Tests ---------------------------------------------------------------

    def test_the_host_managing_the_free_node_removes_them(self) -> None:
        # Torn down by someone else (the in-tree driver, a host that died):
        # the host that manages the free node saw it cleaning, and removes
        # the targets once cleaning is over; nobody asks before.
        node = self.nodes[0]
        self.add_targets(node, 'vol-1', 'vol-2')
        self.cleaning(node)
        owner = self.owner(node, self.period())
        self.period()
        self.assertEqual([], self.ironic.calls_to('volume_targets'))
        self.clean_done(node)
        self.period()
        self.assertEqual([], self.ironic.targets[node])
        self.assertEqual([(node,)], self.ironic.calls_to('volume_targets'))
        self.assertIn('Removed 2 leftover volume target(s) (volumes vol-1, '
                      'vol-2) from free Ironic node %s' % node,
                      self.stdlog.logger.output)
        # Once: the next periods ask nothing more.
        self.period()
        self.assertEqual(1, len(self.ironic.calls_to('volume_targets')))
        self.assertIn(node, self.period()[owner])

    def test_the_deleting_host_removes_them_wherever_the_node_went(
            self) -> None:
        # Cleaning ends between two periods and the free node goes to a
        # host that never saw it busy: the host that deleted the server
        # remembers it.
        managed = self.period()
        node = next(n for n in self.nodes
                    if self.owner(n, managed) != 'host1')
        instance = self.fake_instance(node)
        self.ironic.nodes[node].update(
            instance_uuid=instance.uuid, provision_state=states.ACTIVE,
            power_state=states.POWER_ON)
        bdi = test_driver_provision.block_device_info(
            self.ctxt, instance,
            test_driver_provision.volume_bdm(self.ctxt, instance))
        self.add_targets(node, 'vol-1')
        self.ironic.cleaning = True
        real = self.ironic.set_provision_state

        def cleaning_lasts(node_uuid: str, target: str, **kw: Any) -> None:
            real(node_uuid, target, **kw)
            self.ironic.steps = 10 ** 6     # (once the tear-down is done)

        self.ironic.set_provision_state = cleaning_lasts  # type: ignore
        self.drivers['host1'].destroy(self.ctxt, instance, None,
                                      block_device_info=bdi)
        self.assertEqual(states.CLEANING,
                         self.ironic.nodes[node]['provision_state'])
        self.assertEqual(1, len(self.ironic.targets[node]))
        self.clean_done(node)
        managed = self.period()
        self.assertNotIn(node, managed['host1'])
        self.assertEqual([], self.ironic.targets[node])

    def test_a_node_taken_meanwhile_keeps_its_targets(self) -> None:
        # Listed, then reserved by a new build before the removal: the new
        # instance's targets are not the leftovers; its deploy removes
        # whatever it finds first.
        node = self.nodes[0]
        self.add_targets(node, 'vol-1')
        self.cleaning(node)
        self.period()
        self.clean_done(node)
        real = self.ironic.volume_targets

        def listed_then_taken(node_uuid: str, once: bool = False) -> Any:
            found = real(node_uuid, once=once)
            self.ironic.nodes[node_uuid]['instance_uuid'] = 'next-tenant'
            return found

        self.ironic.volume_targets = listed_then_taken  # type: ignore
        self.period()
        self.assertEqual([], self.ironic.calls_to('delete_volume_target'))
        self.assertEqual(1, len(self.ironic.targets[node]))

    def test_a_period_looks_at_a_batch_of_nodes_at_most(self) -> None:
        for node in self.nodes:
            self.add_targets(node, 'vol-' + node)
            self.cleaning(node)
        self.period()
        for node in self.nodes:
            self.clean_done(node)
        # The whole fleet comes out of cleaning at once; each host looks
        # at no more than BATCH nodes per period.
        self.patch_batch(2)
        managed = self.period()
        for host, nodes in managed.items():
            asked = {args[0] for args in self.ironic.calls_to(
                'volume_targets')} & nodes
            self.assertEqual(min(2, len(nodes)), len(asked), host)
        for _ in range(len(self.nodes)):
            self.period()
        self.assertEqual([], [t for n in self.nodes
                              for t in self.ironic.targets[n]])

    def patch_batch(self, n: int) -> None:
        self.useFixture(fixtures.MonkeyPatch(
            'nova_ironic_multi.period.leftovers.BATCH', n))

    def test_requests_are_asked_once_and_an_outage_waits_a_period(
            self) -> None:
        node = self.nodes[0]
        self.add_targets(node, 'vol-1')
        self.cleaning(node)
        self.period()
        self.clean_done(node)
        self.ironic.fail('volume_targets',
                         ironic.IronicUnavailable('connection refused'))
        managed = self.period()          # the period itself goes on
        self.assertIn(node, set().union(*managed.values()))
        self.assertEqual(1, len(self.ironic.targets[node]))
        self.assertIn('Ironic is unreachable', self.stdlog.logger.output)
        self.period()
        self.assertEqual([], self.ironic.targets[node])
        # Never retried: every request of the sweep was made once.
        for method in ('volume_targets', 'delete_volume_target'):
            self.assertEqual(len(self.ironic.calls_to(method)),
                             self.ironic.once[method], method)

    def test_a_node_ironic_refuses_to_clear_is_left_to_its_deploy(
            self) -> None:
        node = self.nodes[0]
        self.add_targets(node, 'vol-1')
        self.cleaning(node)
        self.period()
        self.clean_done(node)
        self.ironic.nodes[node]['power_state'] = states.POWER_ON
        self.period()
        self.assertIn('they are removed before its next deploy',
                      self.stdlog.logger.output)
        calls = len(self.ironic.calls_to('volume_targets'))
        self.period()
        self.assertEqual(calls, len(self.ironic.calls_to('volume_targets')))


    def test_a_failing_sweep_does_not_fail_the_period(self) -> None:
        node = self.nodes[0]
        self.add_targets(node, 'vol-1')
        self.cleaning(node)
        self.period()
        self.clean_done(node)
        self.ironic.fail('volume_targets', RuntimeError('bug'))
        managed = self.period()
        self.assertEqual(set(self.nodes), set().union(*managed.values()))
        self.assertIn('Looking for leftover volume targets failed',
                      self.stdlog.logger.output)


class RestingTest(base.DriverTestCase):

    def test_only_a_free_node_ironic_is_done_with_rests(self) -> None:
        rests = [leftovers.resting(nodeinfo.NodeInfo(
            uuid='n', instance_uuid=inst, provision_state=state,
            target_provision_state=target))
            for inst, state, target in (
                (None, states.AVAILABLE, None),
                (None, states.MANAGEABLE, None),
                ('i', states.AVAILABLE, None),
                (None, states.CLEANING, states.AVAILABLE),
                (None, states.CLEANWAIT, states.AVAILABLE),
                (None, states.DELETING, states.AVAILABLE),
                (None, states.CLEANFAIL, None),
                (None, states.AVAILABLE, states.ACTIVE))]
        self.assertEqual([True, True] + [False] * 6, rests)
