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
"""Reading this driver's options past oslo.config's cache, consistently.

oslo.config caches every value it reads, and ``mutate_config_files``
empties that cache *before* it re-reads the files: a value another thread
reads meanwhile comes from the old files and stays cached after the reload
(an old conductor group with a new peer list). So the partition options are
read past the cache (:func:`read`), all from one version of the files
(:func:`consistent`), and :func:`settle` drops a value cached from replaced
files. The reload itself (the SIGHUP, the mutate hook) is
:mod:`nova_ironic_multi.service.reload`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import compat

LOG = logging.getLogger(__name__)

#: The options that make the partition, as ``(group, name)``.
PARTITION = (('ironic_multi', 'partition_key'), ('ironic_multi', 'peer_list'),
             ('ironic', 'conductor_group'), ('ironic_multi', 'divide'))

#: The options a reload may change, as ``(group, name)``: the partition's
#: and every other mutable option of this driver. Each is checked on every
#: reload, since oslo.config checks a value (its choices, its type) only
#: when it is read: it takes ``takeover = sometimes``, logs it as changed,
#: and then every read of it fails.
MUTABLE = PARTITION + (('ironic_multi', 'takeover'),
                       ('ironic_multi', 'drain_on_stop'),
                       ('ironic_multi', 'state_file'),
                       ('ironic_multi', 'listing'),
                       ('ironic_multi', 'delta_overlap'),
                       ('ironic_multi', 'delta_check_periods'),
                       ('ironic_multi', 'delta_resync_periods'))

#: Options read at start only (oslo.config keeps their old value on a
#: reload), whose new value a reload checks all the same: one that cannot
#: work refuses the whole reload, so the operator learns it now rather than
#: at the next start, which it would stop.
CHECKED = (('ironic_multi', 'membership_driver'),
           ('ironic_multi', 'tooz_backend_url'))

#: nova's options of the partition that oslo.config applies at start only
#: (nova registers them immutable): it logs "Ignoring change to immutable
#: option" and keeps the start value. A reload that changes one is refused
#: whole, or it would apply the new mutable options (the conductor group)
#: with the old list or shard: a mix no file ever described.
START_ONLY = (('ironic', 'peer_list'), ('ironic', 'shard'))

#: Attempts of :func:`consistent` before it gives up.
_ATTEMPTS = 5

_T = TypeVar('_T')


class Unsettled(cfg.Error):
    """The configuration files kept changing while they were being read."""


# Past oslo.config's value cache -------------------------------------------
#
# oslo.config has no public way to read a value without its cache, to empty
# the cache, or to tell which version of the files is in force; these three
# helpers are the only places that reach into it (tests/unit/test_reload.py
# checks them against the installed oslo.config).

def read(conf: cfg.ConfigOpts, group: str, name: str) -> Any:
    """The value of an option as its sources say now, never a cached one.

    Overrides, the command line and the environment win over the files, as
    in any read.

    :raises cfg.NoSuchOptError: the option is not registered here.
    :raises cfg.NoSuchGroupError: the group is not registered here.
    :raises cfg.Error: the value cannot be read (also ``ValueError``).
    """
    value, _location = conf._do_get(name, compat.option_group(conf, group))
    return value


def read_new(conf: cfg.ConfigOpts, group: str, name: str) -> Any:
    """The value of an option in the files last (re)read, even one that
    oslo.config applies at start only.

    :raises cfg.NoSuchOptError: the option is not registered here.
    :raises cfg.NoSuchGroupError: the group is not registered here.
    :raises cfg.Error: the value cannot be read (also ``ValueError``).
    """
    value, _location = conf._do_get(name, compat.option_group(conf, group),
                                    conf._mutable_ns or conf._namespace)
    return value


def clear_cache(conf: cfg.ConfigOpts) -> None:
    # (The cache is a name-mangled attribute of ConfigOpts.)
    conf._ConfigOpts__cache.clear()


def _files(conf: cfg.ConfigOpts) -> tuple[Any, Any]:
    """The parsed files in force: a new pair after every (re)load."""
    return conf._namespace, conf._mutable_ns


def _same(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return a[0] is b[0] and a[1] is b[1]


def consistent(conf: cfg.ConfigOpts, reads: Callable[[], _T]) -> _T:
    """``reads()``, its reads of ``conf`` all from one version of the files.

    Run again when a reload swapped the files in while it ran (a part of
    its values would be old, a part new), a few times at most.

    :raises Unsettled: the files changed during every attempt.
    """
    for _attempt in range(_ATTEMPTS):
        before = _files(conf)
        try:
            result = reads()
        except Exception:
            if _same(before, _files(conf)):
                raise
            continue
        if _same(before, _files(conf)):
            return result
    raise Unsettled('the configuration files were reloaded %d times while '
                    'the partition options were being read; they will be '
                    'read again' % _ATTEMPTS)


def settle(conf: cfg.ConfigOpts) -> None:
    """Drop values of the partition options cached from replaced files.

    A thread that took a value from the old files before a reload swapped
    in the new ones may cache it after the reload emptied the cache; the
    stale value would then outlive the reload for every cached read.
    """
    for group, name in MUTABLE:
        try:
            cached = conf[group][name]
            current = read(conf, group, name)
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
            continue
        except (cfg.Error, ValueError):
            # Unreadable now: nothing to compare; the hook pins it.
            continue
        if cached != current:
            LOG.debug('%(opt)s was cached from the configuration files '
                      'before the last reload (%(old)r, now %(new)r): '
                      'cleared', {'opt': label((group, name)),
                                  'old': cached, 'new': current})
            clear_cache(conf)
            return

def label(key: tuple[str, str]) -> str:
    return '[%s] %s' % key
