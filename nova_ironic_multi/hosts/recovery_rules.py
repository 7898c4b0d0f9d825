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
"""What the new host of an instance moved in flight does for it.

Pure rules, no I/O: from the instance's VM and task states and its
node's provision and power states, the step that finishes or undoes what
the action cut short was doing (:func:`decide`), and the fault an
instance put in ERROR is given (:func:`fault_message`). The recovery
itself (:mod:`hosts.recovery`) reads, decides and acts.
"""

from __future__ import annotations

import dataclasses
import enum

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import vm_states

from nova_ironic_multi.actions import resources
from nova_ironic_multi.hosts import restart
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

#: The instance action a takeover records; the actions done again are
#: recorded under it.
ACTION = 'takeover'
#: The instance action a draining host records for an instance it hands
#: over with a task state set; its new host recovers it under it.
HANDOVER = 'handover'
#: The instance action ``nova-ironic-multi takeover`` records for each
#: instance it moves (before the move, for one in flight): its new host
#: recovers it under it, as a handed-over one.
MANUAL = 'manual-takeover'
#: The one event of each action, suffixed with the host the instance left.
TAKEOVER_EVENT = 'takeover_from_'
HANDOVER_EVENT = 'handover_from_'
#: How the instance left that host, by action.
_HOW = {ACTION: 'was fenced (forced down)',
        HANDOVER: 'stopped with drain_on_stop',
        MANUAL: 'was fenced (forced down) and taken over by hand'}
#: The actions whose instances their new host finds and recovers
#: (:func:`handed_over`).
HANDED = frozenset({HANDOVER, MANUAL})


class Step(enum.Enum):
    """What the new host does for an instance taken over in flight."""

    #: Nothing: nova leaves it so (ERROR, soft-deleted, no task state).
    NONE = 'none'
    #: Ironic is still at it: look again next period.
    WAIT = 'wait'
    #: vm_state ERROR, task state cleared (an interrupted build/rebuild).
    ERROR = 'error'
    #: Task state cleared, vm_state kept.
    CLEAR = 'clear'
    #: Task state cleared, vm_state ACTIVE (a reboot that did happen).
    ACTIVE = 'active'
    #: vm_state RESCUED, task state cleared (Ironic finished the rescue).
    RESCUED = 'rescued'
    #: nova's delete, done again.
    DELETE = 'delete'
    #: nova's reboot, done again (soft or hard).
    REBOOT_SOFT = 'reboot soft'
    REBOOT_HARD = 'reboot hard'
    #: nova's stop / start / unrescue, done again.
    STOP = 'stop'
    START = 'start'
    UNRESCUE = 'unrescue'
    #: nova's soft delete / restore, done again.
    SOFT_DELETE = 'soft delete'
    RESTORE = 'restore'


@dataclasses.dataclass(frozen=True)
class Decision:
    step: Step
    why: str


BUILD_STATES = restart.BUILD_TASKS
REBUILD_STATES = restart.REBUILD_TASKS
CLEARED_STATES = frozenset({task_states.IMAGE_SNAPSHOT_PENDING,
                            task_states.IMAGE_PENDING_UPLOAD,
                            task_states.IMAGE_UPLOADING,
                            task_states.IMAGE_SNAPSHOT,
                            task_states.RESIZE_PREP})
REBOOT_STARTED = frozenset({task_states.REBOOTING,
                            task_states.REBOOTING_HARD,
                            task_states.REBOOT_STARTED,
                            task_states.REBOOT_STARTED_HARD})
REBOOT_STATES = (REBOOT_STARTED |
                 {task_states.REBOOT_PENDING,
                  task_states.REBOOT_PENDING_HARD})


def needs_recovery(vm_state: str | None, task_state: str | None) -> bool:
    """Whether an instance taken over must go through :func:`decide`."""
    return task_state is not None or vm_state in (vm_states.BUILDING,
                                                  vm_states.DELETED)


