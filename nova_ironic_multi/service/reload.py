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
"""Re-reading the mutable options on SIGHUP: ``partition_key``, ``peer_list``,
``divide``, ``takeover`` and ``drain_on_stop``.

nova never tells a driver about a reload, and in nova-compute's default
native-threading mode oslo.service does not reload at all: its SIGHUP
handler is a stub that ends the service's main thread. So:

* a mutate hook (one per process, whatever the number of drivers) checks
  the new values as soon as oslo.config has re-read the files. A reload is
  applied whole or not at all: if any value is rejected by its option type,
  every changed mutable option is pinned back to its last good value,
  with errors naming each rejected option and the changes held back (an
  unreadable value would otherwise break every later read, and crash
  oslo.service's own reload in eventlet mode). Each driver then validates
  the partition for its own host and logs the change, or rejects it and
  keeps its whole last good partition; the next resource-tracker period
  applies it.
* the membership back end (``membership_driver``, ``tooz_backend_url``)
  is applied at start only, yet a reload checks its new value as a start
  would: one that could not work (see :mod:`tooz_backends`) refuses the
  whole reload like an unreadable value, so the operator learns of it now,
  not when the next start fails.
* in threading mode, ``init_host`` (which runs on the main thread) replaces
  the SIGHUP handler by one that only queues the signal; a worker thread
  re-reads the files. SIGTERM is left to oslo.service. In eventlet mode
  oslo.service re-reads the files itself, which runs the hook.

Concurrent readers. oslo.config caches every value it reads, and
``mutate_config_files`` empties that cache *before* it re-reads the files:
a value another thread reads meanwhile comes from the old files and stays
cached after the reload (an old conductor group with a new peer list). So:

* the partition options are read past the cache (:func:`read`), and all
  from one version of the files (:func:`consistent`): the partition in
  force is never a mix, whatever the cache holds;
* the hook empties the cache on every reload, and :func:`settle` (at the
  end of the hook and at every resolution of the partition) empties it
  again if a reader that took an old value before the new files were
  swapped in cached it after that: other readers of the options see the
  new values from then on.
"""

from __future__ import annotations

import queue
import signal
import threading
from typing import Any, Protocol
import weakref

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.conf import reading
from nova_ironic_multi import loader
from nova_ironic_multi.membership import tooz_backends
from nova_ironic_multi.service import signals as process_signals

LOG = logging.getLogger(__name__)

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
        for group, name in reading.MUTABLE:
            try:
                _STATE.last_good[(group, name)] = reading.read(conf, group,
                                                               name)
            except (cfg.Error, ValueError):
                pass


def _read(conf: cfg.ConfigOpts, key: tuple[str, str]) -> tuple[Any, str]:
    """``(value, '')``, or ``(None, reason)`` when the value is unreadable.

    :raises cfg.NoSuchOptError: the option is not registered here.
    """
    group, name = key
    try:
        return reading.read(conf, group, name), ''
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        raise
    except (cfg.Error, ValueError) as e:
        # oslo.config's message starts with where the value came from; the
        # reason is what the operator needs.
        return None, str(e).rpartition(' is not valid: ')[2]




def _listed(value: Any) -> str:
    """A value as the configuration file writes it."""
    if value is None:
        return '(unset)'
    if isinstance(value, list):
        return ','.join(str(v) for v in value)
    return str(value)


def _unworkable(conf: cfg.ConfigOpts) -> dict[tuple[str, str], str]:
    """The options of :data:`reading.CHECKED` whose new value cannot
    work, and why.

    The membership driver must be an installed plugin, as at start. A tooz
    back end is checked as at start (a URL, an installed driver with its
    client library, groups); it is not reached.
    """
    try:
        driver, url = (reading.read_new(conf, *key) for key in reading.CHECKED)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return {}
    except (cfg.Error, ValueError) as e:
        return {reading.CHECKED[0]: str(e)}
    if (driver is not None and
            driver not in loader.available(loader.MEMBERSHIP_NAMESPACE)):
        return {reading.CHECKED[0]: str(loader.PluginNotFound(
            loader.MEMBERSHIP_NAMESPACE, driver,
            reading.label(reading.CHECKED[0])))}
    if driver != 'tooz':
        return {}
    try:
        tooz_backends.check(url)
    except tooz_backends.Unusable as e:
        return {reading.CHECKED[1]: str(e)}
    return {}


def _start_only_changes(conf: cfg.ConfigOpts) -> dict[tuple[str, str], Any]:
    """The options of :data:`reading.START_ONLY` the new files change:
    their new values (None if unreadable); those oslo.config re-reads are
    skipped.
    """
    changed: dict[tuple[str, str], Any] = {}
    for key in reading.START_ONLY:
        try:
            in_force = reading.read(conf, *key)
        except (cfg.Error, ValueError):     # not registered, or unreadable
            continue
        try:
            new = reading.read_new(conf, *key)
        except (cfg.Error, ValueError):
            changed[key] = None
            continue
        if new != in_force:
            changed[key] = new
    return changed


