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
"""By default a wait lasts as long as Ironic works; a bound only if set."""

from __future__ import annotations

from typing import Any

import fixtures
from nova.compute import task_states
from nova.conf import CONF
from nova import exception
from nova import objects
from oslo_config import cfg
import pytest

from nova_ironic_multi.actions import waits
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.unit import base

IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'
#: Simulated seconds per poll: ten polls outlast the old 3600 s bound.
HOUR_TENTH = 400.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


@pytest.mark.parametrize('timeout', [0, None])
def test_no_bound_waits_until_done(timeout: float | None) -> None:
    clock = Clock()
    reads = iter(['deploying'] * 5000 + ['active'])
    assert waits.until(lambda: next(reads), lambda v: v == 'active',
                       timeout=timeout, interval=2.0, what='the deploy',
                       sleep=clock.sleep, clock=lambda: clock.now) == 'active'
    # 10000 s: far past any of the old default bounds.
    assert clock.slept == 10000


def test_a_bound_still_ends_the_wait() -> None:
    clock = Clock()
    with pytest.raises(waits.Timeout, match='within 60 seconds'):
        waits.until(lambda: 'deploying', lambda v: False, timeout=60,
                    interval=2.0, what='the deploy', sleep=clock.sleep,
                    clock=lambda: clock.now)
    assert clock.now == 60


def test_defaults_bound_no_deploy_rescue_or_power_change() -> None:
    conf = cfg.ConfigOpts()
    nim_conf.register_opts(conf)
    opts = conf.ironic_multi
    assert (opts.deploy_timeout, opts.rescue_timeout,
            opts.power_timeout) == (0, 0, 0)
    assert opts.console_timeout is None


class SlowIronicTest(base.DriverTestCase):
    """Operations Ironic completes after hours, at the default options.

    Each poll advances a simulated clock by ``HOUR_TENTH`` seconds; the
    fake Ironic needs ``steps`` polls. The old defaults (3600, 1800, 300)
    failed each of these.
    """

    def setUp(self) -> None:
        super().setUp()
        # Undo the base class's short bounds: the options' own defaults.
        for name in ('deploy_timeout', 'rescue_timeout', 'power_timeout'):
            CONF.clear_override(name, group='ironic_multi')
        self.clock = Clock()
        real = waits.until

        def until(*args: Any, **kwargs: Any) -> Any:
            kwargs.update(sleep=lambda s: self.clock.sleep(HOUR_TENTH),
                          clock=lambda: self.clock.now)
            return real(*args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova_ironic_multi.actions.waits.until', until))
        self.node = self.ironic.add_node()
        self.ironic.steps = 12

    def test_a_deploy_of_hours_succeeds(self) -> None:
        instance = self.fake_instance(self.node, image_ref=IMAGE)
        self.driver.prepare_for_spawn(instance)
        self.driver.spawn(self.ctxt, instance, objects.ImageMeta.from_dict(
            {'id': IMAGE, 'properties': {}}), [], None, {},
            network_info=self.network_info())
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])
        self.assertGreater(self.clock.now, 3600)
        self.assertEqual(['active'], [
            c[1] for c in self.ironic.calls_to('set_provision_state')])

    def on_node(self) -> Any:
        instance = self.fake_instance(self.node)
        self.ironic.nodes[self.node].update(
            instance_uuid=instance.uuid, provision_state=states.ACTIVE,
            power_state=states.POWER_ON)
        return instance

    def test_a_rescue_of_hours_succeeds(self) -> None:
        instance = self.on_node()
        instance.task_state = task_states.RESCUING
        self.driver.rescue(self.ctxt, instance, None,
                           objects.ImageMeta.from_dict({'properties': {}}),
                           'pw', None, None)
        self.assertEqual(states.RESCUE,
                         self.ironic.nodes[self.node]['provision_state'])
        self.assertGreater(self.clock.now, 1800)

    def test_a_power_change_of_an_hour_succeeds(self) -> None:
        instance = self.on_node()
        self.driver.power_off(instance)
        self.assertEqual(states.POWER_OFF,
                         self.ironic.nodes[self.node]['power_state'])
        self.assertGreater(self.clock.now, 300)

    def test_a_bound_set_by_the_operator_applies(self) -> None:
        self.flags(deploy_timeout=3600, group='ironic_multi')
        instance = self.fake_instance(self.node, image_ref=IMAGE)
        self.driver.prepare_for_spawn(instance)
        exc = self.assertRaises(
            exception.InstanceDeployFailure, self.driver.spawn, self.ctxt,
            instance, objects.ImageMeta.from_dict(
                {'id': IMAGE, 'properties': {}}), [], None, {},
            network_info=self.network_info())
        self.assertIn('did not finish within 3600 seconds', str(exc))

