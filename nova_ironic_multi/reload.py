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
"""Re-reading ``partition_key``, ``peer_list`` and ``divide`` on SIGHUP.

nova never tells a driver about a reload, and in nova-compute's default
native-threading mode oslo.service does not reload at all: its SIGHUP
handler is a stub that ends the service's main thread. So:

* a mutate hook (one per process, whatever the number of drivers) checks
  the new values as soon as oslo.config has re-read the files. A reload is
  applied whole or not at all: if any value is rejected by its option type,
  every changed partition option is pinned back to its last good value,
  with errors naming each rejected option and the changes held back (an
  unreadable value would otherwise break every later read, and crash
  oslo.service's own reload in eventlet mode). Each driver then validates
  the partition for its own host and logs the change, or rejects it and
  keeps its whole last good partition; the next resource-tracker period
  applies it.
* in threading mode, ``init_host`` (which runs on the main thread) replaces
  the SIGHUP handler by one that only queues the signal; a worker thread
  re-reads the files. SIGTERM is left to oslo.service. In eventlet mode
  oslo.service re-reads the files itself, which runs the hook.
"""

from __future__ import annotations

import queue
import signal
import threading
from typing import Any, Protocol
import weakref

from oslo_config import cfg
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: The options a reload may change, as ``(group, name)``.
MUTABLE = (('ironic_multi', 'partition_key'), ('ironic_multi', 'peer_list'),
           ('ironic', 'conductor_group'), ('ironic_multi', 'divide'))


class Listener(Protocol):
    def reloaded(self) -> None: ...


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listeners: weakref.WeakSet[Any] = weakref.WeakSet()
        self.hooked: set[int] = set()
        self.last_good: dict[tuple[str, str], Any] = {}
        self.pinned: set[tuple[str, str]] = set()
        self.signals: queue.SimpleQueue[int] | None = None


_STATE = _State()


def watch(conf: cfg.ConfigOpts, listener: Listener) -> None:
    """Call ``listener.reloaded()`` after every reload of ``conf``.

    The hook is registered once per ConfigOpts (oslo.config never removes
    hooks); listeners are held weakly.
    """
    with _STATE.lock:
        _STATE.listeners.add(listener)
        if id(conf) not in _STATE.hooked:
            conf.register_mutate_hook(on_mutate)
            _STATE.hooked.add(id(conf))
        for group, name in MUTABLE:
            try:
                _STATE.last_good[(group, name)] = conf[group][name]
            except (cfg.Error, ValueError):
                pass


def _read(conf: cfg.ConfigOpts, key: tuple[str, str]) -> tuple[Any, str]:
    """``(value, '')``, or ``(None, reason)`` when the value is unreadable.

    :raises cfg.NoSuchOptError: the option is not registered here.
    """
    group, name = key
    try:
        return conf[group][name], ''
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        raise
    except (cfg.Error, ValueError) as e:
        # oslo.config's message starts with where the value came from; the
        # reason is what the operator needs.
        return None, str(e).rpartition(' is not valid: ')[2]


def _label(key: tuple[str, str]) -> str:
    return '[%s] %s' % key


def on_mutate(conf: cfg.ConfigOpts,
              fresh: dict[tuple[str | None, str], tuple[Any, Any]]) -> None:
    """The mutate hook: apply the partition options whole, then tell drivers.

    If any of them cannot be read, none of the changed ones applies: each
    is pinned back to its last good value (a new peer list with the old
    conductor group would divide a group among hosts that do not serve it).
    Every option also stays readable, so later reads never fail.
    """
    with _STATE.lock:
        # The files speak again: drop the pins of the last rejected reload
        # (this also drops values cached while the files were re-read).
        for group, name in _STATE.pinned:
            conf.clear_override(name, group)
        _STATE.pinned.clear()
        values: dict[tuple[str, str], Any] = {}
        errors: dict[tuple[str, str], str] = {}
        for key in MUTABLE:
            try:
                value, error = _read(conf, key)
            except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
                continue
            if error:
                errors[key] = error
            else:
                values[key] = value
        changed = [k for k, v in values.items()
                   if k in _STATE.last_good and v != _STATE.last_good[k]]
        if not errors:
            # (oslo.config itself logs every change as "Option ... changed
            # from [old] to [new]"; each driver logs its new partition.)
            _STATE.last_good.update(values)
        else:
            # Logged as plain lines: oslo.log would append the whole
            # exception to the operator's one line.
            for key, reason in errors.items():
                LOG.error('Reload: rejected the new value of %(opt)s: '
                          '%(reason)s; keeping %(good)r.',
                          {'opt': _label(key), 'reason': reason,
                           'good': _STATE.last_good.get(key)})
            LOG.error('Reload not applied: %(bad)s invalid, so %(held)s '
                      'stay as they were; the last good partition options '
                      'remain in force (%(good)s). Fix %(bad)s in the '
                      'configuration file and send SIGHUP again.',
                      {'bad': ', '.join(_label(k) for k in errors),
                       'held': ', '.join(_label(k) for k in changed) or
                       'no other option',
                       'good': ', '.join(
                           '%s = %r' % (_label(k), _STATE.last_good.get(k))
                           for k in MUTABLE if k in values or k in errors)})
            for key in [*errors, *changed]:
                group, name = key
                conf.set_override(name, _STATE.last_good.get(key), group)
                _STATE.pinned.add(key)
        listeners = list(_STATE.listeners)
    for listener in listeners:
        listener.reloaded()


def install_sighup(conf: cfg.ConfigOpts) -> bool:
    """Make SIGHUP re-read the configuration files (threading mode).

    Only from the main thread (signal handlers cannot be installed from
    elsewhere), and only once per process. Returns whether it installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    with _STATE.lock:
        if _STATE.signals is not None:
            return False
        signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        _STATE.signals = signals
    worker = threading.Thread(target=_reload_worker, args=(conf, signals),
                              name='nova-ironic-multi-sighup', daemon=True)
    worker.start()
    # The handler runs between bytecodes of the main thread: only queue.
    # (A threading.Event deadlocks when handlers nest under a signal storm.)
    signal.signal(signal.SIGHUP, lambda signo, frame: signals.put(signo))
    LOG.info('SIGHUP re-reads the configuration files (mutable options: '
             '%s)', ', '.join('[%s] %s' % k for k in MUTABLE))
    return True


def _reload_worker(conf: cfg.ConfigOpts,
                   signals: queue.SimpleQueue[int]) -> None:
    while True:
        signals.get()
        while not signals.empty():   # one reload for a burst of signals
            signals.get_nowait()
        LOG.info('SIGHUP received: re-reading the configuration files')
        try:
            conf.mutate_config_files()
        except Exception:
            LOG.exception('Reload failed; the configuration in force is '
                          'unchanged')
