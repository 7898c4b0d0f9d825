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
"""Requests queued for a host for instances that moved away since.

The functional test (test_fenced.QueuedRequestsTest) queues casts through
nova's API to a stopped host and brings it back; these pin the guard's
rules on nova's database.
"""

from __future__ import annotations

import inspect
from typing import Any
from unittest import mock

from nova.compute import manager as compute_manager
from nova.compute import rpcapi as compute_rpcapi
from nova import objects
from nova.virt import virtapi
import oslo_messaging

from nova_ironic_multi import driver
from nova_ironic_multi.hosts import stale_requests
from nova_ironic_multi.tests.unit import base


class FakeManager:
    """Methods named as nova's compute manager's, recording their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def rescue_instance(self, context: Any, instance: Any,
                        **kwargs: Any) -> str:
        self.calls.append(('rescue_instance', instance.uuid))
        return 'rescued'

    def rebuild_instance(self, context: Any, instance: Any,
                         **kwargs: Any) -> None:
        self.calls.append(('rebuild_instance', instance.uuid))

    def prep_resize(self, context: Any, instance: Any,
                    **kwargs: Any) -> None:
        self.calls.append(('prep_resize', instance.uuid))


class GuardTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.manager = FakeManager()
        self.guarded = stale_requests.guard(self.manager, lambda: 'HOST1')

    def test_only_methods_the_release_has_are_guarded_once(self) -> None:
        self.assertEqual(['rebuild_instance', 'rescue_instance'],
                         sorted(self.guarded))
        # Bound methods, as nova's RPC tracking wrapper needs them.
        self.assertTrue(inspect.ismethod(self.manager.rescue_instance))
        self.assertEqual([], stale_requests.guard(self.manager,
                                                  lambda: 'host1'))

    def test_every_guarded_name_is_an_rpc_method_on_one_instance(
            self) -> None:
        # Names a nova release lacks are skipped: this one has them all (a
        # typo would guard nothing), each a method of the compute manager
        # that nova's compute RPC client sends with an instance.
        for name in stale_requests.GUARDED:
            self.assertTrue(callable(getattr(compute_manager.ComputeManager,
                                             name, None)), name)
            client = getattr(compute_rpcapi.ComputeAPI, name)
            self.assertIn('instance', inspect.signature(client).parameters,
                          name)

    def test_a_request_for_an_instance_on_another_host_is_dropped(
            self) -> None:
        inst = self.make_instance(host='host2')
        with self.assertLogs('nova_ironic_multi.hosts.stale_requests',
                             'WARNING') as logs:
            self.assertIsNone(self.manager.rescue_instance(
                self.ctxt, instance=inst))
        self.assertEqual([], self.manager.calls)
        self.assertIn('Dropped a rescue_instance request for instance %s: '
                      'it is on host host2 now, not on this one (HOST1)'
                      % inst.uuid, logs.output[0])
        # Nothing written: the instance is as its host has it.
        self.assertEqual('host2', objects.Instance.get_by_uuid(
            self.ctxt, inst.uuid).host)

    def test_requests_for_this_hosts_instances_go_on(self) -> None:
        here = self.make_instance(host='host1')
        shelved = self.make_instance(host=None)
        self.assertEqual('rescued', self.manager.rescue_instance(
            self.ctxt, instance=here))
        self.manager.rescue_instance(self.ctxt, shelved)
        self.assertEqual([('rescue_instance', here.uuid),
                          ('rescue_instance', shelved.uuid)],
                         self.manager.calls)

    def test_an_evacuation_and_the_migration_family_are_not_guarded(
            self) -> None:
        inst = self.make_instance(host='host2')
        self.manager.rebuild_instance(self.ctxt, instance=inst,
                                      evacuate=True)
        self.manager.prep_resize(self.ctxt, instance=inst)
        self.assertEqual([('rebuild_instance', inst.uuid),
                          ('prep_resize', inst.uuid)], self.manager.calls)

    def test_a_gone_or_unreadable_instance_is_left_to_nova(self) -> None:
        gone = self.make_instance(host='host2')
        gone.destroy()
        self.manager.rescue_instance(self.ctxt, instance=gone)
        inst = self.make_instance(host='host2')
        with mock.patch.object(
                objects.Instance, 'get_by_uuid',
                side_effect=oslo_messaging.MessagingTimeout('conductor')), \
                self.assertLogs('nova_ironic_multi.hosts.stale_requests',
                                'WARNING') as logs:
            self.manager.rescue_instance(self.ctxt, instance=inst)
        self.assertEqual([('rescue_instance', gone.uuid),
                          ('rescue_instance', inst.uuid)], self.manager.calls)
        self.assertIn('acting on the request as it came', logs.output[0])

    def test_init_host_guards_the_compute_manager(self) -> None:
        manager = FakeManager()
        api = virtapi.VirtAPI()
        api._compute = manager      # as nova's ComputeVirtAPI holds it
        driver.IronicDriver(api).init_host('host3')
        inst = self.make_instance(host='host2')
        manager.rescue_instance(self.ctxt, instance=inst)
        self.assertEqual([], manager.calls)
