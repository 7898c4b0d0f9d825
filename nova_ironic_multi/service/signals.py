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
"""The process's signals as this driver sees them: SIGHUP and SIGTERM.

A Python signal handler runs in the main thread, between two of its
bytecodes; nova-compute's main thread sleeps in ``service.wait()`` while
the kernel may deliver the signal to any other thread, so a handler can
run a minute late (seen in e2e: a SIGHUP handled only at the next
SIGTERM). Python's C-level handler, though, writes each caught signal's
number at once to the process's signal wake-up fd, whatever Python
handler is installed (oslo.service's included, which it replaces at
will). There is one such fd per process: this module is the product's
only owner of it. :func:`watch` reads it in one thread and calls what is
registered for each number; the handlers in place stay and run as before.

:func:`on_sigterm` tells the drain (``hosts/drain``) at once that the
service is stopping (in native threading through a handler of its own,
which runs oslo.service's after); ``service/reload`` queues a reload on
SIGHUP.
"""

from __future__ import annotations

from collections.abc import Callable
import os
import select
import signal
import threading
from typing import Any
import weakref

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: The wake-up pipe's write end, once made; its reader runs then.
        self.write_fd: int | None = None
        #: Signal number -> name -> what to call when it arrives.
        self.callbacks: dict[int, dict[str, Callable[[], None]]] = {}
        #: What SIGTERM is told to (weakly held).
        self.sigterm: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Whether our SIGTERM handler is installed (native threading).
        self.sigterm_handled = False


_STATE = _State()


def _own_wakeup_fd() -> bool:
    """Make (or keep) our pipe the process's signal wake-up fd.

    Called with the lock held, from the main thread. Another's fd is left
    in place: there is one per process.
    """
    if _STATE.write_fd is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        try:
            old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:          # not the main thread
            os.close(read_fd)
            os.close(write_fd)
            return False
        if old != -1:
            signal.set_wakeup_fd(old)
            os.close(read_fd)
            os.close(write_fd)
            return False
        _STATE.write_fd = write_fd
        threading.Thread(target=_read, args=(read_fd,),
                         name='nova-ironic-multi-signals',
                         daemon=True).start()
        return True
    try:
        old = signal.set_wakeup_fd(_STATE.write_fd,
                                   warn_on_full_buffer=False)
    except ValueError:
        return False
    if old in (-1, _STATE.write_fd):
        return True
    signal.set_wakeup_fd(old)       # someone else's since
    return False


def _read(read_fd: int) -> None:
    while True:
        # select, then read: both yield to other green threads when
        # eventlet patches them, and block this thread alone otherwise.
        select.select([read_fd], [], [])
        try:
            data = os.read(read_fd, 512)
        except BlockingIOError:
            continue
        with _STATE.lock:
            calls = [c for signo in dict.fromkeys(data)
                     for c in _STATE.callbacks.get(signo, {}).values()]
        for call in calls:
            try:
                call()
            except Exception:
                LOG.exception('Handling a signal failed')


def watch(signo: int, name: str, callback: Callable[[], None]) -> bool:
    """Call ``callback()`` as soon as ``signo`` arrives, each time.

    ``callback`` runs in the reader thread: it must only hand the work on
    (queue it, start a thread). A second registration under the same
    ``name`` replaces the first. From the main thread, and only if the
    wake-up fd is no one else's; returns whether ``callback`` is called.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    with _STATE.lock:
        if not _own_wakeup_fd():
            return False
        _STATE.callbacks.setdefault(signo, {})[name] = callback
    return True


def _tell_sigterm() -> None:
    for listener in list(_STATE.sigterm):
        # Never held up here: the shutdown must begin.
        threading.Thread(target=listener._on_sigterm,
                         name='nova-ironic-multi-drain', daemon=True).start()


def on_sigterm(listener: Any, handle: bool) -> bool:
    """Call ``listener._on_sigterm()`` in a thread as soon as SIGTERM comes.

    With ``handle`` (native threading, where oslo.service installs its
    handlers once), a handler that tells the listener, then runs the one
    it replaces (oslo.service's graceful shutdown). Without (eventlet,
    where oslo.service's launcher installs its handlers again after each
    SIGHUP, dropping any other), through the wake-up fd (:func:`watch`),
    the handler in place left alone. From the main thread; listeners are
    held weakly. Returns whether ``listener`` will be called.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if not handle:
        if not watch(signal.SIGTERM, 'drain', _tell_sigterm):
            return False
        with _STATE.lock:
            _STATE.sigterm.add(listener)
        return True
    with _STATE.lock:
        if not _STATE.sigterm_handled:
            previous = signal.getsignal(signal.SIGTERM)

            def handler(signo: int, frame: Any) -> None:
                _tell_sigterm()
                if callable(previous):
                    previous(signo, frame)
                elif previous != signal.SIG_IGN:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    signal.raise_signal(signal.SIGTERM)

            signal.signal(signal.SIGTERM, handler)
            _STATE.sigterm_handled = True
        _STATE.sigterm.add(listener)
    return True
