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
"""What the soak sees: the databases and the computes' logs, read directly.

Every reading goes to the databases (nova's cell, placement, Ironic) and
to the services' log files, never through an API: the checker keeps
seeing while Keystone is down, Ironic answers 503 or RabbitMQ is gone.
Its connections carry their own ``application_name``, which the database
fault spares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import contextlib
import dataclasses
import re
import time
from typing import Any

import psycopg2
from psycopg2 import extensions as pg_ext

from nova_ironic_multi.tests.fixtures import backing

#: The checker's connections, spared by the database fault.
APPLICATION_NAME = 'nim-soak-checker'


@dataclasses.dataclass(frozen=True)
class Node:
    """An Ironic node, as :mod:`~nova_ironic_multi.division.ownership` reads
    it.
    """

    uuid: str
    instance_uuid: str | None
    conductor_group: str | None
    shard: str | None
    provision_state: str
    maintenance: bool
    last_error: str | None = None


@dataclasses.dataclass(frozen=True)
class Instance:
    uuid: str
    host: str | None
    node: str | None
    vm_state: str | None
    task_state: str | None
    deleted: bool


@dataclasses.dataclass(frozen=True)
class Service:
    host: str
    disabled: bool
    forced_down: bool
    #: Seconds since its last heartbeat, by the database's clock.
    age: float

    def up(self, down_time: float) -> bool:
        return self.age <= down_time

    def live(self, down_time: float) -> bool:
        """A live peer, as the servicegroup membership counts one."""
        return (not self.disabled and not self.forced_down and
                self.up(down_time))


@dataclasses.dataclass(frozen=True)
class ComputeNodeRow:
    id: int
    uuid: str
    host: str
    hypervisor_hostname: str
    deleted: bool


@dataclasses.dataclass(frozen=True)
class Provider:
    id: int
    uuid: str
    name: str
    generation: int


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One reading of everything, at ``at`` (monotonic seconds)."""

    at: float
    nodes: dict[str, Node]
    instances: dict[str, Instance]
    services: dict[str, Service]
    compute_nodes: list[ComputeNodeRow]
    providers: list[Provider]
    #: provider uuid -> consumer uuids with allocations on it
    allocations: dict[str, set[str]]
    #: Ironic conductor groups with a conductor online
    conductor_groups: set[str]
    #: Servers (not deleted) a rebuild of which failed on their compute:
    #: nova then removes their allocation from their own node.
    failed_rebuilds: frozenset[str] = frozenset()
    #: Servers nova's API holds only as a build request: no cell has an
    #: instance for them, so no compute can have seen them.
    uncelled: frozenset[str] = frozenset()


class Databases:
    """Short-lived connections to the run's databases."""

    def __init__(self, pg: backing.Postgres, names: Mapping[str, str]) -> None:
        self.pg = pg
        self.names = dict(names)

    @contextlib.contextmanager
    def connect(self, key: str) -> Any:
        conn = psycopg2.connect(host=self.pg.host, port=self.pg.port,
                                user=self.pg.user,
                                password=self.pg.password or None,
                                dbname=self.names[key], connect_timeout=10,
                                application_name=APPLICATION_NAME)
        conn.set_isolation_level(pg_ext.ISOLATION_LEVEL_AUTOCOMMIT)
        try:
            yield conn
        finally:
            conn.close()

    def rows(self, key: str, sql: str,
             args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.connect(key) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def snapshot(self) -> Snapshot:
        at = time.monotonic()
        nodes = {r[0]: Node(*r) for r in self.rows(
            'ironic', 'SELECT uuid, instance_uuid, conductor_group, shard, '
            'provision_state, maintenance, last_error FROM nodes')}
        conductor_groups = {r[0] for r in self.rows(
            'ironic', 'SELECT conductor_group FROM conductors WHERE online '
            "AND updated_at > timezone('utc', now()) - interval '30 "
            "seconds'")}
        instances = {r[0]: Instance(r[0], r[1], r[2], r[3], r[4], bool(r[5]))
                     for r in self.rows(
                         'nova', 'SELECT uuid, host, node, vm_state, '
                         'task_state, deleted FROM instances')}
        services = {r[0]: Service(r[0], bool(r[1]), bool(r[2]), float(r[3]))
                    for r in self.rows(
                        'nova', 'SELECT host, disabled, forced_down, '
                        "extract(epoch from timezone('utc', now()) - "
                        'coalesce(last_seen_up, created_at)) FROM services '
                        "WHERE deleted = 0 AND \"binary\" = 'nova-compute'")}
        compute_nodes = [ComputeNodeRow(r[0], r[1], r[2], r[3], bool(r[4]))
                         for r in self.rows(
                             'nova', 'SELECT id, uuid, host, '
                             'hypervisor_hostname, deleted FROM '
                             'compute_nodes')]
        providers = [Provider(*r) for r in self.rows(
            'placement', 'SELECT id, uuid, name, generation FROM '
            'resource_providers')]
        allocations: dict[str, set[str]] = {}
        for rp, consumer in self.rows(
                'placement', 'SELECT rp.uuid, a.consumer_id FROM allocations '
                'a JOIN resource_providers rp ON rp.id = '
                'a.resource_provider_id'):
            allocations.setdefault(rp, set()).add(consumer)
        failed_rebuilds = frozenset(r[0] for r in self.rows(
            'nova', 'SELECT DISTINCT a.instance_uuid FROM instance_actions a '
            'JOIN instance_actions_events e ON e.action_id = a.id '
            "WHERE a.action = 'rebuild' AND e.result = 'Error' "
            'AND a.deleted = 0'))
        celled = set(instances) | {r[0] for r in self.rows(
            'nova_cell0', 'SELECT uuid FROM instances')}
        uncelled = frozenset(r[0] for r in self.rows(
            'nova_api', 'SELECT instance_uuid FROM build_requests')) - celled
        return Snapshot(at, nodes, instances, services, compute_nodes,
                        providers, allocations, conductor_groups,
                        failed_rebuilds, uncelled)

    def terminate(self, keys: Iterable[str]) -> int:
        """``pg_terminate_backend`` on every other connection to these."""
        names = [self.names[k] for k in keys]
        rows = self.pg.execute(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
            'WHERE datname = ANY(%s) AND pid <> pg_backend_pid() AND '
            'application_name <> %s', (names, APPLICATION_NAME))
        return sum(1 for (ok,) in rows if ok)


# The computes' own word: one line per resource-tracker period ------------

PERIOD_LINE = re.compile(
    r"Managing (?P<owned>\d+) Ironic nodes \((?P<mine>\d+) with this "
    r"host's instances\) of (?P<listed>\d+) listed: .*?; peers "
    r'(?P<peers>\S*?),? ring ')
#: nova's resource tracker, once per node it reports each period (the
#: computes log nova.compute.resource_tracker at DEBUG).
REPORT_LINE = re.compile(r'Final resource view: name=(?P<node>\S+) ')
STAMP = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?')
#: Lines worth counting in the report, by what they mean.
NOTABLE = {
    'takeover': re.compile(r'Took over Ironic node'),
    'drain hand-over': re.compile(r'Draining: handed Ironic node'),
    'reload applied': re.compile(r'Partition changed from'),
    'reload rejected': re.compile(r'Reload: rejected|Reload not applied|'
                                  r'Invalid partition options'),
    'not ready': re.compile(r'Ironic nodes not refreshed'),
}
#: An oslo.log line at ERROR or CRITICAL: pid, level, logger, the rest.
ERROR_LINE = re.compile(r'^\S+ \S+ (\d+) (ERROR|CRITICAL) (\S+) (.*)$')
UUIDS = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}|req-[0-9a-f-]+|\b\d+(\.\d+)?\b')