def on_mutate(conf: cfg.ConfigOpts,
              fresh: dict[tuple[str | None, str], tuple[Any, Any]]) -> None:
    """The mutate hook: apply the mutable options whole, then tell drivers.

    If any of them cannot be read, none of the changed ones applies: each
    is pinned back to its last good value (a new peer list with the old
    conductor group would divide a group among hosts that do not serve it).
    Every option also stays readable, so later reads never fail (a period
    reads ``takeover``; oslo.service lists every option after a reload in
    eventlet mode, and would end the process on an unreadable one).
    """
    with _STATE.lock:
        # Values other threads read while the files were re-read were
        # cached from the old files: every reload, not only a pinned one.
        reading.clear_cache(conf)
        # The files speak again: drop the pins of the last rejected reload.
        for group, name in _STATE.pinned:
            conf.clear_override(name, group)
        _STATE.pinned.clear()
        values: dict[tuple[str, str], Any] = {}
        errors: dict[tuple[str, str], str] = {}
        for key in reading.MUTABLE:
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
        unworkable = _unworkable(conf)
        start_only = _start_only_changes(conf)
        if not errors and not unworkable and not start_only:
            # (oslo.config itself logs every change as "Option ... changed
            # from [old] to [new]"; each driver logs its new partition.)
            _STATE.last_good.update(values)
        else:
            # Logged as plain lines: oslo.log would append the whole
            # exception to the operator's one line.
            for key, reason in errors.items():
                LOG.error('Reload: rejected the new value of %(opt)s: '
                          '%(reason)s; keeping %(good)r.',
                          {'opt': reading.label(key), 'reason': reason,
                           'good': _STATE.last_good.get(key)})
            for key, reason in unworkable.items():
                # (No value: a back end URL may hold a password.)
                LOG.error('Reload: rejected the new value of %(opt)s, which '
                          'is applied at start only and could not work '
                          'there: %(reason)s',
                          {'opt': reading.label(key), 'reason': reason})
            for key, new in start_only.items():
                LOG.error('Reload: %(opt)s changed in the configuration '
                          'files, but nova applies it at start only: '
                          'restart nova-compute to change it (or put back '
                          '%(opt)s = %(start)s and send SIGHUP again); '
                          'the new value, %(new)s, is not applied.',
                          {'opt': reading.label(key),
                           'start': _listed(reading.read(conf, *key)),
                           'new': _listed(new)})
            bad = [*errors, *unworkable]
            fix = ('Fix %s in the configuration file' %
                   ', '.join(reading.label(k) for k in bad) if bad else '')
            if start_only:
                fix += ('%s put %s back as at start' % (
                    ' and' if fix else 'Restart nova-compute, or',
                    ', '.join(reading.label(k) for k in start_only)))
            LOG.error('Reload not applied: %(bad)s, so %(held)s '
                      'stay as they were; the last good values remain in '
                      'force (%(good)s). %(fix)s and send SIGHUP again.',
                      {'bad': ', '.join(
                          ['%s invalid' % reading.label(k) for k in bad] +
                          ['%s changed (applied at start only)'
                           % reading.label(k)
                           for k in start_only]),
                       'fix': fix,
                       'held': ', '.join(reading.label(k) for k in changed) or
                       'no other option',
                       'good': ', '.join(
                           '%s = %r' % (reading.label(k),
                                        _STATE.last_good.get(k))
                           for k in reading.MUTABLE
                           if k in values or k in errors)})
            # The changed options first, the unreadable ones last: until
            # the last pin an unreadable value is still in force, so a
            # resolution meanwhile fails (the last good partition stays)
            # instead of mixing old and new values.
            for key in [*changed, *errors]:
                group, name = key
                conf.set_override(name, _STATE.last_good.get(key), group)
                _STATE.pinned.add(key)
        listeners = list(_STATE.listeners)
    for listener in listeners:
        listener.reloaded()
    # A reader that took an old value before the swap may have cached it
    # since the cache was emptied above.
    reading.settle(conf)


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
    # A Python handler runs between bytecodes of the main thread, which may
    # sleep in nova's service.wait() while the signal is delivered to
    # another thread: it then runs only when the main thread next wakes
    # (seen in e2e: a restarted compute handled its SIGHUP a minute late,
    # at its SIGTERM). So the C-level handler's wake-up pipe, written at
    # once from whatever thread received the signal, is read by a thread
    # of ours that queues the reload; the Python handler does nothing. If
    # the pipe is someone else's, the handler queues (only queues: a
    # threading.Event deadlocks when handlers nest under a signal storm).
    signal.signal(signal.SIGHUP, lambda signo, frame: None)
    if not process_signals.watch(signal.SIGHUP, 'reload',
                                 lambda: signals.put(signal.SIGHUP)):
        signal.signal(signal.SIGHUP, lambda signo, frame: signals.put(signo))
    LOG.info('SIGHUP re-reads the configuration files (mutable options: '
             '%s)', ', '.join('[%s] %s' % k for k in reading.MUTABLE))
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
