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
"""Bounded polling: every wait on Ironic has an interval and a deadline."""

from __future__ import annotations

from collections.abc import Callable
import time
from typing import TypeVar

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

T = TypeVar('T')


class Timeout(Exception):
    """The wait ran out; the message says what was last read."""

    def __init__(self, what: str, seconds: float, last: object) -> None:
        super().__init__('%s did not finish within %.0f seconds (last seen: '
                         '%s)' % (what, seconds, last))


def until(read: Callable[[], T], done: Callable[[T], bool], *,
          timeout: float, interval: float, what: str,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> T:
    """Read until ``done(value)``; ``done`` may raise to abort the wait.

    :raises Timeout: ``timeout`` seconds passed first.
    """
    deadline = clock() + timeout
    while True:
        value = read()
        if done(value):
            return value
        remaining = deadline - clock()
        if remaining <= 0:
            raise Timeout(what, timeout, value)
        LOG.debug('Still waiting for %(what)s: %(value)s',
                  {'what': what, 'value': value})
        sleep(min(interval, remaining))
