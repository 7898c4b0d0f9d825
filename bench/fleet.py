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
"""One period on every host of a fleet: Ironic's work, by driver and mode.

The set-up is ``bench scale``'s (a real all-in-one Ironic 39 on sqlite with
``--nodes`` fake-hardware nodes, one API worker, ``[api] max_limit =
1000``; a sqlite nova database), with C nova-compute services (C = 3 and
C = 10 by default), every host's driver in this one process. The nodes
are labelled with ``--shards`` shards by ``sharding.label`` (what ``shards
apply`` writes), except ``--unsharded`` of them.

For each C and each contender, in the same run:

* nova 34's in-tree driver (every host lists every node);
* this driver with ``divide = nodes`` (the same listing, our client);
* this driver with ``divide = shards`` (each host lists its shards and the
  nodes without a shard);

C fresh drivers run one untimed period (start-up: connections, and in
shard mode the one whole listing of a start), then one timed period: each
host's ``get_available_nodes()`` in turn, with the Ironic process's CPU
seconds (``/proc``), the HTTP requests and the wall seconds of each. The
per-host node sets of the in-tree driver and of ``divide = nodes`` must be
equal (the same ring, bit for bit); with ``divide = shards`` the ring
divides shards, not nodes, so the per-host sets differ, and what is checked
is what issue 14 asks of the division: the union equals the other modes'
and no node is managed twice.

The 10^5-node, 100-host figures are extrapolated from the measured costs:
this driver's Ironic CPU and host wall per listed node and per request,
fitted by least squares on its hosts' runs in both modes (the nodes a host
listed are counted in Ironic's answers, not taken from what it manages),
against the in-tree driver's per listed node.
The slowest host is the one with the largest share as the compatible ring
really assigns the shards, not an even split. The contenders run in one
order at the first C and in the reverse order at the next. A target is met
only when the division check passed.

Usage: ``tox -e bench -- fleet [--nodes 10000] [--hosts 3,10]
[--shards 100] [--unsharded 100]``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import math
import shutil
import sqlite3
import statistics
import tempfile
import time
from typing import Any

from bench import common
from bench import scale
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import sharding
from nova_ironic_multi import ironic
from nova_ironic_multi import rings

CONF = scale.CONF
INTREE, NODES, SHARDS = 'in-tree', 'ours nodes', 'ours shards'
MODES = (INTREE, NODES, SHARDS)
#: Issue 14's targets.
CPU_TARGET = 1.3
WALL_TARGETS = {3: 0.25, 10: 0.1}


@dataclasses.dataclass
class HostRun:
    host: str
    wall: float
    requests: int
    server_cpu: float
    nodes: frozenset[str]
    #: Nodes in the listings Ironic answered (a host in shard mode lists
    #: its shards and every node without a shard, and manages fewer).
    listed: int


@dataclasses.dataclass
class Period:
    mode: str
    hosts: int
    runs: list[HostRun]
    start_cpu: float      # Ironic CPU of the untimed start-up period

    @property
    def cpu(self) -> float:
        return sum(r.server_cpu for r in self.runs)

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.runs)

    @property
    def max_wall(self) -> float:
        return max(r.wall for r in self.runs)

    @property
    def median_wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def managed(self) -> int:
        return sum(len(r.nodes) for r in self.runs)

    @property
    def listed(self) -> int:
        return sum(r.listed for r in self.runs)


def label_nodes(db_path: str, shards: int, unsharded: int) -> None:
    """Write shard labels straight into Ironic's database (set-up only)."""
    with sqlite3.connect(db_path) as conn:
        uuids = [u for (u,) in conn.execute(
            'SELECT uuid FROM nodes ORDER BY id')]
        conn.executemany('UPDATE nodes SET shard = ? WHERE uuid = ?',
                         [(sharding.label(u, shards), u)
                          for u in uuids[unsharded:]])


def hosts_named(count: int) -> list[str]:
    return ['host%d' % i for i in range(1, count + 1)]


def only_first(nova: scale.NovaState, every: list[int], count: int) -> None:
    """Only the first ``count`` services are up: the others forced down.

    (A service just created counts as up until ``service_down_time``.)
    """
    for i, service_id in enumerate(every):
        scale.main_db_api.service_update(nova.ctxt, service_id,
                                         {'forced_down': i >= count})
    nova.services = every[:count]


