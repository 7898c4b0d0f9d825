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
"""What each period tells: its state file, and its metrics.

The state file is for ``nova-ironic-multi health``.

A container's liveness or readiness probe runs beside nova-compute with no
database or API access; this file is all it reads
(``[ironic_multi] state_file``). Every refresh rewrites it whole (a new
file renamed over the old one, so a reader never sees half of one): when
it ended, whether it computed a division or was NotReady and why, and the
membership this host saw. Writing it never fails or delays a period: an
error is logged once, and the next period tries again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

#: The format of the file; a reader refuses others.
VERSION = 1

#: nova runs the resource tracker's period every ``[DEFAULT]
#: update_resources_interval`` seconds; 0 is oslo.service's default spacing.
DEFAULT_SPACING = 60


def member_hash(members: frozenset[str]) -> str:
    """A short digest of a member set: hosts that disagree differ."""
    text = '\n'.join(sorted(members))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]


def period_seconds(conf: cfg.ConfigOpts) -> int:
    """The resource tracker's period, as nova-compute runs it."""
    interval = getattr(conf, 'update_resources_interval', 0) or 0
    return int(interval) if interval > 0 else DEFAULT_SPACING


@dataclasses.dataclass
class State:
    """What the file says, as written or read."""

    host: str
    pid: int
    #: Seconds between two periods.
    period: int
    #: Wall-clock times (seconds since the epoch) of the last write, the
    #: last period that computed a division, and the first of the NotReady
    #: periods since (None: the last period computed a division).
    written_at: float
    last_success_at: float | None = None
    not_ready_since: float | None = None
    #: Why the last period was NotReady, and how many in a row were.
    not_ready: str | None = None
    not_ready_periods: int = 0
    #: The membership and division of the last successful period.
    members: list[str] = dataclasses.field(default_factory=list)
    member_hash: str | None = None
    member: bool = False
    managed: int = 0
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> State:
        """:raises ValueError: not a state file of this version."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get('version') != VERSION:
            raise ValueError('not a version %d state file' % VERSION)
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as e:
            raise ValueError(str(e)) from e


def path(conf: cfg.ConfigOpts, host: str) -> str | None:
    """The state file's path for ``host``; None when it is turned off.

    :raises ValueError: it cannot be had from the options.
    """
    try:
        value = conf.ironic_multi.state_file
        if value is None:
            value = os.path.join(conf.state_path, 'ironic_multi',
                                 '%s.json' % host)
    except (cfg.TemplateSubstitutionError, cfg.NoSuchOptError) as e:
        raise ValueError('[ironic_multi] state_file: %s' % e) from e
    return value or None


def write(where: str, state: State) -> None:
    """Replace the file at ``where`` with ``state``, whole.

    :raises OSError: the file cannot be written.
    """
    directory = os.path.dirname(where) or '.'
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.state-')
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(state.to_json())
        # Readable by a probe that runs as another user.
        os.chmod(tmp, 0o644)
        os.replace(tmp, where)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read(where: str) -> State:
    """:raises OSError, ValueError: no readable state file there."""
    with open(where) as f:
        return State.from_json(f.read())


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A period that computed the division: what it found."""

    host: str
    partition: partition_mod.Partition
    members: frozenset[str]
    #: Nodes managed; of them, free, with this host's live instances, and
    #: with its orphans; nodes the ring gives this host (its share, free
    #: or not); nodes of its share with an unknown instance.
    managed: int
    free: int
    with_instance: int
    orphaned: int
    share: int
    unknown: int
    #: Seconds the period took, and its listing.
    seconds: float
    listing_seconds: float


class Report:
    """Writes a service's state file and sets its metrics, each refresh."""

    def __init__(self, conf: cfg.ConfigOpts,
                 clock: Any = time.time) -> None:
        self._conf = conf
        self._clock = clock
        #: The last state written: a NotReady period keeps its membership
        #: and counts on from it.
        self._last: State | None = None
        #: The path a write last failed for (logged once per path).
        self._failed: str | None = None

    def succeeded(self, outcome: Outcome) -> None:
        now = self._clock()
        members = outcome.members
        state = State(
            host=outcome.host, pid=os.getpid(),
            period=period_seconds(self._conf), written_at=now,
            last_success_at=now, members=sorted(members),
            member_hash=member_hash(members),
            member=outcome.host.lower() in members, managed=outcome.managed,
            settings=outcome.partition.summary())
        self._last = state
        self._write(state)
        for kind, count in (('managed', outcome.managed),
                            ('free', outcome.free),
                            ('with_instance', outcome.with_instance),
                            ('orphaned', outcome.orphaned),
                            ('share', outcome.share)):
            metrics.NODES.labels(kind).set(count)
        metrics.UNKNOWN_INSTANCE_NODES.set(outcome.unknown)
        metrics.PEERS.set(len(members))
        metrics.MEMBER.set(1 if state.member else 0)
        metrics.member_view(outcome.partition.scope.describe(),
                            state.member_hash or '')
        metrics.NOT_READY.set(0)
        metrics.LAST_SUCCESS.set(now)
        metrics.PERIOD_INTERVAL.set(state.period)
        metrics.PERIOD_SECONDS.observe(outcome.seconds)
        metrics.LISTING_SECONDS.observe(outcome.listing_seconds)

    def not_ready(self, host: str, reason: str, kind: str,
                  seconds: float) -> None:
        now = self._clock()
        last = self._last or State(host=host, pid=os.getpid(), period=0,
                                   written_at=now)
        state = dataclasses.replace(
            last, host=host, pid=os.getpid(),
            period=period_seconds(self._conf), written_at=now,
            not_ready=reason, not_ready_periods=last.not_ready_periods + 1,
            not_ready_since=(last.not_ready_since
                             if last.not_ready is not None else now))
        self._last = state
        self._write(state)
        metrics.NOT_READY.set(1)
        metrics.NOT_READY_PERIODS.labels(kind).inc()
        metrics.PERIOD_INTERVAL.set(state.period)
        metrics.PERIOD_SECONDS.observe(seconds)

    def _write(self, state: State) -> None:
        where: str | None = '[ironic_multi] state_file'
        try:
            where = path(self._conf, state.host)
            if where is None:
                return
            write(where, state)
        except (OSError, ValueError) as e:
            if self._failed != where:
                LOG.warning('Cannot write the state file %(path)s '
                            '([ironic_multi] state_file) that '
                            '"nova-ironic-multi health" reads: %(err)s. '
                            'Periods go on; the next one tries again.',
                            {'path': where, 'err': e})
            self._failed = where
            return
        if self._failed == where:
            LOG.info('Wrote the state file %s again', where)
        self._failed = None
