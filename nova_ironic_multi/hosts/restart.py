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
"""The fault of a build that a restart of this host ends.

nova-compute, started again after it died (``kill -9``, a crash, a power
cut), puts each instance of its host whose build or rebuild was under way
in ERROR (``ComputeManager._init_instance``), and records no instance
fault: ``openstack server show`` gives no reason. The driver sees those
instances just before nova does (``process_instances_at_startup``; on a
nova without it, ``init_host`` reads them) and records a fault that says
what happened. The conditions are nova's own, so the fault goes exactly
with the ERROR nova sets next.

Nothing waits or retries: a fault that cannot be written is logged, and
the start goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging

LOG = logging.getLogger(__name__)

#: The length of nova's ``instance_faults.message`` column.
FAULT_MESSAGE_LENGTH = 255

#: Task states of a build, and of a rebuild, under way.
BUILD_TASKS = frozenset({task_states.SCHEDULING,
                         task_states.BLOCK_DEVICE_MAPPING,
                         task_states.NETWORKING, task_states.SPAWNING})
REBUILD_TASKS = frozenset({task_states.REBUILDING,
                           task_states.REBUILD_BLOCK_DEVICE_MAPPING,
                           task_states.REBUILD_SPAWNING})


def interrupted(instance: Any, host: str) -> str | None:
    """What nova's start ends for ``instance``: 'build', 'rebuild', or None.

    None: nova leaves the instance alone, or recovers it otherwise.
    """
    if instance.host != host:
        return None
    vm, task = instance.vm_state, instance.task_state
    if vm in (vm_states.SOFT_DELETED, vm_states.DELETED) or (
            vm == vm_states.ERROR and task not in (
                task_states.RESIZE_MIGRATING, task_states.DELETING)):
        return None
    if vm == vm_states.BUILDING or task in BUILD_TASKS:
        return 'build'
    if vm in (vm_states.ACTIVE, vm_states.STOPPED) and task in REBUILD_TASKS:
        return 'rebuild'
    return None


def record_fault(ctxt: Any, instance_uuid: str, host: str,
                 message: str) -> None:
    """Record the instance fault ``server show`` gives with ERROR.

    :raises NovaException, MessagingException: nova cannot write it.
    """
    fault = objects.InstanceFault(context=ctxt)
    fault.instance_uuid = instance_uuid
    fault.code = 500
    # nova's column holds 255 characters (PostgreSQL refuses more): the
    # whole text goes to the details.
    fault.message = message[:FAULT_MESSAGE_LENGTH]
    fault.details = message if len(message) > FAULT_MESSAGE_LENGTH else ''
    fault.host = host
    fault.create()


def fault_message(what: str, host: str) -> str:
    return ('Its %s was interrupted: nova-compute on %s stopped while it '
            'ran (killed, crashed or restarted), and does not finish it '
            'when it starts again' % (what, host))


def record_faults(ctxt: Any, host: str, instances: Iterable[Any]) -> int:
    """Record the fault of each instance whose build nova's start ends.

    :returns: how many were recorded.
    """
    recorded = 0
    for instance in instances:
        what = interrupted(instance, host)
        if what is None:
            continue
        message = fault_message(what, host)
        try:
            record_fault(ctxt, instance.uuid, host, message)
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot record why instance %(inst)s goes to ERROR '
                        '(%(why)s): %(err)s',
                        {'inst': instance.uuid, 'why': message, 'err': e})
            continue
        recorded += 1
        LOG.warning('Instance %(inst)s: its %(what)s was under way when '
                    'this host stopped; nova puts it in ERROR now, with the '
                    'fault "%(why)s"', {'inst': instance.uuid, 'what': what,
                                        'why': message})
    return recorded


def record_at_start(ctxt: Any, host: str) -> None:
    """:func:`record_faults` on the host's instances, read here.

    For a nova that never calls ``process_instances_at_startup``.
    """
    try:
        instances = objects.InstanceList.get_by_host(ctxt, host,
                                                     expected_attrs=[])
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        LOG.warning('Cannot read the instances of %(host)s to record the '
                    'fault of builds its start ends: %(err)s',
                    {'host': host, 'err': e})
        return
    record_faults(ctxt, host, instances)