def make_driver(mode: str, host: str) -> Any:
    if mode == INTREE:
        driver = scale.intree_driver.IronicDriver(None)
    else:
        driver = scale.our_driver.IronicDriver(None)
    CONF.set_override('host', host)
    driver.init_host(host)
    return driver


def run_period(mode: str, drivers: dict[str, Any], bench: scale.Bench,
               counter: scale.HttpCounter) -> list[HostRun]:
    runs = []
    for host, driver in drivers.items():
        # nova's in-tree driver reads its own name from CONF.host.
        CONF.set_override('host', host)
        bench.nova.heartbeat()
        counter.reset()
        before = bench.server_cpu()
        timing = common.measure(driver.get_available_nodes,
                                trace_memory=False)
        server_cpu = bench.server_cpu() - before
        runs.append(HostRun(host, timing.wall, counter.count, server_cpu,
                            frozenset(timing.value), counter.listed()))
    return runs


def fleet_period(mode: str, hosts: list[str], bench: scale.Bench,
                 counter: scale.HttpCounter) -> Period:
    CONF.set_override('divide', 'shards' if mode == SHARDS else 'nodes',
                      group='ironic_multi')
    drivers = {h: make_driver(mode, h) for h in hosts}
    try:
        start = run_period(mode, drivers, bench, counter)
        runs = run_period(mode, drivers, bench, counter)
    finally:
        for host, driver in drivers.items():
            driver.cleanup_host(host)
    period = Period(mode, len(hosts), runs,
                    sum(r.server_cpu for r in start))
    scale.progress('  C=%-3d %-12s Ironic CPU %6.2fs  requests %4d  host '
                   'wall max %6.2fs  (start-up period: Ironic CPU %.2fs)'
                   % (len(hosts), mode, period.cpu, period.requests,
                      period.max_wall, period.start_cpu))
    return period


# listing = delta (issue 41) ------------------------------------------------

#: Nodes changed per period; issue 41's targets against a full listing.
CHANGES = (0, 20, 500)
DELTA_TARGETS = {20: 0.1, 500: 1.1}
#: [ironic_multi] delta_overlap's default.
OVERLAP_SECONDS = 60
RESYNC_TARGET = 1.0
#: The resync row.
RESYNC = 'resync'


def _stamp(when: datetime.datetime) -> str:
    return when.strftime('%Y-%m-%d %H:%M:%S.%f')


def age_nodes(db_path: str, seconds: float) -> None:
    """Every change ``seconds`` older (set-up only): time passes.

    With NULLs left alone (never changed). At set-up, every node is given a
    change an hour ago first (a fleet in service).
    """
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute('SELECT id, updated_at FROM nodes').fetchall()
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        conn.executemany('UPDATE nodes SET updated_at = ? WHERE id = ?', [
            (_stamp((datetime.datetime.fromisoformat(at) if at else
                     now - datetime.timedelta(hours=1)) -
                    datetime.timedelta(seconds=seconds)), i)
            for i, at in rows])


def change_nodes(db_path: str, count: int, round_: int) -> None:
    """``count`` nodes changed now, as Ironic writes a change: a new
    ``last_error`` (no field the listing reads) and ``updated_at``.
    """
    if not count:
        return
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    with sqlite3.connect(db_path) as conn:
        uuids = [u for (u,) in conn.execute(
            'SELECT uuid FROM nodes ORDER BY random() LIMIT ?', (count,))]
        conn.executemany(
            'UPDATE nodes SET updated_at = ?, last_error = ? WHERE uuid = ?',
            [(_stamp(now), 'bench round %d' % round_, u) for u in uuids])


@dataclasses.dataclass
class DeltaRow:
    hosts: int
    divide: str
    changes: int | str
    #: Per host, medians over the fleet's hosts: Ironic CPU and wall.
    cpu: float
    wall: float
    full_cpu: float
    full_wall: float
    requests: int
    same: bool


