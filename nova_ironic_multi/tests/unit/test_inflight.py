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
"""What a new host does with an instance taken over in flight."""

from __future__ import annotations

import unittest

from nova.compute import task_states as ts
from nova.compute import vm_states as vs

from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts.recovery import Step
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states


def node(power: str | None = states.POWER_ON,
         provision: str | None = states.ACTIVE,
         **fields: object) -> nodeinfo.NodeInfo:
    return nodeinfo.NodeInfo('n', instance_uuid='i', power_state=power,
                             provision_state=provision,
                             **fields)  # type: ignore[arg-type]


OFF = node(states.POWER_OFF)
ON = node()


class DecideTest(unittest.TestCase):

    def check(self, step: Step, vm: str | None, task: str | None,
              found: nodeinfo.NodeInfo | None = ON) -> None:
        self.assertEqual(step, recovery.decide(vm, task, found).step,
                         (vm, task, found))

    def test_like_nova_restart(self) -> None:
        # (vm_state, task_state, node) -> step, as _init_instance does.
        self.check(Step.NONE, vs.ACTIVE, None)
        self.check(Step.NONE, vs.ERROR, ts.REBOOTING)
        self.check(Step.NONE, vs.SOFT_DELETED, None)
        self.check(Step.DELETE, vs.ERROR, ts.DELETING)
        self.check(Step.DELETE, vs.ACTIVE, ts.DELETING)
        self.check(Step.DELETE, vs.DELETED, None)
        self.check(Step.ERROR, vs.BUILDING, None, None)
        self.check(Step.ERROR, vs.BUILDING, ts.SPAWNING,
                   node(states.POWER_OFF, states.DEPLOYING))
        self.check(Step.ERROR, vs.ACTIVE, ts.REBUILD_SPAWNING)
        self.check(Step.ERROR, vs.STOPPED, ts.REBUILDING)
        self.check(Step.CLEAR, vs.ACTIVE, ts.IMAGE_SNAPSHOT)
        self.check(Step.CLEAR, vs.ACTIVE, ts.RESIZE_PREP)
        self.check(Step.STOP, vs.ACTIVE, ts.POWERING_OFF)
        self.check(Step.START, vs.STOPPED, ts.POWERING_ON)

    def test_reboot(self) -> None:
        # Running: it happened (or never will), so the task state goes.
        self.check(Step.ACTIVE, vs.ACTIVE, ts.REBOOTING)
        self.check(Step.ACTIVE, vs.ACTIVE, ts.REBOOT_STARTED_HARD)
        # Not running: done again, hard (a soft one got as far as off).
        self.check(Step.REBOOT_HARD, vs.ACTIVE, ts.REBOOTING, OFF)
        self.check(Step.REBOOT_HARD, vs.ACTIVE, ts.REBOOT_STARTED, None)
        self.check(Step.REBOOT_HARD, vs.STOPPED, ts.REBOOTING_HARD, OFF)
        # Only pending: the host had not started it.
        self.check(Step.REBOOT_SOFT, vs.ACTIVE, ts.REBOOT_PENDING)
        self.check(Step.REBOOT_HARD, vs.ACTIVE, ts.REBOOT_PENDING_HARD)
        self.check(Step.CLEAR, vs.STOPPED, ts.REBOOT_PENDING, OFF)

    def test_ironic_still_at_it_is_waited_for(self) -> None:
        busy = node(states.POWER_OFF, target_power_state=states.POWER_ON)
        self.check(Step.WAIT, vs.ACTIVE, ts.REBOOTING_HARD, busy)
        self.check(Step.WAIT, vs.ACTIVE, ts.POWERING_OFF, busy)
        self.check(Step.WAIT, vs.ACTIVE, ts.RESCUING,
                   node(provision=states.RESCUING))
        self.check(Step.WAIT, vs.ACTIVE, ts.RESCUING,
                   node(provision=states.RESCUEWAIT))
        self.check(Step.WAIT, vs.RESCUED, ts.UNRESCUING,
                   node(provision=states.UNRESCUING))
        # Building and deleting never wait: ERROR keeps the node with the
        # instance; the delete waits for Ironic itself.
        deploying = node(states.POWER_OFF, states.DEPLOYING,
                         target_provision_state=states.ACTIVE)
        self.check(Step.ERROR, vs.BUILDING, ts.SPAWNING, deploying)
        self.check(Step.DELETE, vs.ACTIVE, ts.DELETING, deploying)

    def test_rescue_settles_by_ironic(self) -> None:
        self.check(Step.RESCUED, vs.ACTIVE, ts.RESCUING,
                   node(provision=states.RESCUE))
        self.check(Step.ERROR, vs.ACTIVE, ts.RESCUING,
                   node(provision=states.RESCUEFAIL))
        self.check(Step.CLEAR, vs.ACTIVE, ts.RESCUING)
        self.check(Step.ACTIVE, vs.RESCUED, ts.UNRESCUING)
        self.check(Step.UNRESCUE, vs.RESCUED, ts.UNRESCUING,
                   node(provision=states.RESCUE))
        self.check(Step.CLEAR, vs.RESCUED, ts.UNRESCUING,
                   node(provision=states.UNRESCUEFAIL))
        self.check(Step.CLEAR, vs.ACTIVE, ts.RESCUING, None)

    def test_soft_delete_and_restore_are_done_again(self) -> None:
        # nova's restart leaves both task states set (every action but
        # delete refused); clearing them would drop the user's request.
        self.check(Step.SOFT_DELETE, vs.ACTIVE, ts.SOFT_DELETING)
        self.check(Step.SOFT_DELETE, vs.STOPPED, ts.SOFT_DELETING, OFF)
        self.check(Step.RESTORE, vs.SOFT_DELETED, ts.RESTORING, OFF)
        self.check(Step.RESTORE, vs.SOFT_DELETED, ts.RESTORING, None)
        # A power change Ironic is still making is waited for first.
        self.check(Step.WAIT, vs.ACTIVE, ts.SOFT_DELETING,
                   node(target_power_state=states.POWER_OFF))

    def test_what_this_driver_never_does_is_cleared(self) -> None:
        for task in (ts.PAUSING, ts.SUSPENDING, ts.MIGRATING,
                     ts.SHELVING, ts.RESIZE_MIGRATING):
            self.check(Step.CLEAR, vs.ACTIVE, task)

    def test_needs_recovery(self) -> None:
        self.assertFalse(recovery.needs_recovery(vs.ACTIVE, None))
        self.assertFalse(recovery.needs_recovery(vs.STOPPED, None))
        self.assertTrue(recovery.needs_recovery(vs.ACTIVE, ts.REBOOTING))
        self.assertTrue(recovery.needs_recovery(vs.BUILDING, None))
        self.assertTrue(recovery.needs_recovery(vs.DELETED, None))
