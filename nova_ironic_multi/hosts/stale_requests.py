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
"""Requests queued for this host for an instance that has moved away.

nova's API casts most instance actions (reboot, stop, start, rescue,
unrescue, rebuild, soft delete, interface and volume changes, ...) to the
instance's host without asking whether that host is up, so a cast to a dead
host waits in its message queue. Meanwhile the host may be fenced or
drained, and its instances moved to live peers (:mod:`hosts.takeover`,
:mod:`drain`), whose in-flight recovery (:mod:`hosts.recovery`) settles the
task
state the API had set. When the old host starts again it reads the cast,
with the instance as it was when the cast was sent.

Refusing in the driver is too late: nova's manager has by then recorded an
instance action event, and most actions catch every exception to set the
instance's vm_state to ERROR, record a fault or clear the task state,
overwriting what the new host has (``rescue_instance`` catches everything
the driver raises, even ``UnexpectedTaskStateError``). So each such request
is checked before nova's manager sees it: :func:`guard` wraps those compute
manager methods on this service's manager (the object its RPC server
dispatches to, set up before the RPC server starts), and a request for an
instance whose nova record names another host is dropped, with a warning
naming both hosts: nothing is written, the instance stays as its new host
has it.

Not guarded: builds (a build's instance has no host until this host claims
it) and the migration family, whose instance is legitimately on another
host (resize and live migration; an evacuation's rebuild). A request whose
instance cannot be read now (nova's conductor unreachable) goes on as
before: the driver refuses to act on a moved instance itself
(:func:`takeover.ensure_here`).
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import types
from typing import Any

from nova import exception
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.hosts import takeover

LOG = logging.getLogger(__name__)

#: The compute manager's RPC methods that act on one instance of this host
#: (``instance`` argument) and that a request queued while the host was
#: down can reach after the instance moved. Names a nova release lacks are
#: skipped.
GUARDED = (
    'reboot_instance', 'stop_instance', 'start_instance',
    'rescue_instance', 'unrescue_instance', 'rebuild_instance',
    'soft_delete_instance', 'restore_instance', 'terminate_instance',
    'attach_interface', 'detach_interface',
    'attach_volume', 'detach_volume', 'reserve_block_device_name',
    'swap_volume', 'volume_snapshot_create',
    'volume_snapshot_delete',
    'get_console_output', 'get_vnc_console', 'get_spice_console',
    'get_serial_console', 'get_mks_console', 'validate_console_port',
    'set_admin_password', 'snapshot_instance', 'backup_instance',
    'pause_instance', 'unpause_instance', 'suspend_instance',
    'resume_instance', 'shelve_instance', 'shelve_offload_instance',
    'trigger_crash_dump', 'inject_network_info', 'get_instance_diagnostics',
    'get_diagnostics', 'allow_share', 'deny_share',
)
#: The attribute that marks a manager as guarded (a restart in the same
#: process, as in-process test cells do, guards once).
_MARK = '_nova_ironic_multi_guarded'


def elsewhere(instance: Any, here: str) -> str | None:
    """The host nova's record of ``instance`` names now, if not ``here``.

    None when it names this host, no host (shelved, or a build), when the
    instance is gone (nova's manager handles that) or when nova cannot say
    now (the request goes on; the driver checks again).
    """
    try:
        current = takeover.read_now(instance.uuid)
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        LOG.warning('Cannot read where instance %(inst)s is now (%(err)s): '
                    'acting on the request as it came',
                    {'inst': instance.uuid, 'err': e})
        return None
    if current is not None and current.host and (
            current.host.lower() != here.lower()):
        return str(current.host)
    return None


def instance_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``instance`` argument of a compute manager call, or None."""
    # oslo.messaging passes every argument by name; nova's own calls
    # within the manager may pass the instance second, after the context.
    if 'instance' in kwargs:
        return kwargs['instance']
    return args[0] if args else None


def _guarded(name: str, method: Callable[..., Any],
             here: Callable[[], str]) -> Callable[..., Any]:
    """``method`` that drops a request for an instance on another host."""
    @functools.wraps(method)
    def guarded(self: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
        instance = instance_of(args, kwargs)
        evacuation = kwargs.get('evacuate') or kwargs.get('recreate')
        if instance is not None and not evacuation:
            host = here()
            other = elsewhere(instance, host)
            if other is not None:
                LOG.warning(
                    'Dropped a %(method)s request for instance %(inst)s: '
                    'it is on host %(other)s now, not on this one '
                    '(%(host)s). The request was queued for this host '
                    'while it was down; the instance was moved since and '
                    'its new host has it as it is.',
                    {'method': name, 'inst': instance.uuid, 'other': other,
                     'host': host})
                return None
        return method(context, *args, **kwargs)
    return guarded


def wrap(manager: Any, name: str,
         make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Put ``make(method)`` in place of ``manager``'s method ``name``.

    ``make`` gets the bound method and returns a function taking the
    manager first. Set on the manager object, before nova's RPC server
    dispatches to it; a bound method again, so nova's RPC endpoint wrapper
    tracks it (graceful shutdown waits for the tasks it tracks). False if
    this nova release has no such method.
    """
    method = getattr(manager, name, None)
    if method is None or not callable(method):
        return False
    setattr(manager, name, types.MethodType(make(method), manager))
    return True


def guard(manager: Any, here: Callable[[], str]) -> list[str]:
    """Drop the requests for moved instances before ``manager`` acts.

    :param manager: this service's compute manager.
    :param here: this host's name, read at each request.
    :returns: the names of the methods guarded (none if already done).
    """
    if getattr(manager, _MARK, False):
        return []
    done = [name for name in GUARDED
            if wrap(manager, name, functools.partial(_guarded, name,
                                                     here=here))]
    setattr(manager, _MARK, True)
    return done


def manager_of(virtapi: Any) -> Any | None:
    """The compute manager behind nova's virt API, or None.

    None for a driver made outside nova-compute (benchmarks, tools).
    """
    return getattr(virtapi, '_compute', None)
