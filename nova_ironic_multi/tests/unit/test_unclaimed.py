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

from collections.abc import Callable
import datetime
from typing import Any
from unittest import mock

import fixtures
from nova.compute import build_results
from nova.compute import task_states
from nova.compute import vm_states
from nova.conf import CONF
from nova import objects
from oslo_utils import timeutils

from nova_ironic_multi.hosts import restart
from nova_ironic_multi.period import unclaimed
from nova_ironic_multi.tests.unit import base

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

        swept = base.metric('builds_swept_total')
        with self.later(TIMEOUT + 5), self.assertLogs(
                'nova_ironic_multi.period.unclaimed', 'WARNING') as logs:
            ended = self.sweeper.sweep(self.HOST, {NODE})
        self.assertEqual([lost.uuid], ended)
        self.assertEqual(swept + 1, base.metric('builds_swept_total'))
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

    def test_a_build_its_compute_stopped_before_the_claim_ends_in_error(
            self) -> None:
        # Found by the soak (seed 2, a SIGTERM): the compute took the
        # request (nova cleared the task state) and stopped before it
        # claimed the node. BUILD, no task state, no host, for ever.
        interrupted = self.unclaimed(task_state=None)
        with self.later(TIMEOUT + 5):
            ended = self.sweeper.sweep(self.HOST, {NODE})
        self.assertEqual([interrupted.uuid], ended)
        self.assertEqual((vm_states.ERROR, None), self.state(interrupted))
        (fault,) = self.faults(interrupted)
        self.assertIn('or its compute stopped before it claimed one', fault)

    def test_a_build_a_compute_just_took_is_not_swept(self) -> None:
        # Created long ago (it waited for a node), taken just now: the
        # compute's write is recent, its claim may come any moment.
        inst = self.unclaimed()
        with self.later(TIMEOUT + 5):
            taken = objects.Instance.get_by_uuid(self.ctxt, inst.uuid)
            taken.task_state = None
            taken.save(expected_task_state=[task_states.SCHEDULING])
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.assertEqual((vm_states.BUILDING, None), self.state(inst))

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
                'nova_ironic_multi.period.unclaimed', 'WARNING'):
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                         self.state(lost))
        self.placement.get_allocations_for_consumer.side_effect = (
            lambda ctxt, uuid: {NODE: {}})
        with self.later(TIMEOUT + 65):
            self.assertEqual([lost.uuid],
                             self.sweeper.sweep(self.HOST, {NODE}))


    def test_builds_of_other_hypervisors_do_not_starve_the_batch(
            self) -> None:
        # More overdue builds on nodes no Ironic host manages than a batch
        # holds: this host's own lost build is still reached, in turn.
        others = [self.unclaimed(node='libvirt-%d' % i)
                  for i in range(unclaimed.BATCH + 5)]
        lost = self.unclaimed()
        ended = []
        with self.later(TIMEOUT + 5):
            for _ in range(3):
                ended += self.sweeper.sweep(self.HOST, {NODE})
        self.assertEqual([lost.uuid], ended)
        self.assertEqual((vm_states.ERROR, None), self.state(lost))
        for other in others:
            self.assertEqual((vm_states.BUILDING, task_states.SCHEDULING),
                             self.state(other))


