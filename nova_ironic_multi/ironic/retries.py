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
"""How many times, and how far apart, a failed request to Ironic is retried.

nova's in-tree driver hands keystoneauth's adapter options of ``[ironic]``
to its session, which then repeats *every* request on a failed connection
(``connect_retries``, ``connect_retry_delay``) or on an answer whose status
is in ``retriable_status_codes`` (``status_code_retries``,
``status_code_retry_delay``). keystoneauth counts an answer that timed out,
or a connection dropped after the request was sent, as a failed
connection: it would send a deploy, a reboot or a volume target twice. So
this driver never gives these options to keystoneauth. They size the
retries of the one retry policy of :meth:`ironic.Ironic._call`, which
decides per request whether a repeat is safe at all:

* a request made inside nova's periodic tasks or start-up, or that changes
  Ironic and may have reached it, is never retried, whatever the options;
* a failed connection (:func:`ironic.is_transient`: refused, or no
  connection made) is retried ``connect_retries`` times,
  ``connect_retry_delay`` seconds apart;
* a 503 (Ironic did not act), or for a read (GET) any status listed in
  ``retriable_status_codes``, is retried ``status_code_retries`` times,
  ``status_code_retry_delay`` seconds apart. A listed status other than
  503 is not retried for a request that changes Ironic: a 502 or 504 from a
  proxy does not say whether Ironic acted;
* a node locked by a conductor (409) is retried ``api_max_retries`` times,
  ``api_retry_interval`` seconds apart.

An unset count falls back to ``api_max_retries`` (so a configuration that
sets none of them behaves as before); an unset delay with its count set
backs off exponentially as keystoneauth does (0.5 s, doubling, at most 60 s);
an unset delay with its count unset is ``api_retry_interval``.
"""

from __future__ import annotations

import dataclasses
import enum

from oslo_config import cfg

GROUP = 'ironic'
#: keystoneauth's retriable statuses when the option is unset.
DEFAULT_STATUS_CODES = (503,)
#: keystoneauth's back-off: the first delay, and the longest.
BACKOFF_START = 0.5
BACKOFF_MAX = 60.0


class Kind(enum.Enum):
    """Why a request failed, as far as retrying goes."""

    LOCKED = 'locked'
    CONNECT = 'connect'
    STATUS = 'status'


@dataclasses.dataclass(frozen=True)
class Rule:
    """The retries of one kind of failure."""

    retries: int
    #: Fixed delay in seconds; None backs off exponentially.
    delay: float | None
    #: The options in force, as a log line names them.
    options: str

    def delay_before(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1-based)."""
        if self.delay is not None:
            return self.delay
        return float(min(BACKOFF_START * 2 ** (retry - 1), BACKOFF_MAX))


def retriable_status_codes(conf: cfg.ConfigOpts) -> frozenset[int]:
    """``[ironic] retriable_status_codes``, keystoneauth's default if unset."""
    codes = conf[GROUP].retriable_status_codes
    return frozenset(codes if codes else DEFAULT_STATUS_CODES)


def rule(conf: cfg.ConfigOpts, kind: Kind) -> Rule:
    """The retries of ``kind`` that ``conf`` asks for."""
    group = conf[GROUP]
    base = ('[ironic] api_max_retries = %d, api_retry_interval = %s'
            % (group.api_max_retries, group.api_retry_interval))
    if kind is Kind.LOCKED:
        return Rule(group.api_max_retries,
                    float(group.api_retry_interval), base)
    if kind is Kind.CONNECT:
        count, delay = group.connect_retries, group.connect_retry_delay
        names = 'connect_retries', 'connect_retry_delay'
    else:
        count, delay = group.status_code_retries, \
            group.status_code_retry_delay
        names = 'status_code_retries', 'status_code_retry_delay'
    if count is None:
        if delay is None:
            return Rule(group.api_max_retries,
                        float(group.api_retry_interval), base)
        return Rule(group.api_max_retries, float(delay),
                    '[ironic] api_max_retries = %d, %s = %s'
                    % (group.api_max_retries, names[1], delay))
    return Rule(count, None if delay is None else float(delay),
                '[ironic] %s = %d, %s = %s'
                % (names[0], count, names[1],
                   'back-off' if delay is None else delay))


class Budget:
    """The retries left for one request, counted per kind of failure."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self._used: dict[Kind, int] = {}

    def next_delay(self, kind: Kind) -> float | None:
        """Seconds to wait before retrying; None when none are left."""
        chosen = rule(self._conf, kind)
        used = self._used.get(kind, 0)
        if used >= chosen.retries:
            return None
        self._used[kind] = used + 1
        return chosen.delay_before(used + 1)

    def used(self, kind: Kind) -> int:
        return self._used.get(kind, 0)
