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
"""``nova-ironic-multi health``: a probe for containers and Kubernetes.

It reads only the state file nova-compute's periods write
(:mod:`nova_ironic_multi.period.health`): no database, no API. One line
says why, and the exit code says how bad:

* 0, healthy: the last period computed the division, recently, and this
  host is among the peers it sees;
* 1, degraded: periods run but the last one was NotReady (Ironic, nova or
  the membership back end did not answer, or the configuration cannot be
  enforced), or this host is not among the peers it sees (disabled,
  draining, or its heartbeat is missing): it manages only the nodes of its
  instances;
* 2, broken: no state file, or one not rewritten for longer than
  ``--stale-after`` (periods do not run: nova-compute is hung, stopped or
  still starting).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, TextIO

from oslo_config import cfg

from nova_ironic_multi.cmd import output
from nova_ironic_multi.period import health

HEALTHY, DEGRADED, BROKEN = 0, 1, 2
NAMES = {HEALTHY: 'healthy', DEGRADED: 'degraded', BROKEN: 'broken'}

#: A state file older than this many periods is stale (and never one
#: younger than :data:`MIN_STALE` seconds): nova runs its periodic tasks
#: one after the other, so a period can start late behind a slow one.
STALE_PERIODS = 5
MIN_STALE = 300


@dataclasses.dataclass(frozen=True)
class Verdict:
    code: int
    reason: str
    state_file: str | None
    state: health.State | None = None
    age: float | None = None

    def data(self) -> dict[str, Any]:
        return {'status': NAMES[self.code], 'code': self.code,
                'reason': self.reason, 'state_file': self.state_file,
                'age_seconds': (round(self.age, 1) if self.age is not None
                                else None),
                'state': (dataclasses.asdict(self.state)
                          if self.state is not None else None)}


def _ago(now: float, then: float | None) -> str:
    if then is None:
        return 'never'
    return '%.0f s ago' % max(0.0, now - then)


def judge(where: str | None, now: float,
          stale_after: float | None = None) -> Verdict:
    """The health of the service whose state file is at ``where``."""
    if where is None:
        return Verdict(BROKEN, 'no state file: [ironic_multi] state_file is '
                       'empty, so nova-compute writes none; unset it to '
                       'use the default', None)
    try:
        state = health.read(where)
    except FileNotFoundError:
        return Verdict(BROKEN, 'no state file at %s: nova-compute has not '
                       'ended a period since it started, or writes it '
                       'elsewhere ([ironic_multi] state_file, [DEFAULT] '
                       'state_path and host must be as nova-compute has '
                       'them; or pass --state-file)' % where, where)
    except (OSError, ValueError) as e:
        return Verdict(BROKEN, 'cannot read the state file %s: %s'
                       % (where, e), where)
    age = max(0.0, now - state.written_at)
    limit = (stale_after if stale_after is not None else
             max(STALE_PERIODS * state.period, MIN_STALE))
    if age > limit:
        return Verdict(BROKEN, 'stale: the last period of nova-compute on %s '
                       'ended %.0f s ago, more than %.0f s (periods every '
                       '%d s): it is hung, stopped, or still starting'
                       % (state.host, age, limit, state.period),
                       where, state, age)
    if state.not_ready is not None:
        return Verdict(DEGRADED, 'NotReady for %d period(s), since %s (last '
                       'division %s): %s'
                       % (state.not_ready_periods,
                          _ago(now, state.not_ready_since),
                          _ago(now, state.last_success_at), state.not_ready),
                       where, state, age)
    if not state.member:
        return Verdict(DEGRADED, '%s is not among the peers it sees (%s): '
                       'it is disabled, draining, or its membership '
                       'heartbeat is missing, and manages only the nodes of '
                       'its instances (%d)'
                       % (state.host, ', '.join(state.members) or 'none',
                          state.managed), where, state, age)
    return Verdict(HEALTHY, 'healthy: %s manages %d Ironic nodes; %d peers '
                   '(member view %s); last period %s'
                   % (state.host, state.managed, len(state.members),
                      state.member_hash, _ago(now, state.written_at)),
                   where, state, age)


def run(conf: cfg.ConfigOpts, state_file: str | None,
        stale_after: float | None, out: TextIO, fmt: str) -> int:
    """Print the verdict; its code is the exit status."""
    try:
        where = (state_file if state_file is not None
                 else health.path(conf, conf.host))
        verdict = judge(where, time.time(), stale_after)
    except ValueError as e:
        verdict = Verdict(BROKEN, str(e), None)
    output.emit(out, fmt, verdict.data(),
                verdict.reason if verdict.code == HEALTHY
                else '%s: %s' % (NAMES[verdict.code], verdict.reason))
    return verdict.code
