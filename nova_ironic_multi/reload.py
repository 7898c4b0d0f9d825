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
"""Re-reading ``partition_key`` and ``peer_list`` on SIGHUP.

nova never tells a driver about a reload, and in nova-compute's default
native-threading mode oslo.service does not reload at all: its SIGHUP
handler is a stub that ends the service's main thread. So:

* a mutate hook (one per process, whatever the number of drivers) checks
  the new values as soon as oslo.config has re-read the files. A value its
  option type rejects is pinned back to the last good one, with an error
  naming the option (an unreadable value would otherwise break every later
  read, and crash oslo.service's own reload in eventlet mode). Each driver
  then validates the partition for its own host and logs the change, or
  rejects it and keeps its last good partition; the next resource-tracker
  period applies it.
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
           ('ironic', 'conductor_group'))


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


def on_mutate(conf: cfg.ConfigOpts,
              fresh: dict[tuple[str | None, str], tuple[Any, Any]]) -> None:
    """The mutate hook: keep every option readable, then tell drivers."""
    with _STATE.lock:
        for group, name in MUTABLE:
            key = (group, name)
            if key in _STATE.pinned:
                # Also drops any value cached while the files were re-read.
                conf.clear_override(name, group)
                _STATE.pinned.discard(key)
            try:
                value = conf[group][name]
            except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
                continue
            except (cfg.Error, ValueError) as e:
                error: Exception | None = e
            else:
                error = None
            if error is not None:
                # Logged outside the except block: oslo.log would append the
                # whole exception again to the operator's one line.
                good = _STATE.last_good.get(key)
                # oslo.config's message starts with where the value came
                # from; the reason is what the operator needs.
                reason = str(error).rpartition(' is not valid: ')[2]
                LOG.error('Reload: rejected the new value of [%(group)s] '
                          '%(name)s: %(reason)s; keeping %(good)r. Fix the '
                          'value in the configuration file and send SIGHUP '
                          'again.', {'group': group, 'name': name,
                                     'reason': reason, 'good': good})
                conf.set_override(name, good, group)
                _STATE.pinned.add(key)
                continue
            # (oslo.config itself logs every change as "Option ... changed
            # from [old] to [new]"; each driver logs its new partition.)
            _STATE.last_good[key] = value
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