class HeldBuildsTest(base.DriverTestCase):
    """What this host's manager holds is never swept; an ERROR sticks."""

    def setUp(self) -> None:
        super().setUp()
        self.flags(instance_build_timeout=TIMEOUT)
        self.placement = mock.Mock()
        self.placement.get_allocations_for_consumer.return_value = {
            NODE: {'resources': {'CUSTOM_BAREMETAL': 1}}}
        self.useFixture(fixtures.MockPatch(
            'nova.scheduler.client.report.report_client_singleton',
            return_value=self.placement))
        self.sweeper = unclaimed.UnclaimedBuilds(CONF)
        self.manager = FakeManager()
        self.sweeper.held.guard(self.manager)

    def later(self, seconds: float) -> Any:
        now = timeutils.utcnow() + datetime.timedelta(seconds=seconds)
        return mock.patch.object(timeutils, 'utcnow', return_value=now)

    def building(self) -> objects.Instance:
        return self.make_instance(host=None, vm_state=vm_states.BUILDING,
                                  task_state=task_states.SCHEDULING)

    def test_a_build_the_manager_holds_is_not_swept(self) -> None:
        inst = self.building()
        # Received; waiting for a build slot.
        self.manager.build_and_run_instance(self.ctxt, instance=inst)
        self.assertEqual([inst.uuid], self.manager.received)
        with self.later(TIMEOUT + 5):
            self.assertEqual([], self.sweeper.sweep(self.HOST, {NODE}))
        # It starts: nova's manager builds it.
        self.assertEqual('built', self.manager._do_build_and_run_instance(
            self.ctxt, inst))
        self.assertEqual([inst.uuid], self.manager.started)

    def test_a_build_the_manager_runs_is_not_swept(self) -> None:
        # Started here, not claimed yet: no host, no task state, and this
        # host's sweep must not error it under its own manager.
        inst = self.building()
        seen: list[list[str]] = []

        def build(context: Any, instance: objects.Instance) -> str:
            instance.task_state = None
            instance.save(expected_task_state=[task_states.SCHEDULING])
            with self.later(3 * TIMEOUT):
                seen.append(self.sweeper.sweep(self.HOST, {NODE}))
            return 'built'

        self.manager.build = build
        self.manager.build_and_run_instance(self.ctxt, instance=inst)
        self.manager._do_build_and_run_instance(self.ctxt, inst)
        self.assertEqual([[]], seen)
        got = objects.Instance.get_by_uuid(self.ctxt, inst.uuid)
        self.assertEqual((vm_states.BUILDING, None),
                         (got.vm_state, got.task_state))

    def test_a_build_swept_before_it_came_is_dropped(self) -> None:
        inst = self.building()
        with self.later(TIMEOUT + 5):
            self.assertEqual([inst.uuid],
                             self.sweeper.sweep(self.HOST, {NODE}))
        with self.assertLogs(
                'nova_ironic_multi.period.unclaimed', 'WARNING') as logs:
            # The guard's wrapper answers None for a dropped build; mypy
            # sees the fake's method, declared to return nothing (ignored).
            self.assertIsNone(self.manager.build_and_run_instance(  # type: ignore[func-returns-value]
                self.ctxt, instance=inst))
        self.assertEqual([], self.manager.received)
        self.assertIn('Dropped the build request of instance %s: it is '
                      'error now' % inst.uuid, logs.output[0])

    def test_a_build_that_stopped_building_while_it_waited_fails(
            self) -> None:
        # Received before nova's start put it in ERROR (or another host's
        # sweep did): nova's outcome for a build whose instance changed
        # under it, not a revival with the fault kept.
        inst = self.building()
        self.manager.build_and_run_instance(self.ctxt, instance=inst)
        other = objects.Instance.get_by_uuid(self.ctxt, inst.uuid)
        other.vm_state = vm_states.ERROR
        other.task_state = None
        other.save()
        self.assertEqual(build_results.FAILED,
                         self.manager._do_build_and_run_instance(
                             self.ctxt, inst))
        self.assertEqual([], self.manager.started)

    def test_without_a_build_timeout_nothing_is_read(self) -> None:
        self.flags(instance_build_timeout=0)
        inst = self.building()
        with mock.patch.object(objects.Instance, 'get_by_uuid') as read:
            self.manager.build_and_run_instance(self.ctxt, instance=inst)
            self.manager._do_build_and_run_instance(self.ctxt, inst)
        read.assert_not_called()
        self.assertEqual([inst.uuid], self.manager.started)


class FakeManager:
    """The two methods of nova's compute manager the guard wraps."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.started: list[str] = []
        #: What a started build does, if not just return ``'built'``.
        self.build: Callable[[Any, Any], str] | None = None

    def build_and_run_instance(self, context: Any, instance: Any,
                               **kwargs: Any) -> None:
        self.received.append(instance.uuid)

    def _do_build_and_run_instance(self, context: Any, instance: Any,
                                   *args: Any, **kwargs: Any) -> str:
        self.started.append(instance.uuid)
        if self.build is not None:
            return self.build(context, instance)
        return 'built'