def decide(vm_state: str | None, task_state: str | None,
           node: nodeinfo.NodeInfo | None) -> Decision:
    """What nova's restart would do, adapted to what Ironic says.

    :param node: the instance's node, fresh from Ironic, if it holds the
        instance (None: no node does).
    """
    if (vm_state == vm_states.SOFT_DELETED and
            task_state == task_states.RESTORING):
        return Decision(Step.RESTORE, 'its restore was not finished')
    if vm_state == vm_states.SOFT_DELETED or (
            vm_state == vm_states.ERROR and
            task_state != task_states.DELETING):
        return Decision(Step.NONE, 'nova leaves %s instances alone' %
                        vm_state)
    if vm_state == vm_states.DELETED or task_state == task_states.DELETING:
        return Decision(Step.DELETE, 'its delete was not finished')
    if vm_state == vm_states.BUILDING or task_state in BUILD_STATES:
        return Decision(Step.ERROR, 'its build was interrupted')
    if task_state in REBUILD_STATES:
        return Decision(Step.ERROR, 'its rebuild was interrupted')
    if task_state is None:
        return Decision(Step.NONE, 'no task state')
    if task_state in CLEARED_STATES:
        return Decision(Step.CLEAR, 'nothing of %s is left to do' %
                        task_state)
    if task_state in (task_states.RESCUING, task_states.UNRESCUING):
        return _rescue(vm_state, task_state, node)
    if node is not None and node.target_power_state is not None:
        return Decision(Step.WAIT, 'Ironic is still powering the node %s'
                        % node.target_power_state)
    power = (resources.power(node.power_state) if node is not None
             else power_state.NOSTATE)
    running = power == power_state.RUNNING
    if task_state in REBOOT_STATES:
        hard = (not running or
                task_state not in task_states.soft_reboot_states)
        pending = (
            (task_state == task_states.REBOOT_PENDING and
             vm_state in vm_states.ALLOW_SOFT_REBOOT) or
            (task_state == task_states.REBOOT_PENDING_HARD and
             vm_state in vm_states.ALLOW_HARD_REBOOT))
        if pending or (task_state in REBOOT_STARTED and not running):
            return Decision(Step.REBOOT_HARD if hard else Step.REBOOT_SOFT,
                            'its reboot was not finished')
        if running and task_state in REBOOT_STARTED:
            return Decision(Step.ACTIVE, 'the node runs')
        return Decision(Step.CLEAR, 'a %s reboot cannot be done again' %
                        vm_state)
    if task_state == task_states.POWERING_OFF:
        return Decision(Step.STOP, 'its stop was not finished')
    if task_state == task_states.POWERING_ON:
        return Decision(Step.START, 'its start was not finished')
    if task_state == task_states.SOFT_DELETING:
        return Decision(Step.SOFT_DELETE, 'its soft delete was not finished')
    return Decision(Step.CLEAR, 'this driver never does %s' % task_state)


def _rescue(vm_state: str | None, task_state: str,
            node: nodeinfo.NodeInfo | None) -> Decision:
    if node is None:
        return Decision(Step.CLEAR, 'no Ironic node holds it')
    if (node.target_provision_state is not None or
            node.provision_state in states.CONDUCTOR_BUSY or
            node.provision_state == states.RESCUEWAIT):
        return Decision(Step.WAIT, 'Ironic is still %s the node' %
                        (node.provision_state or 'working on'))
    state = node.provision_state
    if task_state == task_states.RESCUING:
        if state == states.RESCUE:
            return Decision(Step.RESCUED, 'Ironic rescued the node')
        if state == states.RESCUEFAIL:
            return Decision(Step.ERROR, 'Ironic failed to rescue the node')
        # (The rescue password is gone with the dead host's request.)
        return Decision(Step.CLEAR, 'Ironic never rescued the node (%s)'
                        % state)
    if state == states.RESCUE and vm_state == vm_states.RESCUED:
        return Decision(Step.UNRESCUE, 'Ironic never unrescued the node')
    # Unrescued (active), or failed to (nova keeps it rescued then).
    return Decision(Step.ACTIVE if state == states.ACTIVE else Step.CLEAR,
                    'Ironic left the node %s' % state)


def fault_message(why: str, host: str, action: str | None,
                  old: str | None) -> str:
    """The fault of an instance the recovery puts in ERROR: what ended it.

    :param why: the decision's reason (``its build was interrupted``).
    :param action: :data:`ACTION` or :data:`HANDOVER` (None: unknown).
    :param old: the host the instance left (None: unknown).
    """
    how = _HOW.get(action or '', 'was fenced or drained')
    return ('%s: nova-compute on %s %s, and %s took the server over'
            % (why[:1].upper() + why[1:], old or 'its previous host', how,
               host))
