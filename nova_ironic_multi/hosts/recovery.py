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
"""Instances taken over in the middle of an action (``takeover = fenced``).

A host that dies leaves some instances with a task state set: a build, a
delete, a reboot or a power change it had started, or one nova's API had
sent it. nova recovers those of a compute that restarts
(``ComputeManager._init_instance``); an instance taken over from a fenced
host is recovered by its new host the same way, from the driver's side:

* building (or scheduling, networking, spawning), rebuilding: ERROR, task
  state cleared, with an instance fault that names the cause (the old
  host fenced or drained, the new host). Nothing is deployed again; a
  node Ironic is still deploying stays with the instance, on its new
  host, so deleting the server tears it down once Ironic lets go of it
  (:mod:`provision`);
* deleting (or deleted but not yet destroyed): the delete is done again;
* rebooting: done again if the node is not running (or the reboot was
  only pending), else the task state is cleared;
* powering off / on: the stop / start is done again;
* soft deleting, or restoring a soft-deleted instance: the soft delete or
  the restore is done again (nova's own restart leaves these task states
  set, and a server then refuses every action but delete; clearing them
  would drop the user's request without a word);
* rescuing / unrescuing (nova leaves these): settled by Ironic's state:
  rescued, ERROR with a fault (rescue failed), or the task state cleared;
  an unrescue Ironic never got is done again;
* snapshotting, resize preparation and what this driver never does: the
  task state is cleared;
* ERROR (but deleting) and soft-deleted instances (but restoring): left
  alone, as nova does.

An action "done again" is nova's own: a cast of it to this host's
nova-compute, under the request of the takeover's instance action, so it
runs in nova's manager (locks, notifications, events, quotas, placement)
like the one the dead host never finished. A power change Ironic is still
making, or a rescue it is still working on, is left for a later period: the
outcome decides what to do. Nothing here waits or retries; a failure leaves
the instance for the next period.

A host that drains (:mod:`drain`) hands its instances over with their task
states: one that still had one gets an instance action :data:`HANDOVER`,
recorded before the move, and its new host recovers it the same way, under
that action, from the first period that finds it among its instances
(:func:`handed_over`). ``nova-ironic-multi takeover`` records a
:data:`MANUAL` action the same way.

The recovery of an instance runs in the period that took it over (or found
it handed over), after the new division is in force (so the action cast
finds the node among this host's), and again in each later period while
it must wait; an instance that moved on to another host, or was deleted
meanwhile, is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import dataclasses
import enum
import threading
from typing import Any

from nova.compute import power_state
from nova.compute import rpcapi as compute_rpcapi
from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.actions import resources
from nova_ironic_multi.hosts import restart
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)

#: Instances looked at per period, at most.
BATCH = 20
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


def handed_over(ctxt: Any, host: str, uuids: Iterable[str]
                ) -> dict[str, str]:
    """The instances among ``uuids`` (new on ``host``) that a draining
    peer handed over in flight, or that ``nova-ironic-multi takeover``
    moved in flight: UUID -> request ID of that action.

    An instance whose last action is a :data:`HANDOVER` or :data:`MANUAL`
    one and that still needs recovery; one nova's API acted on since has a
    later action, and is nova's. A build scheduled to ``host`` has its
    own.

    :raises NovaException, MessagingException: nova cannot say.
    """
    uuids = sorted(uuids)
    if not uuids:
        return {}
    found = objects.InstanceList.get_by_filters(
        ctxt, {'uuid': uuids, 'host': host, 'deleted': False},
        expected_attrs=[])
    handed = {}
    for inst in found:
        if not needs_recovery(inst.vm_state, inst.task_state):
            continue
        last = objects.InstanceActionList.get_by_instance_uuid(
            ctxt, inst.uuid, limit=1)
        if len(last) and last[0].action in HANDED:
            handed[inst.uuid] = str(last[0].request_id)
    return handed


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


class _Outcome(enum.Enum):
    DONE = 'done'
    AGAIN = 'again'


class Recovery:
    """The instances this host took over in flight, until recovered."""

    def __init__(self, client: ironic.Ironic) -> None:
        self._ironic = client
        self._lock = threading.Lock()
        #: instance UUID -> request ID of its takeover action, oldest first.
        self._pending: dict[str, str] = {}
        self._rpc: Any = None

    def note(self, requests: Mapping[str, str]) -> None:
        """Instances taken over in flight: UUID -> takeover request ID."""
        with self._lock:
            for uuid, request_id in requests.items():
                self._pending.pop(uuid, None)
                self._pending[uuid] = request_id

    def pending(self) -> dict[str, str]:
        with self._lock:
            return dict(self._pending)

    def _compute_rpc(self) -> Any:
        if self._rpc is None:
            self._rpc = compute_rpcapi.ComputeAPI()
        return self._rpc

    def sweep(self, host: str) -> None:
        """Recover up to :data:`BATCH` instances; nothing waits."""
        with self._lock:
            batch = list(self._pending.items())[:BATCH]
        for uuid, request_id in batch:
            try:
                outcome = self._recover(host, uuid, request_id)
            except (exception.NovaException,
                    oslo_messaging.MessagingException,
                    ironic.IronicError) as e:
                LOG.warning('Cannot recover instance %(inst)s, taken over '
                            'in flight, now; the next period tries again: '
                            '%(err)s', {'inst': uuid, 'err': e})
                outcome = _Outcome.AGAIN
            with self._lock:
                if self._pending.get(uuid) != request_id:
                    continue        # taken over again meanwhile
                del self._pending[uuid]
                if outcome is _Outcome.AGAIN:
                    self._pending[uuid] = request_id    # queue's end

    def _context(self, request_id: str) -> Any:
        ctxt = nova_context.get_admin_context()
        # The takeover's instance action: nova's events of the actions
        # done again are recorded under it.
        ctxt.request_id = request_id
        return ctxt

    def _node(self, instance: Any) -> nodeinfo.NodeInfo | None:
        if not instance.node:
            return None
        try:
            node = self._ironic.get_node(instance.node, once=True)
        except ironic.NodeNotFound:
            return None
        return node if node.instance_uuid == instance.uuid else None

    def _recover(self, host: str, uuid: str, request_id: str) -> _Outcome:
        ctxt = self._context(request_id)
        try:
            instance = objects.Instance.get_by_uuid(
                ctxt, uuid, expected_attrs=['system_metadata'])
        except exception.InstanceNotFound:
            return _Outcome.DONE
        if (instance.host or '').lower() != host.lower():
            LOG.info('Instance %(inst)s, taken over in flight, is now on '
                     '%(other)s: not recovered here',
                     {'inst': uuid, 'other': instance.host})
            return _Outcome.DONE
        task = instance.task_state
        decision = decide(instance.vm_state, task, self._node(instance))
        args = {'inst': uuid, 'vm': instance.vm_state, 'task': task,
                'step': decision.step.value, 'why': decision.why}
        if decision.step is Step.WAIT:
            LOG.debug('Instance %(inst)s (%(vm)s, %(task)s), taken over in '
                      'flight: %(why)s; next period', args)
            return _Outcome.AGAIN
        if decision.step is Step.NONE:
            return _Outcome.DONE
        LOG.warning('Recovering instance %(inst)s, taken (or handed) over '
                    'while %(vm)s/%(task)s: %(why)s, so: %(step)s', args)
        if decision.step is Step.ERROR:
            # First: a server never shows ERROR without its cause. (Should
            # the state change fail, the fault of a server that is not in
            # ERROR is not shown.)
            restart.record_fault(ctxt, instance.uuid, host, fault_message(
                decision.why, host, *self._origin(ctxt, uuid)))
        self._apply(ctxt, instance, decision.step)
        return _Outcome.DONE

    @staticmethod
    def _origin(ctxt: Any, uuid: str) -> tuple[str | None, str | None]:
        """(action, host the instance left) of the recovery's request.

        :raises NovaException, MessagingException: nova cannot say.
        """
        action = objects.InstanceAction.get_by_request_id(
            ctxt, uuid, ctxt.request_id)
        if action is None:
            return None, None
        events = objects.InstanceActionEventList.get_by_action(ctxt,
                                                               action.id)
        for event in events:
            for prefix in (TAKEOVER_EVENT, HANDOVER_EVENT):
                if event.event.startswith(prefix):
                    return action.action, event.event[len(prefix):]
        return action.action, None

    @staticmethod
    def _action(ctxt: Any, instance_uuid: str) -> None:
        """Make sure the takeover's instance action exists.

        nova's manager records its events under the request's action and
        refuses to act without one (the takeover may have failed to
        record it).
        """
        if objects.InstanceAction.get_by_request_id(
                ctxt, instance_uuid, ctxt.request_id) is None:
            objects.InstanceAction.action_start(ctxt, instance_uuid, ACTION,
                                                want_result=False)

    def _apply(self, ctxt: Any, instance: Any, step: Step) -> None:
        task = instance.task_state
        if step not in (Step.ERROR, Step.CLEAR, Step.ACTIVE, Step.RESCUED):
            self._action(ctxt, instance.uuid)
        if step is Step.ERROR:
            instance.vm_state = vm_states.ERROR
            instance.task_state = None
            instance.save(expected_task_state=[task])
        elif step in (Step.CLEAR, Step.ACTIVE, Step.RESCUED):
            if step is Step.ACTIVE:
                instance.vm_state = vm_states.ACTIVE
            elif step is Step.RESCUED:
                instance.vm_state = vm_states.RESCUED
            instance.task_state = None
            instance.save(expected_task_state=[task])
        elif step is Step.DELETE:
            bdms = objects.BlockDeviceMappingList.get_by_instance_uuid(
                ctxt, instance.uuid)
            self._compute_rpc().terminate_instance(ctxt, instance, bdms)
        elif step in (Step.REBOOT_SOFT, Step.REBOOT_HARD):
            if (step is Step.REBOOT_HARD and
                    task in task_states.soft_reboot_states):
                # A soft reboot that got as far as powering off.
                instance.task_state = task_states.REBOOT_PENDING_HARD
                instance.save(expected_task_state=[task])
            self._compute_rpc().reboot_instance(
                ctxt, instance, block_device_info=None,
                reboot_type='HARD' if step is Step.REBOOT_HARD else 'SOFT')
        elif step is Step.STOP:
            self._compute_rpc().stop_instance(ctxt, instance, do_cast=True)
        elif step is Step.START:
            self._compute_rpc().start_instance(ctxt, instance)
        elif step is Step.UNRESCUE:
            self._compute_rpc().unrescue_instance(ctxt, instance)
        elif step is Step.SOFT_DELETE:
            self._compute_rpc().soft_delete_instance(ctxt, instance)
        elif step is Step.RESTORE:
            self._compute_rpc().restore_instance(ctxt, instance)
