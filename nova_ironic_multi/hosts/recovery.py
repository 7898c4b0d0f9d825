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
import enum
import threading
from typing import Any

from nova.compute import rpcapi as compute_rpcapi
from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.hosts import recovery_rules as rules
from nova_ironic_multi.hosts import restart
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo

LOG = logging.getLogger(__name__)

#: Instances looked at per period, at most.
BATCH = 20
# The rules, from where they live (callers name them here too).
ACTION = rules.ACTION
HANDOVER = rules.HANDOVER
MANUAL = rules.MANUAL
TAKEOVER_EVENT = rules.TAKEOVER_EVENT
HANDOVER_EVENT = rules.HANDOVER_EVENT
HANDED = rules.HANDED
Step = rules.Step
Decision = rules.Decision
BUILD_STATES = rules.BUILD_STATES
REBUILD_STATES = rules.REBUILD_STATES
CLEARED_STATES = rules.CLEARED_STATES
REBOOT_STARTED = rules.REBOOT_STARTED
REBOOT_STATES = rules.REBOOT_STATES
needs_recovery = rules.needs_recovery
decide = rules.decide
fault_message = rules.fault_message


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
