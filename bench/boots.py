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
"""Mass-boot throughput: three computes with this driver, one with nova's.

On the functional tier's cell (nova 34's own in-process API, conductor,
scheduler and placement, a real all-in-one Ironic 39 process with
``--nodes`` fake-hardware nodes, native-threading mode), two layouts, each
on a fresh cell:

``this driver, 3 computes``
    host1, host2 and host3 run ``nova_ironic_multi.IronicDriver``;
``in-tree, 1 compute``
    host1 alone runs nova's ``ironic.IronicDriver``: upstream's
    recommended layout (one compute per conductor group).

Both drivers wait on Ironic at their default interval (``[ironic_multi]
poll_interval`` 2 s, ``[ironic] api_retry_interval`` 2 s) and every compute
has nova's default build slots (``[DEFAULT] max_concurrent_builds``).

For each N in ``--sizes`` and each way of asking (one multi-create request
of N, and N single requests sent one after another), the time from the
first request to every server ACTIVE, the servers per second, the most
builds in flight at once (builds past their compute's build slot, not yet
ended), then the time from the first delete to every server gone and every
node ``available`` with no instance in Ironic's view.

A profile of where each server's time went, timed inside the process
(medians over the servers of a run): *before the compute* (nova-api,
conductor, scheduler and placement, and the RPC cast), *waiting for a
build slot* (the compute's build executor or semaphore), *driver.spawn*
(the driver's deploy: its requests and its wait on Ironic's conductor) and
*the rest of the build* (claims, placement, network and database work on
the compute). The largest share of server-seconds names what limits the
run; the process CPU seconds of nova's cell and of Ironic say whether a
process was saturated.

Usage: ``tox -e bench -- boots [--sizes 10,30,60] [--nodes 66] [--quick]
[--layouts ours,in-tree]``.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Iterator
import contextlib
import dataclasses
import importlib
import logging
import os
import statistics
import sys
import threading
import time
from typing import Any
import unittest

# nova's test package chooses the concurrency mode (native threading, as
# nova-compute runs by default) before anything imports eventlet.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
import nova.tests.functional  # noqa: E402,F401,I100

import fixtures  # noqa: E402
from keystoneauth1 import loading as ks_loading  # noqa: E402
from nova.compute import build_results  # noqa: E402
from nova.conductor import manager as conductor_manager  # noqa: E402
from nova.conf import CONF  # noqa: E402
from nova import objects  # noqa: E402

objects.register_all()

nova_test_fixtures = importlib.import_module('nova.tests.fixtures.nova')

from bench import common  # noqa: E402
from nova_ironic_multi.tests.functional import base  # noqa: E402

OURS = 'nova_ironic_multi.IronicDriver'
IN_TREE = 'ironic.IronicDriver'
LAYOUTS = {'ours': 'this driver, 3 computes',
           'in-tree': 'in-tree, 1 compute'}
HOWS = ('multi-create', 'single requests')
#: Seconds a run may take before the bench gives up on it.
RUN_TIMEOUT = 900.0
POLL = 0.25

PHASES = ('before the compute', 'waiting for a build slot',
          'driver.spawn', 'the rest of the build')


@dataclasses.dataclass
class Run:
    layout: str
    n: int
    how: str
    active_s: float
    delete_s: float
    peak_in_flight: int
    failed: int
    phases: dict[str, list[float]]
    nova_cpu: float
    ironic_cpu: float
    scheduling_s: float

    @property
    def per_second(self) -> float:
        return self.n / self.active_s if self.active_s else float('nan')


def _instance(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    found = kwargs.get('instance')
    if found is None:
        found = next(a for a in args if isinstance(a, objects.Instance))
    return found


class Marks:
    """When each instance reached each point, from wrapped calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[str, dict[str, float]] = collections.defaultdict(dict)
        self.results: dict[str, str] = {}
        self.spawn_s: dict[str, float] = {}
        self.scheduling_s = 0.0

    def mark(self, uuid: str, point: str) -> None:
        with self.lock:
            self.at[uuid][point] = time.monotonic()

    def reset(self) -> None:
        with self.lock:
            self.at.clear()
            self.results.clear()
            self.spawn_s.clear()
            self.scheduling_s = 0.0

    def wrap_compute(self, manager: Any) -> None:
        cast = manager.build_and_run_instance
        build = manager._do_build_and_run_instance
        spawn = manager.driver.spawn

        def on_cast(*args: Any, **kwargs: Any) -> Any:
            self.mark(_instance(args, kwargs).uuid, 'cast')
            return cast(*args, **kwargs)

        def on_build(*args: Any, **kwargs: Any) -> Any:
            uuid = _instance(args, kwargs).uuid
            self.mark(uuid, 'slot')
            result = None
            try:
                result = build(*args, **kwargs)
                return result
            finally:
                self.mark(uuid, 'end')
                with self.lock:
                    self.results[uuid] = str(result or build_results.FAILED)

        def on_spawn(*args: Any, **kwargs: Any) -> Any:
            uuid = _instance(args, kwargs).uuid
            start = time.monotonic()
            try:
                return spawn(*args, **kwargs)
            finally:
                with self.lock:
                    self.spawn_s[uuid] = time.monotonic() - start

        delete = manager._delete_instance

        def on_delete(*args: Any, **kwargs: Any) -> Any:
            uuid = _instance(args, kwargs).uuid
            try:
                return delete(*args, **kwargs)
            finally:
                self.mark(uuid, 'deleted')

        manager.build_and_run_instance = on_cast
        manager._do_build_and_run_instance = on_build
        manager.driver.spawn = on_spawn
        manager._delete_instance = on_delete

    def wrap_scheduling(self, test: Any) -> None:
        schedule = conductor_manager.ComputeTaskManager._schedule_instances

        def on_schedule(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return schedule(*args, **kwargs)
            finally:
                with self.lock:
                    self.scheduling_s += time.monotonic() - start

        test.useFixture(fixtures.MonkeyPatch(
            'nova.conductor.manager.ComputeTaskManager._schedule_instances',
            on_schedule))

    def deleted(self, uuids: list[str]) -> bool:
        with self.lock:
            return all('deleted' in self.at.get(u, {}) for u in uuids)

    def progress(self) -> int:
        with self.lock:
            return len(self.results) + sum(
                'deleted' in at for at in self.at.values())

    def done(self, n: int) -> bool:
        with self.lock:
            ended = [r for r in self.results.values()
                     if r != build_results.RESCHEDULED]
            return len(ended) >= n

    def phases(self, t0: float) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {p: [] for p in PHASES}
        with self.lock:
            for uuid, at in self.at.items():
                if not {'cast', 'slot', 'end'} <= set(at):
                    continue
                spawn = self.spawn_s.get(uuid, 0.0)
                out[PHASES[0]].append(at['cast'] - t0)
                out[PHASES[1]].append(at['slot'] - at['cast'])
                out[PHASES[2]].append(spawn)
                out[PHASES[3]].append(at['end'] - at['slot'] - spawn)
        return out

    def peak_in_flight(self) -> int:
        events: list[tuple[float, int]] = []
        with self.lock:
            for at in self.at.values():
                if 'slot' in at and 'end' in at:
                    events += [(at['slot'], 1), (at['end'], -1)]
        peak = now = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            now += step
            peak = max(peak, now)
        return peak


class ReaderFirstLock:
    """The cell fixture's reader/writer lock, readers never held back.

    nova's ``CellDatabases`` fixture holds a reader/writer lock around
    every cell-targeted database access and makes new readers wait while a
    writer waits. With builds in flight, a thread in a cell database's
    write transaction (holding the per-database ``DatabaseWriteLock``)
    asks for a read, behind a writer (an API request targeting another
    cell) that waits for a reader that waits for that write transaction:
    nova-api deadlocks, a fixture's artifact no deployment has. Here a
    reader enters whenever no other thread writes, so that cycle cannot
    form; a writer waits until no other thread reads. Reentrant in both.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers: collections.Counter[int] = collections.Counter()
        self._writer: int | None = None
        self._writes = 0

    @contextlib.contextmanager
    def read_lock(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            self._cond.wait_for(lambda: self._writer in (None, me))
            self._readers[me] += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers[me] -= 1
                if not self._readers[me]:
                    del self._readers[me]
                self._cond.notify_all()

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            self._cond.wait_for(lambda: self._writer in (None, me) and not (
                set(self._readers) - {me}))
            self._writer = me
            self._writes += 1
        try:
            yield
        finally:
            with self._cond:
                self._writes -= 1
                if not self._writes:
                    self._writer = None
                self._cond.notify_all()


class BootsCell(base.IronicCellTestCase):
    """One layout on a fresh cell; :meth:`test_boots` runs every size."""

    START_COMPUTES = False
    layout = 'ours'
    sizes: tuple[int, ...] = (10, 30, 60)
    runs: list[Run] = []

    def configure(self) -> None:
        # Each driver's default wait between two reads of a node.
        self.flags(poll_interval=2.0, group='ironic_multi')
        # A fleet's worth of servers for one project.
        self.flags(instances=-1, cores=-1, ram=-1, group='quota')
        self.marks = Marks()
        self.marks.wrap_scheduling(self)
        if self.layout == 'in-tree':
            CONF.register_opts(
                ks_loading.get_auth_plugin_conf_options('none'),
                group='ironic')
            self.flags(auth_type='none', endpoint=self.ironic.url,
                       group='ironic')
            self.flags(compute_driver=IN_TREE)
            hosts: tuple[str, ...] = ('host1',)
        else:
            self.flags(compute_driver=OURS)
            hosts = base.HOSTS
        for host in hosts:
            self._start_compute(host)
        self.settle()
        for compute in self.computes.values():
            self.marks.wrap_compute(compute.manager)

    def settle(self) -> None:
        for _ in range(2):
            self._run_periodics()

    def nova_cpu(self) -> float:
        return time.process_time()

    def ironic_cpu(self) -> float:
        proc = self.ironic.process.proc
        assert proc is not None
        return common.process_group_cpu(os.getpgid(proc.pid))

    def servers(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.admin_api.get_servers(detail=True)
        return found

    def nodes_free(self) -> bool:
        nodes = self.ironic.client.node.list(
            fields=['uuid', 'provision_state', 'instance_uuid'], limit=0)
        return all(n.provision_state == 'available' and
                   not n.instance_uuid for n in nodes)

    def built(self, n: int) -> bool:
        """Every build ended, or builds stopped ending and all settled.

        Progress is read from the wrapped calls, not nova's API: listing
        servers targets every cell, and nova's cell fixture deadlocks when
        that meets builds writing the cell database (its cell lock and its
        per-database write lock taken in either order). A server that never
        reaches a compute (no valid host) ends in ERROR without a build:
        the API is read only after 30 s without a build ending.
        """
        if self.marks.done(n):
            return True
        now, seen = time.monotonic(), self.marks.progress()
        if seen != self._seen:
            self._seen, self._looked = seen, now
            return False
        if now - self._looked < 30.0:
            return False
        self._looked = now
        servers = self.servers()
        return len(servers) >= n and all(
            s['status'] in ('ACTIVE', 'ERROR') for s in servers)

    def wait(self, what: str, ready: Any, t0: float) -> float:
        while not ready():
            if time.monotonic() - t0 > RUN_TIMEOUT:
                raise AssertionError('%s: not within %s s'
                                     % (what, RUN_TIMEOUT))
            time.sleep(POLL)
        return time.monotonic() - t0

    def boot_all(self, flavor: str, n: int, how: str) -> Run:
        self.marks.reset()
        self._looked, self._seen = time.monotonic(), 0
        cpu0, ironic0 = self.nova_cpu(), self.ironic_cpu()
        t0 = time.monotonic()
        if how == 'multi-create':
            body = self._build_server(flavor_id=flavor, networks='none')
            body.update(min_count=n, max_count=n)
            self.admin_api.post_server({'server': body})
        else:
            for _ in range(n):
                self.admin_api.post_server({'server': self._build_server(
                    flavor_id=flavor, networks='none')})
        active_s = self.wait('%d builds' % n,
                             lambda: self.built(n), t0)
        nova_cpu = self.nova_cpu() - cpu0
        ironic_cpu = self.ironic_cpu() - ironic0
        servers = self.servers()
        failed = sum(1 for s in servers if s['status'] != 'ACTIVE')
        phases = self.marks.phases(t0)
        peak = self.marks.peak_in_flight()
        scheduling = self.marks.scheduling_s

        t1 = time.monotonic()
        for server in servers:
            self.admin_api.delete_server(server['id'])
        # (The computes' deletes end, then Ironic's nodes are free.)
        uuids = [s['id'] for s in servers if s.get('OS-EXT-SRV-ATTR:host')]
        delete_s = self.wait(
            'deleting %d servers' % n,
            lambda: self.marks.deleted(uuids) and self.nodes_free(), t1)
        left = self.wait('the API showing no server',
                         lambda: not self.servers(), t1)
        if left > delete_s + 5:
            raise AssertionError('the API showed servers %.1f s after every '
                                 'node was free' % (left - delete_s))
        # The resource tracker's period, as nova-compute runs it every
        # 60 s, before the next run (untimed).
        self.settle()
        return Run(LAYOUTS[self.layout], n, how, active_s, delete_s, peak,
                   failed, phases, nova_cpu, ironic_cpu, scheduling)

    def test_boots(self) -> None:
        flavor = self.baremetal_flavor()
        for n in self.sizes:
            for how in HOWS:
                run = self.boot_all(flavor, n, how)
                self.runs.append(run)
                print('  %s, N = %d, %s: %.1f s to ACTIVE, %.1f s to delete'
                      % (run.layout, n, how, run.active_s, run.delete_s),
                      file=sys.stderr, flush=True)


def limiter(run: Run, slots: int) -> str:
    totals = {p: sum(v) for p, v in run.phases.items()}
    worst = max(totals, key=lambda p: totals[p])
    share = totals[worst] / (sum(totals.values()) or 1.0)
    names = {
        PHASES[0]: 'nova-api, conductor and scheduler/placement',
        PHASES[1]: 'the build slots (%d a compute)' % slots,
        PHASES[2]: "the deploy wait on Ironic's conductor",
        PHASES[3]: "the compute's claims, placement and database work",
    }
    return '%s (%.0f %%)' % (names[worst], 100 * share)


def report(runs: list[Run], slots: int) -> str:
    med = statistics.median
    rows = []
    for r in runs:
        rows.append([
            r.layout, str(r.n), r.how, '%.1f' % r.active_s,
            '%.2f' % r.per_second, str(r.peak_in_flight),
            '%.1f' % r.delete_s, str(r.failed)])
    out = [common.table(
        ['layout', 'N', 'asked as', 'to ACTIVE s', 'servers/s',
         'peak builds in flight', 'delete all s', 'not ACTIVE'], rows)]
    prof = []
    for r in runs:
        prof.append([r.layout, str(r.n), r.how] + [
            '%.2f' % med(r.phases[p]) if r.phases[p] else '-'
            for p in PHASES] + [
            '%.1f' % r.scheduling_s,
            '%.1f / %.1f' % (r.nova_cpu, r.active_s),
            '%.1f' % r.ironic_cpu, limiter(r, slots)])
    out.append('')
    out.append("Where a server's time went (medians, seconds), the "
               "process CPU seconds (nova's whole in-process cell over "
               "the run's wall; Ironic) and the largest share of "
               "server-seconds:")
    out.append(common.table(
        ['layout', 'N', 'asked as'] + list(PHASES) +
        ['scheduling s (sum)', 'nova CPU / wall', 'Ironic CPU',
         'most time in'], prof))
    by = {(r.layout, r.n, r.how): r for r in runs}
    ratios = []
    for n in sorted({r.n for r in runs}):
        for how in HOWS:
            ours = by.get((LAYOUTS['ours'], n, how))
            theirs = by.get((LAYOUTS['in-tree'], n, how))
            if ours and theirs:
                ratios.append([str(n), how,
                               '%.2f' % (theirs.active_s / ours.active_s),
                               '%.2f' % (theirs.delete_s / ours.delete_s)])
    if ratios:
        out.append('')
        out.append('This driver on 3 computes against the in-tree driver '
                   'on 1 (in-tree time / this time; above 1: faster here):')
        out.append(common.table(['N', 'asked as', 'to ACTIVE', 'delete all'],
                                ratios))
    return '\n'.join(out)


def run_layout(layout: str, sizes: tuple[int, ...], nodes: int) -> list[Run]:
    case_cls = type('BootsCell_' + layout.replace('-', '_'), (BootsCell,),
                    {'layout': layout, 'sizes': sizes, 'NODES': nodes,
                     'runs': []})
    case = case_cls('test_boots')
    result = unittest.TestResult()
    case.run(result)
    for _, trace in result.errors + result.failures:
        print(trace, file=sys.stderr)
    if not result.wasSuccessful() or result.testsRun != 1:
        raise SystemExit('boots: the %s layout failed (above)' % layout)
    return list(case_cls.runs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench boots')
    parser.add_argument('--sizes', default='10,30,60')
    parser.add_argument('--nodes', type=int, default=66,
                        help='Ironic nodes (at least the largest size)')
    parser.add_argument('--layouts', default='ours,in-tree')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run: N = 4, 8 nodes')
    args = parser.parse_args(argv)
    sizes = (4,) if args.quick else tuple(
        int(s) for s in args.sizes.split(','))
    nodes = 8 if args.quick else args.nodes
    if nodes < max(sizes):
        parser.error('--nodes %d: fewer nodes than the largest size %d; '
                     'give --nodes %d or more'
                     % (nodes, max(sizes), max(sizes)))
    layouts = args.layouts.split(',')
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        parser.error('--layouts: %s unknown; choose from %s'
                     % (', '.join(sorted(unknown)), ', '.join(LAYOUTS)))
    logging.basicConfig(level=logging.WARNING)
    # nova's cell logs the shutdown of each of its thread pools at INFO
    # after the test's log capture has gone: not for the table's reader.
    logging.getLogger('nova.thread_pool_factory').setLevel(logging.WARNING)
    print(common.machine())
    print('Ironic: %d fake-hardware nodes; sizes %s; both drivers poll '
          'Ironic every 2 s; [DEFAULT] max_concurrent_builds = %d'
          % (nodes, ', '.join(map(str, sizes)), CONF.max_concurrent_builds))
    runs: list[Run] = []
    # (This process runs only the bench: the cell fixture of every cell it
    # makes takes the lock above.)
    nova_test_fixtures.ReaderWriterLock = ReaderFirstLock
    for layout in layouts:
        runs += run_layout(layout, sizes, nodes)
    print(report(runs, CONF.max_concurrent_builds))
    failed = sum(r.failed for r in runs)
    if failed:
        print('boots: %d servers did not become ACTIVE' % failed)
        return 1
    return 0