def log_time(line: str) -> float | None:
    """The UNIX time of an oslo.log line, or None."""
    m = STAMP.match(line)
    if m is None:
        return None
    return time.mktime(time.strptime(m.group(1), '%Y-%m-%d %H:%M:%S')) + (
        float('0' + m.group(2)) if m.group(2) else 0.0)


@dataclasses.dataclass(frozen=True)
class Period:
    """A compute's account of one period."""

    at: float   # UNIX time of the line
    owned: int
    mine: int
    peers: str
    line: str


class LogFollower:
    """Reads what a compute logged since the last call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._rest = b''
        self.last: Period | None = None
        #: node -> UNIX time nova's resource tracker reported it, in the
        #: host's last whole period and in the period under way.
        self._last: dict[str, float] = {}
        self._current: dict[str, float] = {}
        #: The nodes the period under way manages, until all are reported.
        self._owned: int | None = None
        self.counts: dict[str, int] = dict.fromkeys(NOTABLE, 0)
        #: The first line of each ERROR block, numbers and UUIDs masked.
        self.errors: dict[str, int] = {}
        self._block = ''

    def reported(self, now: float, window: float) -> set[str]:
        """The nodes the host's resource tracker reports now.

        Those of its last whole period and of the period under way, each
        reported within ``window`` seconds before ``now``. A node the host
        let go is out as soon as the period that dropped it is whole (its
        "Managing" line counts the nodes nova then reports), not a window
        later: a hand-over between two hosts is no double report.
        """
        return {n for reports in (self._last, self._current)
                for n, at in reports.items() if now - at <= window}

    def _period_begins(self, owned: int) -> None:
        # The last whole period stands until this one is whole; what a
        # period cut short (nova's report failed half way) did report is
        # added to it.
        self._last = {**self._last, **self._current}
        self._current = {}
        self._owned = owned
        if owned == 0:
            self._period_whole()

    def _period_whole(self) -> None:
        self._last, self._current, self._owned = self._current, {}, None

    def skip_to_end(self) -> None:
        try:
            with open(self.path, 'rb') as f:
                f.seek(0, 2)
                self.offset = f.tell()
        except OSError:
            self.offset = 0
        self._rest = b''

    def poll(self) -> None:
        try:
            with open(self.path, 'rb') as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        data = self._rest + data
        lines = data.split(b'\n')
        self._rest = lines.pop()
        for raw in lines:
            line = raw.decode('utf-8', 'replace')
            for name, pattern in NOTABLE.items():
                if pattern.search(line):
                    self.counts[name] += 1
            self._error(line)
            r = REPORT_LINE.search(line)
            if r is not None:
                at = log_time(line)
                if at is not None:
                    self._current[r.group('node')] = at
                    if (self._owned is not None and
                            len(self._current) >= self._owned):
                        self._period_whole()
                continue
            m = PERIOD_LINE.search(line)
            if m is None:
                continue
            at = log_time(line)
            if at is None:
                continue
            self.last = Period(at, int(m.group('owned')),
                               int(m.group('mine')), m.group('peers'), line)
            self._period_begins(int(m.group('owned')))

    def _error(self, line: str) -> None:
        m = ERROR_LINE.match(line)
        if m is None:
            self._block = ''
            return
        block = '%s %s' % (m.group(1), m.group(3))
        if block == self._block:
            return      # the rest of a traceback
        self._block = block
        message = UUIDS.sub('#', m.group(4))[:160]
        self.errors[message] = self.errors.get(message, 0) + 1
