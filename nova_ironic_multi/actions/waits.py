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
"""Polling Ironic until it is done: an interval, and a deadline if any.

A poll that fails because Ironic is unavailable (after the request's own
retries, see :mod:`nova_ironic_multi.ironic`) is not an answer: the wait
logs it and polls again. Only what was read (a failed state, a node gone)
or the deadline ends a wait. Without a deadline (``timeout`` 0 or None, the
default of the deploy, rescue and power waits) the wait lasts as long as
Ironic works on the node: Ironic's own conductor timeouts end a stuck
operation with a failed state, which ends the wait; a node no conductor
works on any more is told apart by :mod:`stalls`. These waits run in
nova's instance actions, never in its periodic tasks.
"""

from __future__ import annotations

from collections.abc import Callable
import time
from typing import TypeVar

from oslo_log import log as logging

from nova_ironic_multi import ironic

LOG = logging.getLogger(__name__)

T = TypeVar('T')


class Timeout(Exception):
    """The wait ran out; the message says what was last read."""

    def __init__(self, what: str, seconds: float, last: object,
                 failed_polls: int = 0) -> None:
        failed = ('; %d polls failed' % failed_polls if failed_polls
                  else '')
        super().__init__('%s did not finish within %.0f seconds (last seen: '
                         '%s%s)' % (what, seconds, last, failed))


def until(read: Callable[[], T], done: Callable[[T], bool], *,
          timeout: float | None, interval: float, what: str,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> T:
    """Read until ``done(value)``; ``done`` may raise to abort the wait.

    ``read`` raising :class:`ironic.IronicUnavailable` is a failed poll:
    logged, then polled again. Any other exception ends the wait.

    :param timeout: seconds; 0 or None for no deadline.
    :raises Timeout: ``timeout`` seconds passed first.
    """
    deadline = clock() + timeout if timeout else None
    last: object = 'nothing yet'
    failed = 0
    while True:
        try:
            value = read()
        except ironic.IronicUnavailable as e:
            failed += 1
            last = 'a failed poll: %s' % e
            LOG.warning('Polling Ironic for %(what)s failed (%(n)d failed '
                        'polls so far); polling again%(until)s: %(error)s',
                        {'what': what, 'n': failed, 'error': e,
                         'until': (' until the wait times out' if deadline
                                   is not None else '')})
        else:
            if done(value):
                if failed:
                    LOG.info('%(what)s: done after %(n)d failed polls',
                             {'what': what, 'n': failed})
                return value
            last = value
            LOG.debug('Still waiting for %(what)s: %(value)s',
                      {'what': what, 'value': value})
        if deadline is None:
            sleep(interval)
            continue
        remaining = deadline - clock()
        if remaining <= 0:
            raise Timeout(what, float(timeout or 0), last, failed)
        sleep(min(interval, remaining))
