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
"""Every difference between the nova releases this package runs in.

Supported: nova 32 (2025.2), 33 (2026.1) and 34 (2026.2), each with the
oslo libraries and python-ironicclient of its own series. Each difference
is one helper here, with a comment naming the releases it concerns; no
other module looks at versions. Where possible a helper asks what the
running code offers instead of comparing version numbers.

Differences only the tests meet are handled where they are met, also
without looking at versions:

* nova 32's functional test package does not patch eventlet on import (33
  and 34's do): ``tests/conftest.py`` calls nova's ``monkey_patch.patch()``
  itself.
* nova 34's ``_wait_for_server_parameter`` test helper takes
  ``wait_for_fault_key``, 32 and 33's do not: the functional base passes
  on only the arguments it is given.
* python-ironicclient before 6.3 (2025.2, 2026.1) imports the module that
  fixes its version cache's path under ``$HOME`` with the first client,
  inside a test whose temporary ``$HOME`` the next test no longer has:
  ``tests/conftest.py`` imports it first.
* nova 33's fake versioned notifier (its functional fixtures), in
  native-threading mode, fails every notification a thread sends: it
  looks for the sending test in a greenlet ancestry threads do not have
  (nova 34's skips that in threading mode). The functional base counts
  such a sender as the running test (``notifications_from_threads``).
* nova 33's functional fixtures keep the API, cell and placement
  databases each in one in-memory SQLite connection, which threads share
  and interleave on (nova 34's give each a WAL file and one writer at a
  time under threads): in threading mode, ``tests/functional/
  threaded_sqlite.py`` does the same for a nova whose fixtures lack it.
* tooz 7 and 8's Redis driver answers ``b''`` as the capabilities of a
  member that joined without any, tooz 9's ``None``: the fake back end's
  scenario always joins with capabilities, as the plugin does.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import os
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: The nova releases this package is tested in (the install guide's table).
TESTED_NOVA = {32: '2025.2', 33: '2026.1', 34: '2026.2'}


def nova_release() -> int:
    """The major version of the nova this process runs in (e.g. 34).

    Only for reports (the start's warning, test run labels); behaviour never
    depends on it.
    """
    return int(importlib.metadata.version('nova').split('.')[0])


def patch_for_threads() -> None:
    """Choose nova's concurrency model for a tool run on native threads.

    ``OS_NOVA_DISABLE_EVENTLET_PATCHING`` still wins when it is set. nova
    33 (2026.1) and 34 (2026.2) take the default mode as
    ``monkey_patch.patch(backend=...)``; nova 32 (2025.2) has no such
    argument and patches eventlet unless the variable says not to, so there
    the variable is set (for this process) when it is unset.
    """
    from nova import monkey_patch
    if 'backend' in inspect.signature(monkey_patch.patch).parameters:
        monkey_patch.patch(backend='threading')
    else:
        os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
        monkey_patch.patch()


def warn_if_untested_nova() -> None:
    """A WARNING when this nova is none of the tested releases."""
    release = nova_release()
    if release not in TESTED_NOVA:
        LOG.warning('nova-ironic-multi runs in nova %(release)s, a release '
                    'it is not tested in; tested: %(tested)s. See '
                    '"Supported versions" in the install guide.',
                    {'release': release,
                     'tested': ', '.join('nova %d (%s)' % kv for kv in
                                         sorted(TESTED_NOVA.items()))})


def option_group(conf: cfg.ConfigOpts, group: str | None) -> Any:
    """What ``ConfigOpts._do_get`` takes as the group of an option.

    oslo.config of 2025.2 and 2026.1 (nova 32, 33) reads ``group.name`` in
    ``_do_get`` and so needs the ``OptGroup``; 2026.2's (nova 34) also takes
    its name. The ``OptGroup`` works everywhere.
    """
    return conf._get_group(group) if group else None


# nova's driver interface ---------------------------------------------------

#: ComputeDriver methods this driver implements that only newer novas have
#: (and so call). An older nova never calls them.
LATER_DRIVER_METHODS = (
    # nova 34 (2026.2) calls process_instances_at_startup once in
    # init_host, after its node listing and before it looks at each
    # instance; nova 32 and 33 have no such call (see
    # lists_nodes_before_instances).
    'process_instances_at_startup',
)


def nova_has(method: str) -> bool:
    """Whether the running nova's ComputeDriver has ``method``."""
    from nova.virt import driver as virt_driver
    return hasattr(virt_driver.ComputeDriver, method)


@functools.cache
def lists_nodes_before_instances() -> bool:
    """Whether init_host's node listing is all nova tells of its start.

    nova 32 (2025.2) and 33 (2026.1) list the nodes once in init_host and
    then look at each instance, without calling
    ``process_instances_at_startup`` (nova 34, 2026.2): there the driver
    takes that listing as the point the instances come next.
    """
    return not nova_has('process_instances_at_startup')


# nova-compute's graceful stop -----------------------------------------------

#: The most this package gives ``cleanup_host`` at a stop: what nova 34
#: (2026.2) reserves for it out of its manager's stop time.
CLEANUP_HOST_SECONDS = 20.0
#: oslo.service's default ``[DEFAULT] graceful_shutdown_timeout``.
OSLO_GRACEFUL_SHUTDOWN_TIMEOUT = 60.0


def _graceful_shutdown() -> Any:
    from nova.compute import manager
    return getattr(manager.ComputeManager, 'graceful_shutdown', None)


def cleanup_host_seconds(conf: cfg.ConfigOpts) -> tuple[float, str]:
    """Seconds nova leaves the driver's ``cleanup_host`` at a SIGTERM.

    Returns them with the options that set them, as an operator would
    change them (for the log when they leave no time).
    """
    try:
        graceful = float(conf.graceful_shutdown_timeout)  # 0: no bound
    except cfg.NoSuchOptError:
        # nova 32 (2025.2) leaves the option to oslo.service's launcher,
        # which registers it with this default when the service starts.
        graceful = OSLO_GRACEFUL_SHUTDOWN_TIMEOUT
    graceful_text = f'[DEFAULT] graceful_shutdown_timeout = {graceful:g}'
    wait = _graceful_shutdown()
    if wait is None:
        # nova 32 (2025.2): Service.stop calls cleanup_host as soon as the
        # RPC server stopped, without waiting for the operations under way;
        # only oslo.service's graceful_shutdown_timeout bounds the stop.
        left = graceful if graceful else CLEANUP_HOST_SECONDS
        return min(CLEANUP_HOST_SECONDS, left), graceful_text
    manager = float(conf.manager_shutdown_timeout)
    manager_text = f'[DEFAULT] manager_shutdown_timeout = {manager:g}'
    if graceful and manager > graceful:
        # nova 33 and 34 alike: the manager then waits for what the
        # service's own bound leaves, less 10 s.
        manager = max(0.0, graceful - 10)
    if 'timeout' in inspect.signature(wait).parameters:
        # nova 34 (2026.2): the manager waits for the operations under way
        # at most its stop time less what it reserves for cleanup_host (up
        # to 20 s), then calls cleanup_host within that reserve.
        return (min(CLEANUP_HOST_SECONDS, manager),
                f'{manager_text}, {graceful_text}')
    # nova 33 (2026.1): the manager sleeps the whole manager_shutdown_timeout
    # and then calls cleanup_host, which only graceful_shutdown_timeout
    # bounds.
    left = graceful - manager if graceful else CLEANUP_HOST_SECONDS
    return (max(0.0, min(CLEANUP_HOST_SECONDS, left)),
            f'{manager_text}, {graceful_text}')


# nova's [ironic] options -------------------------------------------------

#: [ironic] options only newer releases define, with their default there.
LATER_IRONIC_OPTIONS: dict[str, Any] = {
    # nova registers keystoneauth's session options in [ironic]:
    # keystoneauth of 2026.2 (nova 34) added these two, which 2025.2 and
    # 2026.1 (nova 32, 33) do not have.
    'tls_ciphers': None,
    'tls_min_version': None,
    # nova 33 (2026.1) added the bound of a VNC console change with its
    # in-tree driver's VNC consoles; nova 32 (2025.2) has no such option:
    # there the wait is [ironic_multi] console_timeout's, else 60 s, the
    # default of nova 33 and 34.
    'vnc_console_state_timeout': 60,
}


def defines(conf: cfg.ConfigOpts, group: str, name: str) -> bool:
    """Whether ``[group] name`` is registered (by this nova) in ``conf``."""
    return name in conf[group]


def ironic_option(conf: cfg.ConfigOpts, name: str) -> Any:
    """``[ironic] name``, or its newer releases' default where undefined.

    :raises cfg.NoSuchOptError: neither nova nor a newer release has it.
    """
    if name in LATER_IRONIC_OPTIONS and not defines(conf, 'ironic', name):
        return LATER_IRONIC_OPTIONS[name]
    return conf['ironic'][name]


# tooz ---------------------------------------------------------------------

def reads_members_with_capabilities() -> bool:
    """Whether tooz reads a group's members and capabilities in one call.

    tooz 9 (2026.2, nova 34) has ``get_members_with_capabilities``; tooz 7
    and 8 (2025.2 and 2026.1, nova 32 and 33) only ``get_members`` and
    ``get_member_capabilities``, one call per member.
    """
    from tooz import coordination
    return hasattr(coordination.CoordinationDriver,
                   'get_members_with_capabilities')


def group_read_api() -> tuple[str, ...]:
    """The tooz driver methods that reading a group takes here."""
    if reads_members_with_capabilities():
        return ('get_members_with_capabilities',)
    return ('get_members', 'get_member_capabilities')


def members_with_capabilities(coordinator: Any,
                              group: bytes) -> dict[bytes, Any]:
    """Each live member of ``group`` with its capabilities.

    :raises tooz.coordination.GroupNotCreated: no such group.
    :raises tooz.ToozError: the back end failed.
    """
    if reads_members_with_capabilities():
        found: dict[bytes, Any] = coordinator.get_members_with_capabilities(
            group).get()
        return found
    from tooz import coordination
    out = {}
    for member in coordinator.get_members(group).get():
        try:
            out[member] = coordinator.get_member_capabilities(
                group, member).get()
        except coordination.MemberNotJoined:
            # Left between the two reads: not a member.
            continue
    return out