def delta_rows(hosts: list[str], divide: str, bench: scale.Bench,
               counter: scale.HttpCounter, db_path: str) -> list[DeltaRow]:
    """Full and delta periods on every host, side by side, per change rate.

    For each rate: the changes are written, every host runs one period
    with ``listing = full`` (fresh drivers kept warm) and then, on the same
    Ironic, the delta hosts run theirs; each host's node set must be the
    same in both.
    """
    CONF.set_override('divide', divide, group='ironic_multi')
    mode = SHARDS if divide == 'shards' else NODES
    CONF.set_override('listing', 'full', group='ironic_multi')
    full = {h: make_driver(mode, h) for h in hosts}
    CONF.set_override('listing', 'delta', group='ironic_multi')
    CONF.set_override('delta_resync_periods', 10 ** 6, group='ironic_multi')
    CONF.set_override('delta_check_periods', 10 ** 6, group='ironic_multi')
    ours = {h: make_driver(mode, h) for h in hosts}
    rows = []
    try:
        for listing, drivers in (('full', full), ('delta', ours)):
            CONF.set_override('listing', listing, group='ironic_multi')
            run_period(mode, drivers, bench, counter)    # start-up
            run_period(mode, drivers, bench, counter)    # warm
        def pair(changes: int, round_: int) -> tuple[list[HostRun],
                                                     list[HostRun]]:
            # Half an overlap passes between periods: a period reads its
            # own changes and the last period's again (as with
            # delta_overlap = the period and changes all along).
            age_nodes(db_path, OVERLAP_SECONDS / 2)
            change_nodes(db_path, changes, round_)
            CONF.set_override('listing', 'full', group='ironic_multi')
            was = run_period(mode, full, bench, counter)
            CONF.set_override('listing', 'delta', group='ironic_multi')
            return was, run_period(mode, ours, bench, counter)

        for round_, changes in enumerate(CHANGES + (RESYNC,)):
            if changes == RESYNC:
                # The next delta period lists in full (every K periods).
                CONF.set_override('delta_resync_periods', 1,
                                  group='ironic_multi')
                was, got = pair(0, 2 * round_)
            else:
                # A steady rate: one untimed pair at it first.
                pair(changes, 2 * round_)
                was, got = pair(changes, 2 * round_ + 1)
            rows.append(DeltaRow(
                len(hosts), divide, changes,
                statistics.median(r.server_cpu for r in got),
                statistics.median(r.wall for r in got),
                statistics.median(r.server_cpu for r in was),
                statistics.median(r.wall for r in was),
                sum(r.requests for r in got),
                [r.nodes for r in got] == [r.nodes for r in was]))
            stats = [d._inventory._pipeline.delta.stats
                     for d in ours.values()]
            scale.progress('  C=%-3d %-6s %-7s delta Ironic CPU/host %.3fs '
                           '(full %.3fs); feed reads %d, full listings %s'
                           % (len(hosts), divide, changes, rows[-1].cpu,
                              rows[-1].full_cpu,
                              sum(st.refreshes for st in stats),
                              [dict(st.resyncs) for st in stats]))
    finally:
        CONF.set_override('listing', 'full', group='ironic_multi')
        for drivers in (full, ours):
            for host, driver in drivers.items():
                driver.cleanup_host(host)
    return rows


def delta_table(rows: list[DeltaRow]) -> tuple[str, list[str]]:
    out, verdicts = [], []
    for r in rows:
        ratio = r.cpu / r.full_cpu if r.full_cpu else float('nan')
        target = (RESYNC_TARGET if r.changes == RESYNC else
                  DELTA_TARGETS.get(r.changes))  # type: ignore[call-overload]
        out.append([str(r.hosts), r.divide, str(r.changes),
                    '%.3f' % r.full_cpu, '%.3f' % r.cpu, '%.3f' % ratio,
                    '%.3f' % r.full_wall, '%.3f' % r.wall,
                    '%.3f' % (r.wall / r.full_wall), str(r.requests),
                    'yes' if r.same else 'NO'])
        if target is not None:
            verdicts.append(
                'C=%d %s, %s changed: delta Ironic CPU per host %.3f x a '
                'full listing (target <= %.1f x), same division %s: %s' % (
                    r.hosts, r.divide, r.changes, ratio, target,
                    'yes' if r.same else 'NO',
                    _met(r.same and ratio <= target)))
    return common.table(
        ['C', 'DIVIDE', 'CHANGED', 'FULL CPU/HOST (s)', 'DELTA CPU/HOST (s)',
         'x FULL', 'FULL WALL (s)', 'DELTA WALL (s)', 'x FULL',
         'REQUESTS (FLEET)', 'SAME NODES'], out), verdicts


