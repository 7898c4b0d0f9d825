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
"""Builds no compute claimed, on nova's database (:mod:`unclaimed`).

Regression (chaos soak, seed 159): a boot sent as its compute stopped was
never built, and the server stayed BUILD for ever; the functional test
``test_unclaimed`` loses a build on the real in-process cell.
"""

from __future__ import annotations

import datetime
from typing import Any
from unittest import mock

import fixtures
from nova.compute import task_states
from nova.compute import vm_states
from nova.conf import CONF
from nova import objects
from oslo_utils import timeutils

from nova_ironic_multi import restart
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi import unclaimed

NODE = 'node-mine'
OTHER = 'node-theirs'
TIMEOUT = 60


class UnclaimedBuildsTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(instance_build_timeout=TIMEOUT)
        #: instance uuid -> the nodes placement has its allocation on
        self.allocations: dict[str, list[str]] = {}
        self.placement = mock.Mock()
        self.placement.get_allocations_for_consumer.side_effect = (
            lambda ctxt, uuid: {n: {'resources': {'CUSTOM_BAREMETAL': 1}}
                                for n in self.allocations.get(uuid, [])})
        self.useFixture(fixtures.MockPatch(
            'nova.scheduler.client.report.report_client_singleton',
            return_value=self.placement))
        self.sweeper = unclaimed.UnclaimedBuilds(CONF)

    def unclaimed(self, node: str | None = NODE,
                  **fields: Any) -> objects.Instance:
        fields.setdefault('vm_state', vm_states.BUILDING)
        fields.setdefault('task_state', task_states.SCHEDULING)
        inst = self.make_instance(host=None, **fields)
        if node is not None:
            self.allocations[inst.uuid] = [node]
        return inst

    def later(self, seconds: float) -> Any:
        now = timeutils.utcnow() + datetime.timedelta(seconds=seconds)
        return mock.patch.object(timeutils, 'utcnow', return_value=now)

    def state(self, inst: objects.Instance) -> tuple[str, str | None]:
        got = objects.Instance.get_by_uuid(self.ctxt, inst.uuid)
        return got.vm_state, got.task_state

    def faults(self, inst: objects.Instance) -> list[str]:
        return [f.message for f in objects.InstanceFaultList
                .get_by_instance_uuids(self.ctxt, [inst.uuid])]

    def test_overdue_build_on_a_managed_node_ends_in_error(self) -> None:
        lost = self.unclaimed()
        elsewhere = self.unclaimed(node=OTHER)
        claimed = self.make_instance(vm_state=vm_states.BUILDING,
                                     task_state=task_states.SPAWNING)
        self.allocations[claimed.uuid] = [NODE]
        # Not overdue yet: maybe still on its way.
        self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                         self.state(lost))

        with self.later(TIMEOUT + 5), self.assertLogs(
                'nova_ironic_multi.unclaimed', 'WARNING') as logs:
            ended = self.sweeper.sweep(self.HOST, {NODE})
        self.assertEqual([lost.uuid], ended)
        self.assertEqual((vm_states.ERROR, None), self.state(lost))
        (fault,) = self.faults(lost)
        self.assertIn('Its build never started', fault)
        self.assertIn('instance_build_timeout (%d s)' % TIMEOUT, fault)
        self.assertIn(NODE, '\n'.join(logs.output))
        # Another host's node, and a build a compute took: untouched.
        self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                         self.state(elsewhere))
        self.assertEqual((vm_states.BUILDING, task_states.SPAWNING),
                         self.state(claimed))
        self.assertEqual([], self.faults(elsewhere) + self.faults(claimed))

    def test_its_fault_is_whole_in_novas_column(self) -> None:
        self.assertLessEqual(len(unclaimed.fault_message(10 ** 9)),
                             restart.FAULT_MESSAGE_LENGTH)

    def test_nova_default_timeout_looks_at_nothing(self) -> None:
        self.flags(instance_build_timeout=0)
        lost = self.unclaimed()
        with self.later(3600):
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.placement.get_allocations_for_consumer.assert_not_called()
        self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                         self.state(lost))

    def test_a_build_a_compute_takes_meanwhile_is_left_alone(self) -> None:
        lost = self.unclaimed()

        def compute_takes_it(ctxt: Any, uuid: str) -> dict[str, Any]:
            # Between this host's read and its write, the compute that got
            # the request starts the build (nova clears the task state).
            mine = objects.Instance.get_by_uuid(self.ctxt, uuid)
            mine.task_state = None
            mine.save(expected_task_state=[task_states.SCHEDULING])
            return {NODE: {}}

        self.placement.get_allocations_for_consumer.side_effect = (
            compute_takes_it)
        with self.later(TIMEOUT + 5):
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.assertEqual((vm_states.BUILDING, None), self.state(lost))
        self.assertEqual([], self.faults(lost))

    def test_a_placement_outage_waits_for_the_next_period(self) -> None:
        lost = self.unclaimed()
        self.placement.get_allocations_for_consumer.side_effect = (
            RuntimeError('placement is down'))
        with self.later(TIMEOUT + 5), self.assertLogs(
                'nova_ironic_multi.unclaimed', 'WARNING'):
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                         self.state(lost))
        self.placement.get_allocations_for_consumer.side_effect = (
            lambda ctxt, uuid: {NODE: {}})
        with self.later(TIMEOUT + 65):
            self.assertEqual([lost.uuid],
                             self.sweeper.sweep(self.HOST, {NODE}))

