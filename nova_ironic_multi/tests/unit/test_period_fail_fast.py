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
"""Nothing in nova's period or start waits on retries (issue 20, item 1).

The driver runs on the real :class:`ironic.Ironic` (its retry policy, its
sleeps counted) over a stand-in python-ironicclient, with nova's defaults
raised to 60 retries 2 s apart: every request of a period, and of the
start, is asked once whatever fails (a 503, a refused connection, a
connect timeout), and the period reports NotReady.
"""

from __future__ import annotations

import types
from typing import Any
from unittest import mock

from ironicclient import exc as ir_exc
from keystoneauth1 import exceptions as ks_exc
from nova import exception
from nova.virt import virtapi

from nova_ironic_multi import compat
from nova_ironic_multi import driver
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.unit import base

#: The real client class (the driver tests patch ``ironic.Ironic``).
REAL_IRONIC = ironic.Ironic
RETRIES = 60
OUTAGES = {
    '503': ir_exc.ServiceUnavailable('No free conductor workers available'),
    'refused': ks_exc.ConnectFailure('Connection refused'),
    'connect timeout': ks_exc.ConnectTimeout('Connection timed out'),
}
SHARD = 'rack-a'


def api_node(uuid: str, instance: str | None = None,
             shard: str | None = SHARD) -> Any:
    return types.SimpleNamespace(
        uuid=uuid, instance_uuid=instance, shard=shard, conductor_group='',
        provision_state=states.ACTIVE if instance else states.AVAILABLE,
        power_state=states.POWER_OFF, resource_class='baremetal',
        properties={'cpu_arch': 'x86_64'})


class PeriodFailsFastTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(api_max_retries=RETRIES, api_retry_interval=2,
                   group='ironic')
        self.flags(divide='shards', group='ironic_multi')
        self.sleeps: list[float] = []
        real = REAL_IRONIC(driver.CONF, sleep=self.sleeps.append)
        self.api = mock.Mock()
        real._client, real._version = self.api, (1, 115)
        self.listed: list[Any] = []
        self.api.node_pages.page.side_effect = (
            lambda **kw: (list(self.listed), False))
        self.api.shard.list.return_value = [
            types.SimpleNamespace(name=SHARD, count=1)]
        # (Patched by the base class: construct the real one instead.)
        ironic.Ironic.return_value = real  # type: ignore[attr-defined]
        self.driver = driver.IronicDriver(virtapi.VirtAPI())
        self.driver.init_host(self.HOST)
        self.make_service(self.HOST)

    def attempts(self) -> int:
        """Requests sent to the stand-in client so far."""
        return sum(m.call_count for m in (
            self.api.shard.list, self.api.node_pages.page, self.api.node.get,
            self.api.node.get_by_instance_uuid))

    def assert_one_attempt_not_ready(self, failing: mock.Mock,
                                     error: Exception) -> None:
        failing.side_effect = error
        failing.reset_mock()
        with self.assertLogs('nova_ironic_multi.driver', 'WARNING') as log:
            self.assertRaises(exception.VirtDriverNotReady,
                              self.driver.get_available_nodes)
        self.assertIn('Ironic nodes not refreshed', log.output[0])
        self.assertEqual(1, failing.call_count)
        self.assertEqual([], self.sleeps)

    def test_counting_the_shards_is_asked_once(self) -> None:
        for name, error in OUTAGES.items():
            with self.subTest(name):
                self.assert_one_attempt_not_ready(self.api.shard.list, error)
                self.assertEqual(1, self.attempts())

    def test_reading_a_node_that_left_the_shards_is_asked_once(
            self) -> None:
        inst = self.make_instance()
        node = api_node('n1', instance=inst.uuid)
        self.listed = [node]
        # Cold: the whole scope once; then the node leaves this host's
        # listing (relabelled), so the warm period reads it by UUID.
        self.assertEqual(['n1'], self.driver.get_available_nodes())
        self.listed = []
        for name, error in OUTAGES.items():
            with self.subTest(name):
                self.assert_one_attempt_not_ready(self.api.node.get, error)

    def test_reading_the_node_of_an_instance_is_asked_once(self) -> None:
        self.listed = [api_node('n1')]
        self.assertEqual(['n1'], self.driver.get_available_nodes())
        # An instance of this host that no listed node carries: the warm
        # period looks for its node by instance.
        self.make_instance()
        for name, error in OUTAGES.items():
            with self.subTest(name):
                self.assert_one_attempt_not_ready(
                    self.api.node.get_by_instance_uuid, error)

    def test_the_resources_of_an_unlisted_node_are_asked_once(self) -> None:
        self.listed = [api_node('n1')]
        self.driver.get_available_nodes()
        for name, error in OUTAGES.items():
            with self.subTest(name):
                self.api.node.get.reset_mock()
                self.api.node.get.side_effect = error
                self.assertRaises(exception.NovaException,
                                  self.driver.get_available_resource, 'n2')
                self.assertEqual(1, self.api.node.get.call_count)
                self.assertEqual([], self.sleeps)

    def test_start_asks_each_instance_once_then_retries_again(self) -> None:
        inst = self.fake_instance('n1')
        self.api.shard.list.side_effect = OUTAGES['503']
        self.api.node.get_by_instance_uuid.side_effect = OUTAGES['503']
        # nova's start: init_host, the nodes, the instances one by one.
        self.assertRaises(exception.VirtDriverNotReady,
                          self.driver.get_available_nodes)
        self.driver.process_instances_at_startup(self.ctxt, [inst])
        self.assertRaises(exception.NovaException, self.driver.get_info,
                          inst, use_cache=False)
        self.assertEqual(1, self.api.node.get_by_instance_uuid.call_count)
        self.assertEqual([], self.sleeps)
        # The start's period ends the start: a server action's read (not
        # a period) goes back to nova's retries.
        self.api.shard.list.side_effect = None
        self.driver.get_available_nodes()
        self.api.node.get_by_instance_uuid.reset_mock()
        self.assertRaises(exception.NovaException, self.driver.get_info,
                          inst, use_cache=False)
        self.assertEqual(1 + RETRIES,
                         self.api.node.get_by_instance_uuid.call_count)
        self.assertEqual([2] * RETRIES, self.sleeps)

    def _start_then_period(self, nova_calls_hook: bool) -> int:
        """Attempts of a server action's read after a start and a period.

        The start calls process_instances_at_startup or not.
        """
        inst = self.fake_instance('n1')
        self.api.node.get_by_instance_uuid.reset_mock()
        self.api.node.get_by_instance_uuid.side_effect = OUTAGES['503']
        self.driver.get_available_nodes()
        if nova_calls_hook:
            self.driver.process_instances_at_startup(self.ctxt, [inst])
        self.assertRaises(exception.NovaException, self.driver.get_info,
                          inst, use_cache=False)
        self.assertEqual(1, self.api.node.get_by_instance_uuid.call_count)
        self.driver.get_available_nodes()
        self.api.node.get_by_instance_uuid.reset_mock()
        self.assertRaises(exception.NovaException, self.driver.get_info,
                          inst, use_cache=False)
        count: int = self.api.node.get_by_instance_uuid.call_count
        return count

    def test_a_nova_without_the_startup_hook_ends_the_start_too(
            self) -> None:
        # nova 32 and 33 never call process_instances_at_startup: the
        # start's node listing stands for it, and the period after it ends
        # the start as on nova 34.
        with mock.patch.object(compat, 'lists_nodes_before_instances',
                               return_value=True):
            self.assertEqual(1 + RETRIES, self._start_then_period(False))

    def test_a_nova_with_the_startup_hook_waits_for_it(self) -> None:
        # nova 34: the listing before the hook is still the start's.
        with mock.patch.object(compat, 'lists_nodes_before_instances',
                               return_value=False):
            self.assertEqual(1, self._start_then_period(False))
        self.driver.init_host(self.HOST)
        with mock.patch.object(compat, 'lists_nodes_before_instances',
                               return_value=False):
            self.assertEqual(1 + RETRIES, self._start_then_period(True))
