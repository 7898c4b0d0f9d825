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
"""A failed poll is not an answer: every wait polls on until its timeout."""

from __future__ import annotations

import logging
from typing import Any

import fixtures
from nova.compute import task_states
from nova import exception
from nova import objects
import pytest

from nova_ironic_multi.actions import waits
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.unit import base

BUSY = 'No free conductor workers available (HTTP 503)'
IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'


class Clock:
    """A fake monotonic clock that sleeping advances."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def poll(outcomes: list[Any]) -> Any:
    """A read returning (or raising) each outcome in turn."""
    def read() -> Any:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return read


def test_failed_polls_are_logged_and_polled_past(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outcomes: list[Any] = ['deploying', ironic.IronicUnavailable(BUSY),
                           ironic.IronicUnavailable(BUSY), 'deploying',
                           'active']
    assert waits.until(poll(outcomes), lambda v: v == 'active', timeout=60,
                       interval=2, what='the deploy', sleep=clock.sleep,
                       clock=lambda: clock.now) == 'active'
    assert outcomes == []
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == 'WARNING']
    assert len(warnings) == 2
    assert '(1 failed polls so far)' in warnings[0]
    assert '(2 failed polls so far)' in warnings[1]
    assert BUSY in warnings[1] and 'the deploy' in warnings[1]


def test_failing_polls_end_only_at_the_timeout() -> None:
    clock = Clock()
    reads = []

    def read() -> str:
        reads.append(clock.now)
        raise ironic.IronicUnavailable('connection refused')

    with pytest.raises(waits.Timeout) as e:
        waits.until(read, lambda v: True, timeout=10, interval=2,
                    what='the tear-down', sleep=clock.sleep,
                    clock=lambda: clock.now)
    assert reads == [0, 2, 4, 6, 8, 10]
    assert 'within 10 seconds' in str(e.value)
    assert 'connection refused' in str(e.value)
    assert '6 polls failed' in str(e.value)


@pytest.mark.parametrize('answer', [
    ironic.NodeNotFound('gone'), ironic.BadRequest('no'),
    ironic.IronicError('403 forbidden')])
def test_an_answer_ends_the_wait_at_once(answer: Exception) -> None:
    clock = Clock()
    outcomes: list[Any] = [answer, 'active']
    with pytest.raises(type(answer)):
        waits.until(poll(outcomes), lambda v: v == 'active', timeout=60,
                    interval=2, what='x', sleep=clock.sleep,
                    clock=lambda: clock.now)
    assert clock.now == 0


class DriverWaitsTest(base.DriverTestCase):
    """The waits of deploy, tear-down, power, rescue and consoles."""

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node()
        self.warnings = self.useFixture(fixtures.FakeLogger(
            name='nova_ironic_multi.actions.waits', level=logging.WARNING))

    def fail_after(self, method: str, then: str, times: int) -> None:
        """After each call of ``method``, ``times`` calls of ``then`` fail.

        (Only reads after the request fail: the requests before it, the
        deploy's own node read included, are not the wait's polls.)
        """
        real = getattr(self.ironic, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            self.ironic.fail(then, ironic.IronicUnavailable(BUSY), times)
            return result

        setattr(self.ironic, method, wrapped)

    def assert_failed_polls_logged(self, count: int, waits: int = 1) -> None:
        lines = [line for line in self.warnings.output.splitlines()
                 if 'failed polls so far' in line]
        self.assertEqual(count * waits, len(lines), self.warnings.output)
        self.assertIn('(%d failed polls so far)' % count, lines[-1])

    def on_node(self, **fields: Any) -> Any:
        instance = self.fake_instance(self.node)
        self.ironic.nodes[self.node].update(instance_uuid=instance.uuid,
                                            **fields)
        return instance

    def spawn(self, instance: Any) -> None:
        self.driver.spawn(self.ctxt, instance, objects.ImageMeta.from_dict(
            {'id': IMAGE, 'properties': {}}), [], None, {},
            network_info=self.network_info())

    def test_deploy_outlasts_failed_polls_and_is_not_undone(self) -> None:
        instance = self.fake_instance(self.node, image_ref=IMAGE)
        self.driver.prepare_for_spawn(instance)
        self.ironic.steps = 2
        self.fail_after('set_provision_state', 'node_for_instance', 3)
        self.spawn(instance)
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.ACTIVE, node['provision_state'])
        self.assertEqual(instance.uuid, node['instance_uuid'])
        # Never torn down: one deploy request, nothing else.
        self.assertEqual(['active'], [
            c[1] for c in self.ironic.calls_to('set_provision_state')])
        self.assertEqual(3 + 2, len(self.ironic.calls_to(
            'node_for_instance')))
        self.assert_failed_polls_logged(3)

    def test_deploy_whose_polls_all_fail_ends_at_its_timeout(self) -> None:
        self.flags(deploy_timeout=1, group='ironic_multi')
        instance = self.fake_instance(self.node, image_ref=IMAGE)
        self.driver.prepare_for_spawn(instance)
        self.fail_after('set_provision_state', 'node_for_instance', 10 ** 4)
        exc = self.assertRaises(exception.InstanceDeployFailure,
                                self.spawn, instance)
        self.assertIn('did not finish within 1 seconds', str(exc))
        self.assertIn(BUSY, str(exc))

    def test_tear_down_outlasts_failed_polls(self) -> None:
        instance = self.on_node(provision_state=states.ACTIVE,
                                power_state=states.POWER_ON)
        self.ironic.steps = 2
        self.fail_after('set_provision_state', 'get_node', 2)
        self.driver.destroy(self.ctxt, instance, self.network_info())
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.AVAILABLE, node['provision_state'])
        self.assertIsNone(node['instance_uuid'])
        self.assert_failed_polls_logged(2)

    def test_power_waits_outlast_failed_polls(self) -> None:
        instance = self.on_node(provision_state=states.ACTIVE,
                                power_state=states.POWER_ON)
        self.ironic.steps = 2
        self.fail_after('set_power_state', 'get_node', 2)
        self.driver.power_off(instance)
        self.assertEqual(states.POWER_OFF,
                         self.ironic.nodes[self.node]['power_state'])
        self.driver.power_on(self.ctxt, instance, self.network_info())
        self.assertEqual(states.POWER_ON,
                         self.ironic.nodes[self.node]['power_state'])
        self.driver.reboot(self.ctxt, instance, None, 'HARD')
        # One request each: the failed polls were not taken for failures.
        self.assertEqual(['off', 'on', 'reboot'], [
            c[1] for c in self.ironic.calls_to('set_power_state')])
        self.assert_failed_polls_logged(2, waits=3)

    def test_rescue_waits_outlast_failed_polls(self) -> None:
        instance = self.on_node(provision_state=states.ACTIVE,
                                power_state=states.POWER_ON)
        instance.task_state = task_states.RESCUING
        self.ironic.steps = 2
        self.fail_after('set_provision_state', 'get_node', 2)
        self.driver.rescue(self.ctxt, instance, None,
                           objects.ImageMeta.from_dict({'properties': {}}),
                           'pw', None, None)
        self.assertEqual(states.RESCUE,
                         self.ironic.nodes[self.node]['provision_state'])
        self.driver.unrescue(self.ctxt, instance)
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])
        self.assert_failed_polls_logged(2, waits=2)

    def test_console_wait_outlasts_failed_polls(self) -> None:
        instance = self.on_node(provision_state=states.ACTIVE)
        self.ironic.nodes[self.node]['console'].update(
            console_info={'type': 'vnc', 'url': 'http://proxy'})
        self.ironic.nodes[self.node]['driver_internal_info'] = {
            'vnc_host': '10.0.0.5', 'vnc_port': 5901}
        self.fail_after('set_console_mode', 'get_console', 2)
        vnc = self.driver.get_vnc_console(self.ctxt, instance)
        self.assertEqual(('10.0.0.5', 5901), (vnc.host, vnc.port))
        self.assert_failed_polls_logged(2)
