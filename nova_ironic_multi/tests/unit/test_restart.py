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
"""A build cut short by this host's death: ERROR at its start, with why.

Regression (chaos soak): servers of a batch boot ended in ERROR with no
fault when their compute was killed during the build and started again.
"""

from __future__ import annotations

from unittest import mock

from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from nova import objects

from nova_ironic_multi import compat
from nova_ironic_multi import driver
from nova_ironic_multi.hosts import restart
from nova_ironic_multi.tests.unit import base


class RestartFaultTest(base.DriverTestCase):

    def fault(self, uuid: str) -> str | None:
        faults = objects.InstanceFaultList.get_latest_by_instance_uuids(
            self.ctxt, [uuid])
        return faults[0].message if len(faults) else None

    def instances(self) -> objects.InstanceList:
        # What nova's init_host hands over: the host's instances.
        return objects.InstanceList.get_by_host(self.ctxt, self.HOST)

    def test_builds_nova_ends_at_start_get_a_fault(self) -> None:
        building = self.make_instance(vm_state=vm_states.BUILDING,
                                      task_state=task_states.SPAWNING)
        scheduled = self.make_instance(vm_state=vm_states.BUILDING)
        rebuilding = self.make_instance(
            vm_state=vm_states.STOPPED,
            task_state=task_states.REBUILD_SPAWNING)
        # Left alone or recovered otherwise by nova's start: no fault.
        quiet = [self.make_instance(),
                 self.make_instance(task_state=task_states.REBOOTING),
                 self.make_instance(vm_state=vm_states.ERROR),
                 self.make_instance(vm_state=vm_states.SOFT_DELETED,
                                    task_state=task_states.SPAWNING),
                 self.make_instance(host='other',
                                    vm_state=vm_states.BUILDING)]
        with self.assertLogs('nova_ironic_multi.hosts.restart', 'WARNING'):
            given = self.driver.process_instances_at_startup(
                self.ctxt, self.instances())
        # nova's list, unchanged.
        self.assertEqual(
            sorted(i.uuid for i in self.instances()),
            sorted(i.uuid for i in given))
        self.assertEqual(
            'Its build was interrupted: nova-compute on %s stopped while '
            'it ran (killed, crashed or restarted), and does not finish it '
            'when it starts again' % self.HOST, self.fault(building.uuid))
        self.assertIn('Its build was interrupted',
                      self.fault(scheduled.uuid) or '')
        self.assertIn('Its rebuild was interrupted',
                      self.fault(rebuilding.uuid) or '')
        self.assertEqual([None] * len(quiet),
                         [self.fault(i.uuid) for i in quiet])

    def test_a_fault_that_cannot_be_written_never_stops_the_start(
            self) -> None:
        inst = self.make_instance(vm_state=vm_states.BUILDING,
                                  task_state=task_states.SPAWNING)
        with mock.patch.object(objects.InstanceFault, 'create',
                               side_effect=exception.NovaException('db')):
            with self.assertLogs('nova_ironic_multi.hosts.restart', 'WARNING'):
                self.driver.process_instances_at_startup(self.ctxt,
                                                         self.instances())
        self.assertIsNone(self.fault(inst.uuid))

    def test_a_long_fault_fits_novas_column(self) -> None:
        # Regression (chaos soak): nova's instance_faults.message holds 255
        # characters; PostgreSQL refused a longer one, and the server went
        # to ERROR with no fault. (SQLite, here, enforces no length.)
        inst = self.make_instance()
        text = 'Why: ' + 'x' * 400
        restart.record_fault(self.ctxt, inst.uuid, self.HOST, text)
        (fault,) = objects.InstanceFaultList.get_by_instance_uuids(
            self.ctxt, [inst.uuid])
        self.assertEqual(text[:255], fault.message)
        self.assertEqual(text, fault.details)
        short = self.make_instance()
        restart.record_fault(self.ctxt, short.uuid, self.HOST, 'Why: y')
        (fault,) = objects.InstanceFaultList.get_by_instance_uuids(
            self.ctxt, [short.uuid])
        self.assertEqual(('Why: y', ''), (fault.message, fault.details))

    def test_a_nova_without_the_hook_gets_them_at_init_host(self) -> None:
        inst = self.make_instance(vm_state=vm_states.BUILDING,
                                  task_state=task_states.NETWORKING)
        with mock.patch.object(compat, 'lists_nodes_before_instances',
                               return_value=True):
            other = driver.IronicDriver(mock.Mock())
            other.init_host(self.HOST)
        self.assertIn('nova-compute on %s stopped' % self.HOST,
                      self.fault(inst.uuid) or '')