def check_division(periods: dict[str, Period]) -> list[str]:
    """What must hold between the modes; an empty list when all does."""
    problems = []
    by_host = {m: {r.host: r.nodes for r in p.runs}
               for m, p in periods.items()}
    if by_host[INTREE] != by_host[NODES]:
        problems.append('per-host node sets differ between the in-tree '
                        'driver and divide = nodes')
    unions = {m: frozenset().union(*h.values()) for m, h in by_host.items()}
    if len(set(unions.values())) != 1:
        problems.append('the modes manage different unions of nodes')
    for mode, hosts in by_host.items():
        if sum(len(s) for s in hosts.values()) != len(unions[mode]):
            problems.append('%s: a node is managed by two hosts' % mode)
        if not unions[mode]:
            problems.append('%s: no host manages any node' % mode)
    return problems


@dataclasses.dataclass
class Costs:
    """Fitted costs (seconds).

    This driver's per listed node and per request; the in-tree driver's
    per listed node (one full listing).
    """

    cpu_node: float
    cpu_request: float
    wall_node: float
    wall_request: float
    intree_cpu_node: float
    intree_wall_node: float


def _least_squares(rows: list[tuple[int, int, float]]) -> tuple[float, float]:
    """``y = a * listed + b * requests`` by least squares, ``b >= 0``."""
    sll = sum(float(n) * n for n, _, _ in rows)
    srr = sum(float(r) * r for _, r, _ in rows)
    slr = sum(float(n) * r for n, r, _ in rows)
    sly = sum(n * y for n, _, y in rows)
    sry = sum(r * y for _, r, y in rows)
    det = sll * srr - slr * slr
    if det > 0:
        a, b = (sly * srr - sry * slr) / det, (sry * sll - sly * slr) / det
        if b >= 0:
            return a, b
    return sly / sll, 0.0


def fit(periods: list[Period]) -> Costs:
    """Per listed node and per request costs.

    This driver's come from its own runs, both modes, host by host, fitted
    on the nodes each host listed (its shards' and every node without a
    shard, not only the nodes it manages) and its requests. The in-tree
    driver's cost per listed node (it asks Ironic for more fields, through
    openstacksdk) makes the "one full listing" and the in-tree host wall
    that the ratios divide by.
    """
    ours = [r for p in periods if p.mode in (NODES, SHARDS) for r in p.runs]
    intree = [r for p in periods if p.mode == INTREE for r in p.runs]
    cpu_node, cpu_request = _least_squares(
        [(r.listed, r.requests, r.server_cpu) for r in ours])
    wall_node, wall_request = _least_squares(
        [(r.listed, r.requests, r.wall) for r in ours])
    return Costs(cpu_node, cpu_request, wall_node, wall_request,
                 statistics.median(r.server_cpu / r.listed for r in intree),
                 statistics.median(r.wall / r.listed for r in intree))


@dataclasses.dataclass
class Share:
    """What one host gets in shard mode: shards and their nodes."""

    shards: int
    nodes: int


def shares(nodes: int, hosts: int, shards: int, unsharded: int,
           algorithm: str = 'compatible') -> list[Share]:
    """Each host's share, as the ring really assigns the shards.

    The fleet is labelled as this bench labels Ironic's nodes; an even
    split would hide the largest share (100 shards over 100 hosts leave
    dozens of hosts with none on the compatible ring, and others with
    several).
    """
    counts = collections.Counter(
        sharding.label(u, shards)
        for u in common.random_uuids(nodes)[unsharded:])
    members = hosts_named(hosts)
    ring = rings.load(algorithm, members, 5)
    assignment = sharding.assign(ring, counts,
                                 algorithm in sharding.WEIGHTED)
    out = {m: Share(0, 0) for m in members}
    for shard, member in assignment.items():
        out[member].shards += 1
        out[member].nodes += counts[shard]
    return list(out.values())


def host_requests(share: Share, unsharded: int) -> int:
    """Requests of one host's period in shard mode.

    ``GET /v1/shards``; the pages of its shards, named at most
    SHARDS_PER_REQUEST to a request (a page holds [api] max_limit = 1000,
    the last one has no next link); the pages of the nodes without a shard.
    """
    batches = math.ceil(share.shards / ironic.SHARDS_PER_REQUEST)
    own = max(batches, math.ceil(share.nodes / 1000)) if share.shards else 0
    return 1 + own + (math.ceil(unsharded / 1000) if unsharded else 0)


