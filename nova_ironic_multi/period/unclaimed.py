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
"""Builds that no nova-compute ever claimed: ERROR once nova's bound passes.

nova's scheduler allocates a node in placement, and the conductor sends the
build to the host that managed the node then; the instance has no host
until that compute claims the node. If the request is lost on the way (the
compute stopped just as it arrived, RabbitMQ lost it), nothing ever acts on
the server: it stays BUILD, task state ``scheduling``, for ever. nova's one
remedy is the start of the node's owner, which puts such builds on its
nodes in ERROR; with several hosts the node may change hands while hosts
stop and start, and a host that starts while its service is still down
claims no free node, so that start never sees it.

A build can also stop after its compute took the request: nova's manager
clears the task state as it starts the build and sets the host only when it
claims the node, so a compute stopped in between (a SIGTERM whose graceful
stop ends before the claim; seen in the chaos soak) leaves the server
BUILD, task state none, no host, for ever. nova's start puts such builds on
its own nodes in ERROR; here too the node may have changed hands.

With ``[DEFAULT] instance_build_timeout`` set (nova's own bound on a build;
0, the default, turns it off, and this too), each period every host looks
for servers still building with no host that were created longer ago than
that (and, with no task state, last written longer ago than that: the
compute's start of the build), whose allocation is on a node it manages
now, and puts them in ERROR with a fault that says what happened. The
compare-and-swap on the states leaves alone a build that a compute takes
meanwhile. One query a period
(the servers building with no host), and one placement read per overdue
server, at most :data:`BATCH` a period, taken in turn (builds on nodes of
other hypervisors, which this host never ends, cannot hold the others
back); nothing waits or retries: the next period looks again.

A build that looks unclaimed may still be held by a compute: nova's
manager takes the request, then waits for the instance's lock and a build
slot (``[DEFAULT] max_concurrent_builds``) before it claims a node, and a
stopped compute's queue keeps the request until it starts. nova's manager
then builds whatever the instance's state says, even an instance put in
ERROR meanwhile (its one check is on the task state, which ERROR clears),
so a swept build would come back to life with a fault saying it never
started. So, while ``instance_build_timeout`` is set, each host of this
driver (:class:`Held`):

* does not sweep the builds its own manager holds (received and not yet
  started, or started and not yet returned);
* drops a build request for an instance that is no longer building when
  it arrives, and does not start one that stopped building while it waited
  (nova's own outcome for a build whose instance changed under it: the
  build fails, its allocation is removed). An ERROR put by the sweep, or by
  nova's start (which errors the builds on its nodes it finds unclaimed),
  stays.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
import threading
from typing import Any

from nova.compute import build_results
from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.scheduler.client import report
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging
from oslo_utils import timeutils

from nova_ironic_multi.hosts import restart
from nova_ironic_multi.hosts import stale_requests
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

#: Overdue servers looked at per period, at most (a placement read each).
BATCH = 20


def fault_message(timeout: int) -> str:
    return ('Its build never started: no nova-compute claimed a node for it '
            'within [DEFAULT] instance_build_timeout (%d s). The request was '
            'lost on the way, or its compute stopped before it claimed one. '
            'Delete the server and create it again.' % timeout)


def build_timeout(conf: cfg.ConfigOpts) -> int:
    """``[DEFAULT] instance_build_timeout``, read at use time (0: off)."""
    return int(getattr(conf, 'instance_build_timeout', 0) or 0)


def _not_building(instance: Any) -> str | None:
    """The vm_state of ``instance`` if it is no longer building, or None.

    None when building, gone, or when nova cannot say now (the build goes
    on).
    """
    try:
        current = objects.Instance.get_by_uuid(
            nova_context.get_admin_context(), instance.uuid,
            expected_attrs=[])
    except (exception.NovaException, oslo_messaging.MessagingException):
        return None
    if current.vm_state != vm_states.BUILDING:
        return str(current.vm_state)
    return None


def _unclaimed(instance: Any, timeout: int) -> bool:
    """Whether ``instance`` (building, no host) is overdue: never taken
    (``scheduling``) or taken and never claimed (no task state), for longer
    than ``timeout`` seconds.
    """
    if not timeutils.is_older_than(instance.created_at, timeout):
        return False
    if instance.task_state == task_states.SCHEDULING:
        return True
    return (instance.task_state is None and
            timeutils.is_older_than(instance.updated_at or
                                    instance.created_at, timeout))


class Held:
    """The builds this host's nova-compute holds: received, not started."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self._lock = threading.Lock()
        self._uuids: set[str] = set()
        #: Started here, not returned yet (a build claims its node in
        #: there: until then the server has no host).
        self._running: set[str] = set()

    def __contains__(self, instance_uuid: object) -> bool:
        with self._lock:
            return (instance_uuid in self._uuids or
                    instance_uuid in self._running)

    def guard(self, manager: Any) -> None:
        """Watch ``manager``'s builds (before its RPC server starts)."""
        if getattr(manager, '_nova_ironic_multi_builds_held', False):
            return
        manager._nova_ironic_multi_builds_held = True
        stale_requests.wrap(manager, 'build_and_run_instance',
                            self._received)
        stale_requests.wrap(manager, '_do_build_and_run_instance',
                            self._starting)

    def _received(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def received(manager: Any, context: Any, *args: Any,
                     **kwargs: Any) -> Any:
            instance = stale_requests.instance_of(args, kwargs)
            if instance is not None and build_timeout(self._conf) > 0:
                state = _not_building(instance)
                if state is not None:
                    LOG.warning('Dropped the build request of instance '
                                '%(inst)s: it is %(state)s now, no longer '
                                'building (its build was overdue, see '
                                '[DEFAULT] instance_build_timeout); delete '
                                'the server and create it again.',
                                {'inst': instance.uuid, 'state': state})
                    return None
                with self._lock:
                    self._uuids.add(instance.uuid)
            return method(context, *args, **kwargs)
        return received

    def _starting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def starting(manager: Any, context: Any, *args: Any,
                     **kwargs: Any) -> Any:
            instance = stale_requests.instance_of(args, kwargs)
            if instance is not None:
                with self._lock:
                    held = instance.uuid in self._uuids
                    self._uuids.discard(instance.uuid)
                if held or build_timeout(self._conf) > 0:
                    state = _not_building(instance)
                    if state is not None:
                        LOG.warning('Not starting the build of instance '
                                    '%(inst)s: it is %(state)s now, no '
                                    'longer building.',
                                    {'inst': instance.uuid, 'state': state})
                        return build_results.FAILED
                with self._lock:
                    self._running.add(instance.uuid)
                try:
                    return method(context, *args, **kwargs)
                finally:
                    with self._lock:
                        self._running.discard(instance.uuid)
            return method(context, *args, **kwargs)
        return starting


class UnclaimedBuilds:
    """See the module docstring."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self.held = Held(conf)
        #: The last overdue build looked at: the next period goes on after.
        self._cursor = ''

    def sweep(self, host: str, managed: Collection[str]) -> list[str]:
        """ERROR the overdue unclaimed builds on ``managed`` nodes.

        :returns: the UUIDs of the servers put in ERROR.
        """
        timeout = build_timeout(self._conf)
        if timeout <= 0 or not managed:
            return []
        ctxt = nova_context.get_admin_context()
        building = objects.InstanceList.get_by_filters(
            ctxt, {'vm_state': vm_states.BUILDING, 'host': None,
                   'deleted': False}, expected_attrs=[])
        overdue = sorted(
            (i for i in building
             if _unclaimed(i, timeout) and i.uuid not in self.held),
            key=lambda i: str(i.uuid))
        # In turn: the batch after the last one looked at, then around.
        after = [i for i in overdue if str(i.uuid) > self._cursor]
        batch = (after + [i for i in overdue
                          if str(i.uuid) <= self._cursor])[:BATCH]
        if batch:
            self._cursor = str(batch[-1].uuid)
        ended = []
        mine = set(managed)
        for instance in batch:
            if self._end(ctxt, host, mine, instance, timeout):
                ended.append(instance.uuid)
        return ended

    def _end(self, ctxt: Any, host: str, managed: set[str], instance: Any,
             timeout: int) -> bool:
        try:
            allocations = report.report_client_singleton() \
                .get_allocations_for_consumer(ctxt, instance.uuid) or {}
        except Exception as e:
            LOG.warning('Cannot read the allocations of instance %(inst)s, '
                        'still building with no host; the next period '
                        'looks again: %(err)s',
                        {'inst': instance.uuid, 'err': e})
            return False
        nodes = sorted(set(allocations) & managed)
        if not nodes:
            return False        # another host's node, or none yet
        read = instance.task_state
        instance.vm_state = vm_states.ERROR
        instance.task_state = None
        try:
            # On the task state read: a compute that takes the build
            # meanwhile changes it (clears it, or sets spawning).
            instance.save(expected_vm_state=[vm_states.BUILDING],
                          expected_task_state=[read])
        except (exception.InstanceUpdateConflict,
                exception.InstanceNotFound):
            return False        # a compute took it, or it was deleted
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot put instance %(inst)s, never claimed, in '
                        'ERROR; the next period tries again: %(err)s',
                        {'inst': instance.uuid, 'err': e})
            return False
        message = fault_message(timeout)
        try:
            restart.record_fault(ctxt, instance.uuid, host, message)
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot record why instance %(inst)s went to ERROR '
                        '(%(why)s): %(err)s',
                        {'inst': instance.uuid, 'why': message, 'err': e})
        LOG.warning('Instance %(inst)s, allocated Ironic node %(node)s that '
                    'this host manages, was still building with no host '
                    '%(age)d s after it was created: put in ERROR ("%(why)s")',
                    {'inst': instance.uuid, 'node': nodes[0],
                     'age': (timeutils.utcnow() - timeutils.normalize_time(
                         instance.created_at)).total_seconds(),
                     'why': message})
        metrics.BUILDS_SWEPT.inc()
        return True