@dataclasses.dataclass
class Extrapolation:
    cpu_ratio: float       # fleet Ironic CPU / one full listing
    wall_ratio: float      # slowest host's wall / an in-tree host's
    largest: Share
    empty_hosts: int
    listed: int
    requests: int


def extrapolate(costs: Costs, nodes: int, hosts: int, shards: int,
                unsharded: int) -> Extrapolation:
    every = shares(nodes, hosts, shards, unsharded)
    requests = [host_requests(s, unsharded) for s in every]
    listed = sum(s.nodes + unsharded for s in every)
    fleet_cpu = costs.cpu_node * listed + costs.cpu_request * sum(requests)
    walls = [costs.wall_node * (s.nodes + unsharded) +
             costs.wall_request * n for s, n in zip(every, requests,
                                                    strict=True)]
    slowest = max(range(hosts), key=walls.__getitem__)
    return Extrapolation(fleet_cpu / (costs.intree_cpu_node * nodes),
                         walls[slowest] / (costs.intree_wall_node * nodes),
                         every[slowest], sum(1 for s in every
                                             if not s.shards),
                         listed, sum(requests))


def _met(ok: bool) -> str:
    return 'met' if ok else 'MISSED'


def table(periods: list[Period]) -> tuple[str, list[str]]:
    rows, verdicts = [], []
    for c in sorted({p.hosts for p in periods}):
        at = {p.mode: p for p in periods if p.hosts == c}
        full_cpu = statistics.median(r.server_cpu for r in at[INTREE].runs)
        intree_wall = at[INTREE].median_wall
        for mode in MODES:
            p = at[mode]
            rows.append([
                str(c), mode, '%.2f' % p.cpu,
                '%.2f' % (p.cpu / full_cpu),
                '%.2f / %.2f' % (p.median_wall, p.max_wall),
                '%.3f' % (p.max_wall / intree_wall), str(p.requests),
                str(p.listed), str(p.managed), '%.2f' % p.start_cpu])
        shard = at[SHARDS]
        cpu_ratio = shard.cpu / full_cpu
        wall_ratio = shard.max_wall / intree_wall
        wall_target = WALL_TARGETS.get(c, 1 / c)
        # Figures of a division that lost or doubled nodes meet nothing.
        problems = check_division(at)
        verdicts.append(
            'C=%d: shards fleet Ironic CPU %.2f x one full listing (target '
            '<= %.1f; in-tree %.2f): %s' % (
                c, cpu_ratio, CPU_TARGET, at[INTREE].cpu / full_cpu,
                _met(not problems and cpu_ratio <= CPU_TARGET)))
        verdicts.append(
            'C=%d: slowest shards host wall %.3f x in-tree host (target '
            '<= %.2f): %s' % (c, wall_ratio, wall_target,
                              _met(not problems and
                                   wall_ratio <= wall_target)))
        verdicts.append('C=%d: division %s' % (
            c, 'MISSED: ' + '; '.join(problems) if problems else
            'checked: in-tree and divide = nodes give every host the same '
            'nodes; divide = shards manages the same union, no node twice'))
    return common.table(
        ['C', 'DRIVER', 'IRONIC CPU/PERIOD (s)', 'x FULL LISTING',
         'HOST WALL med/max (s)', 'x IN-TREE', 'REQUESTS', 'LISTED',
         'MANAGED', 'START-UP CPU (s)'], rows), verdicts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench fleet')
    parser.add_argument('--nodes', type=int, default=10000)
    parser.add_argument('--hosts', default='3,10',
                        help='comma-separated fleet sizes (default 3,10)')
    parser.add_argument('--shards', type=int, default=100)
    parser.add_argument('--unsharded', type=int, default=100,
                        help='nodes left without a shard (default 100)')
    parser.add_argument('--modes', default=','.join(MODES),
                        help='comma-separated contenders (default all: %s)'
                        % ','.join(MODES))
    parser.add_argument('--keep', action='store_true')
    parser.add_argument('--no-delta', action='store_true',
                        help='skip the listing = delta figures (issue 41)')
    args = parser.parse_args(argv)
    sizes = [int(c) for c in args.hosts.split(',')]
    modes = [m for m in MODES if m in args.modes.split(',')]
    scale.exit_on_sigterm()
    scale.quiet_logs()
    print('Machine: %s' % common.machine())
    workdir = tempfile.mkdtemp(prefix='nim-bench-fleet-')
    ironic = None
    nova = None
    periods: list[Period] = []
    deltas: list[DeltaRow] = []
    try:
        scale.progress('Ironic with %d nodes, %d shards, %d unsharded, in %s'
                       % (args.nodes, args.shards, args.unsharded, workdir))
        started = time.perf_counter()
        ironic = scale.make_ironic(workdir, args.nodes)
        label_nodes(ironic.db_path, args.shards, args.unsharded)
        age_nodes(ironic.db_path, 0)
        ironic.start()
        ironic.wait_ready()
        scale.progress('  ready in %.1fs' % (time.perf_counter() - started))
        nova = scale.NovaState(workdir, hosts_named(max(sizes)))
        scale.configure_drivers(ironic.url)
        nim_conf.register_opts(CONF)
        counter = scale.HttpCounter(ironic.url)
        counter.keep_listings = True
        bench = scale.Bench(ironic, nova, counter)
        every = list(nova.services)
        with counter.installed():
            for i, c in enumerate(sizes):
                hosts = hosts_named(c)
                only_first(nova, every, c)
                # Alternate the order, so no contender always runs first
                # (or last) on a machine that warms up or gets busier.
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    periods.append(fleet_period(mode, hosts, bench, counter))
                if not args.no_delta:
                    for divide in ('nodes', 'shards'):
                        deltas.extend(delta_rows(hosts, divide, bench,
                                                 counter, ironic.db_path))
    finally:
        if nova is not None:
            nova.close()
        if ironic is not None:
            ironic.stop()
        if args.keep:
            scale.progress('kept %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if deltas:
        text, verdicts = delta_table(deltas)
        print('listing = delta against listing = full, the same hosts on the '
              'same Ironic, per host and period (medians over the hosts; '
              'changes written just before each pair of periods; "resync": '
              'a period of delta_resync_periods):')
        print(text)
        print()
        print('Targets (issue 41):')
        for line in verdicts:
            print('  ' + line)
        print()
    if modes != list(MODES):
        for p in periods:
            print('C=%d %s: Ironic CPU %.2fs, requests %d, host wall med %.2fs'
                  ' max %.2fs, nodes listed %d, managed %d, start-up Ironic '
                  'CPU %.2fs' % (p.hosts, p.mode, p.cpu, p.requests,
                                 p.median_wall, p.max_wall, p.listed,
                                 p.managed, p.start_cpu))
        return 0
    text, verdicts = table(periods)
    print('One period on every host, %d Ironic nodes (%d shards, %d nodes '
          'without a shard):' % (args.nodes, args.shards, args.unsharded))
    print(text)
    print()
    print('Targets (issue 14):')
    for line in verdicts:
        print('  ' + line)
    costs = fit(periods)
    x = extrapolate(costs, 10 ** 5, 100, args.shards, args.unsharded)
    print('  Extrapolated to 10^5 nodes and 100 hosts (this driver: Ironic '
          'CPU %.3f ms a listed node and %.1f ms a request, host wall %.3f '
          'ms a listed node and %.1f ms a request; in-tree: Ironic CPU %.3f '
          'ms and host wall %.3f ms a listed node): %d nodes listed and %d '
          'requests a period; shards fleet Ironic CPU %.2f x one full '
          'listing (in-tree: 100 x); the compatible ring gives %d hosts no '
          'shard and the largest share %d shards (%d nodes, plus %d without'
          ' a shard): slowest host wall %.3f x in-tree.'
          % (costs.cpu_node * 1e3, costs.cpu_request * 1e3,
             costs.wall_node * 1e3, costs.wall_request * 1e3,
             costs.intree_cpu_node * 1e3, costs.intree_wall_node * 1e3,
             x.listed, x.requests, x.cpu_ratio, x.empty_hosts,
             x.largest.shards, x.largest.nodes, args.unsharded,
             x.wall_ratio))
    return 0
