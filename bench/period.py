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
"""nova's whole resource-tracker period on one host, both drivers.

What one nova-compute service does every ``update_resources_interval``
(60 s by default): ``ComputeManager.update_available_resource``, nova 34's
own code, with its real ``ResourceTracker`` and ``SchedulerReportClient``,
against

* a real all-in-one Ironic 39 holding ``--nodes`` fake-hardware nodes
  (``bench scale``'s: clones of a node Ironic enrolled itself, sqlite, one
  API worker, ``[api] max_limit = 1000``);
* nova's main database (nova's own migrations), on sqlite by default, with
  one ``nova-compute`` service, ``host1``, which manages every node (the
  only host: both drivers' rings give it all of them);
* an in-process placement: nova's functional ``PlacementFixture``
  (placement 16's WSGI application behind wsgi-intercept, its own
  database), which nova's report client calls as it would a remote one.

The compute manager is built by nova (``ComputeManager()`` loads the driver
named by ``compute_driver``: ``nova_ironic_multi.IronicDriver`` or nova's
in-tree ``ironic.IronicDriver``), its service record set as ``init_host``
sets it, and the driver's own ``init_host`` called. Objects go straight to
the database, as in nova's functional tests: a real compute sends them to
nova-conductor over RPC, one more round trip per query.

Periods, for each node count and driver:

``first start``
    the very first period (``startup=True``) on empty databases: it creates
    every compute node row and resource provider. Run once per node count,
    by the first driver; the other driver then starts on what it made (a
    rolling migration keeps rows and providers, issue 24.3). At the larger
    node counts the rows and providers of all but ``--seed`` nodes are
    copies of those the first start made (``--clone-above``), written
    straight into both databases; the restart after checks that nova
    wrote nothing.
``restart``
    a new compute manager (empty report-client cache, new resource
    tracker), ``startup=True``, every row and provider already there: what
    each restart of nova-compute costs.
``steady``
    a period with no placement association due: ``[compute]
    resource_provider_association_refresh`` is set to a day for it.
``refresh``
    a period on which every provider's associations are due (the option
    set to 1 s, and 1 s waited), as every ``resource_provider_association_
    refresh`` seconds (300 by default) for each provider.

with ``[compute] update_resources_max_workers`` = 1 and each of
``--workers``. For each period: wall and process CPU seconds; the time
spent inside the driver's calls (every public method of nova's
``ComputeDriver`` interface, timed on the instance nova uses; a call made
from inside another is counted once), inside placement calls (the report
client's ``get``/``put``/``post``/``delete``: client and in-process server
together) and the rest (nova: the resource tracker, its objects and
database queries, the report client's provider tree); the placement
requests, the SQL statements nova sent outside driver calls, the writes
(INSERT, UPDATE, DELETE) to either database, the HTTP requests to Ironic
and the Ironic process's CPU seconds. Wall and CPU of the parts are summed
over the threads that ran them. The period fails the bench if it logged an
error or did not handle every node.

"nodes per host that fit a 60 s period" divides 60 s by the wall per node
of a steady period, and by the average over periods when each provider's
associations are refreshed every 300 s (one period in five when a period
lasts 60 s).

Usage: ``tox -e bench -- period [--quick] [--nodes 1000,10000]
[--workers 4] [--steady 2] [--keep]``.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from typing import Any
import uuid

from bench import scale  # noqa: I100 (patches nova's concurrency first)

import fixtures  # noqa: E402
from nova.compute import manager as compute_manager  # noqa: E402
from nova import config as nova_config  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova.db.main import api as main_db_api  # noqa: E402
from nova.db import migration  # noqa: E402
from nova import objects  # noqa: E402
from nova import rpc  # noqa: E402
from nova.scheduler.client import report as report_client  # noqa: E402
from nova import thread_pool_factory  # noqa: E402
from nova.virt import driver as virt_driver  # noqa: E402
from oslo_db.sqlalchemy import enginefacade  # noqa: E402
from oslo_db.sqlalchemy import test_fixtures as db_fixtures  # noqa: E402
from oslo_messaging import conffixture as messaging_conffixture  # noqa: E402
from oslo_utils import timeutils  # noqa: E402
from placement import db_api as placement_db  # noqa: E402
import requests  # noqa: E402
import sqlalchemy  # noqa: E402
from sqlalchemy import engine as sa_engine  # noqa: E402

from bench import common  # noqa: E402
from bench import placement as bench_placement  # noqa: E402
from nova_ironic_multi.tests.fixtures import backing  # noqa: E402

CONF = scale.CONF
HOST = 'host1'
OURS, INTREE = 'ours', 'in-tree'
COMPUTE_DRIVERS = {OURS: 'nova_ironic_multi.IronicDriver',
                   INTREE: 'ironic.IronicDriver'}
FIRST, RESTART, STEADY, REFRESH = 'first start', 'restart', 'steady', 'refresh'
#: The issue's anchors (issue 24.4), CPU milliseconds per node.
ANCHOR_STEADY_MS = 9.0
ANCHOR_REFRESH_MS = 30.0
#: nova's defaults: the period's spacing and the association refresh.
PERIOD_S = 60.0
ASSOCIATION_REFRESH_S = 300
#: What the steady periods set the association refresh to: a day.
NEVER_DUE_S = 86400
DRIVER, PLACEMENT = 'driver', 'placement'


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# Where the time goes ---------------------------------------------------------

@dataclasses.dataclass
class Account:
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0

    def add(self, wall: float, cpu: float) -> None:
        self.calls += 1
        self.wall += wall
        self.cpu += cpu


class Instruments:
    """Time spent in driver calls and placement calls; SQL; Ironic requests.

    A call is timed only when no other timed call is running in the same
    thread: a driver method calling another, or anything the driver does
    through nova's objects, is counted once, in the outer call. Wall and CPU
    (``time.thread_time``) are summed over the threads.
    """

    def __init__(self, ironic_url: str) -> None:
        self.ironic_url = ironic_url
        self._local = threading.local()
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.parts: dict[str, Account] = collections.defaultdict(Account)
            self.methods: dict[str, Account] = collections.defaultdict(
                Account)
            self.placement_requests: collections.Counter[str] = (
                collections.Counter())
            #: SQL statements by database, sent outside timed calls.
            self.sql: collections.Counter[str] = collections.Counter()
            #: INSERT / UPDATE / DELETE statements by database, anywhere.
            self.writes: collections.Counter[str] = collections.Counter()
            self.ironic_requests = 0

    def _timed(self, part: str, name: str,
               fn: collections.abc.Callable[..., Any]
               ) -> collections.abc.Callable[..., Any]:
        local = self._local

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, 'part', None) is not None:
                return fn(*args, **kwargs)
            local.part = part
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                wall = time.perf_counter() - wall0
                cpu = time.thread_time() - cpu0
                local.part = None
                with self._lock:
                    self.parts[part].add(wall, cpu)
                    self.methods['%s %s' % (part, name)].add(wall, cpu)
        return timed

    def wrap_driver(self, driver: Any) -> None:
        """Time every method of nova's driver interface on ``driver``."""
        for name, member in inspect.getmembers(virt_driver.ComputeDriver):
            if name.startswith('_') or not inspect.isfunction(member):
                continue
            setattr(driver, name, self._timed(DRIVER, name,
                                              getattr(driver, name)))

    @contextlib.contextmanager
    def installed(self) -> collections.abc.Iterator[Instruments]:
        with contextlib.ExitStack() as stack:
            for verb in ('get', 'put', 'post', 'delete'):
                original = getattr(report_client.SchedulerReportClient, verb)
                stack.enter_context(fixtures.MonkeyPatch(
                    'nova.scheduler.client.report.SchedulerReportClient.'
                    + verb, self._placement_call(verb.upper(), original)))
            stack.enter_context(self._sql_counted())
            stack.enter_context(self._ironic_counted())
            yield self

    def _placement_call(self, verb: str,
                        fn: collections.abc.Callable[..., Any]
                        ) -> collections.abc.Callable[..., Any]:
        timed = self._timed(PLACEMENT, verb, fn)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.placement_requests[verb] += 1
            return timed(*args, **kwargs)
        return call

    @contextlib.contextmanager
    def _sql_counted(self) -> collections.abc.Iterator[None]:
        local = self._local
        placement = placement_db.get_placement_engine()

        def before(conn: Any, cursor: Any, statement: str, *args: Any
                   ) -> None:
            db = 'placement' if conn.engine is placement else 'nova'
            verb = statement.lstrip()[:6].upper()
            if verb not in ('SELECT', 'INSERT', 'UPDATE', 'DELETE'):
                return      # BEGIN, COMMIT, ROLLBACK, SAVEPOINT
            with self._lock:
                if getattr(local, 'part', None) is None:
                    self.sql[db] += 1
                if verb != 'SELECT':
                    self.writes[db] += 1

        sqlalchemy.event.listen(sa_engine.Engine, 'before_cursor_execute',
                                before)
        try:
            yield
        finally:
            sqlalchemy.event.remove(sa_engine.Engine,
                                    'before_cursor_execute', before)

    @contextlib.contextmanager
    def _ironic_counted(self) -> collections.abc.Iterator[None]:
        original = requests.Session.send
        bench = self

        def send(session: requests.Session,
                 request: requests.PreparedRequest,
                 **kwargs: Any) -> requests.Response:
            if (request.url or '').startswith(bench.ironic_url):
                with bench._lock:
                    bench.ironic_requests += 1
            return original(session, request, **kwargs)

        requests.Session.send = send  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            requests.Session.send = original  # type: ignore[method-assign]


class ErrorCounter(logging.Handler):
    """Counts the records at ERROR and above: a period must log none."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.first is None:
            self.first = '%s: %s' % (record.name, record.getMessage())


# nova and placement ----------------------------------------------------------

class Databases:
    """Where nova's and placement's databases live: sqlite or PostgreSQL.

    sqlite (the default) needs nothing, but oslo.db opens a new connection
    for every transaction on a sqlite file (no pool), and a connection to
    nova's schema costs about 1.4 ms before its first query. With a
    PostgreSQL URL, each node count gets two throwaway databases on that
    server (named as the e2e tier names its own, so a run killed before it
    dropped them is cleaned up by the next e2e run), reached through a
    connection pool as a deployment's MySQL or PostgreSQL is.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.pg = None if url == 'sqlite' else backing.Postgres(url)
        self.token = backing.run_token()

    @property
    def name(self) -> str:
        return 'sqlite' if self.pg is None else 'PostgreSQL'

    def make(self, workdir: str, label: str) -> str:
        """A new empty database; its SQLAlchemy URL."""
        if self.pg is None:
            path = os.path.join(workdir, label + '.sqlite')
            with contextlib.closing(sqlite3.connect(path)) as conn:
                # As nova's functional fixtures make their files.
                conn.execute('PRAGMA journal_mode=WAL')
            return 'sqlite:///' + path
        name = self.token + label
        self.pg.create(name)
        return self.pg.sqlalchemy_url(name)

    def server_cpu(self) -> float:
        """CPU seconds of the server processes serving this run's databases.

        PostgreSQL names the database in each backend's process title.
        """
        if self.pg is None:
            return 0.0
        tick = os.sysconf('SC_CLK_TCK')
        total = 0
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            try:
                with open('/proc/%s/cmdline' % entry, 'rb') as f:
                    if self.token.encode() not in f.read():
                        continue
                with open('/proc/%s/stat' % entry) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
            except (OSError, IndexError):
                continue
            total += int(fields[11]) + int(fields[12])
        return total / tick

    def close(self) -> None:
        if self.pg is not None:
            failed = self.pg.remove_created()
            if failed:
                progress('could not drop: %s' % '; '.join(failed))


class Cell:
    """nova's database with one compute service, and placement in-process."""

    def __init__(self, workdir: str, ironic_url: str,
                 databases: Databases) -> None:
        self._fixtures = fixtures.Fixture()
        self._fixtures.setUp()
        use = self._fixtures.useFixture
        # The working directory is the node count's: it names the databases.
        label = os.path.basename(workdir)
        nova_config.parse_args(['bench-period'],
                                     default_config_files=[],
                                     configure_db=False, init_rpc=False)
        # The compute manager builds RPC clients (never used here).
        messaging = use(messaging_conffixture.ConfFixture(CONF))
        messaging.transport_url = 'fake:/'
        rpc.init(CONF)
        objects.register_all()
        # A database of its own for each node count: nova's engine facade
        # starts once, so each cell plugs a new one in (as nova's database
        # fixtures do) and the next cell replaces it.
        facade = enginefacade.transaction_context()
        use(db_fixtures.ReplaceEngineFacadeFixture(
            main_db_api.context_manager, facade))
        main_db_api.configure(CONF)
        facade.configure(connection=databases.make(workdir, 'nova_' + label))
        migration.db_sync(database='main')
        self.ctxt = nova_context.get_admin_context()
        main_db_api.service_create(self.ctxt, {
            'host': HOST, 'binary': 'nova-compute', 'topic': 'compute',
            'report_count': 0, 'uuid': str(uuid.uuid4()),
            'version': objects.service.SERVICE_VERSION})
        # placement in this process, on a database of its own.
        self.placement = use(bench_placement.InProcessPlacement(
            databases.make(workdir, 'placement_' + label)))
        CONF.set_override('host', HOST)
        CONF.set_override('endpoint_override', ironic_url, group='ironic')
        CONF.set_override('auth_type', 'none', group='ironic')
        self.databases = databases
        self.heartbeat()

    def heartbeat(self) -> None:
        service = objects.Service.get_by_compute_host(self.ctxt, HOST)
        service.last_seen_up = timeutils.utcnow()
        service.report_count += 1
        service.save()

    def close(self) -> None:
        self._fixtures.cleanUp()

    def compute_manager(self, driver: str) -> Any:
        """A compute manager on ``HOST`` as nova-compute builds it."""
        CONF.set_override('compute_driver', COMPUTE_DRIVERS[driver])
        manager = compute_manager.ComputeManager()
        service = objects.Service.get_by_compute_host(self.ctxt, HOST)
        # What ComputeManager.init_host does with the service record.
        manager.service_ref = service
        manager.rt.set_service_ref(service)
        manager.driver.init_host(HOST)
        return manager

    def counts(self) -> tuple[int, int]:
        """Live compute node rows of ``HOST``; resource providers."""
        with main_db_api.get_engine().connect() as conn:
            rows = conn.execute(sqlalchemy.text(
                'SELECT count(*) FROM compute_nodes WHERE deleted = 0 AND '
                'host = :host'), {'host': HOST}).scalar_one()
        with placement_db.get_placement_engine().connect() as conn:
            providers = conn.execute(sqlalchemy.text(
                'SELECT count(*) FROM resource_providers')).scalar_one()
        return int(rows), int(providers)


# Copying rows and providers (set-up of the larger node counts) ---------------

def _copy_rows(conn: Any, table: str, where: str, params: dict[str, Any],
               changes: list[dict[str, Any]]) -> None:
    """Insert one copy of the row ``where`` selects per item of ``changes``.

    Each copy takes the original's columns, minus ``id``, updated with the
    item (placement's ``id`` columns are not auto-increment on sqlite: the
    caller passes ``id`` when it must).
    """
    row = conn.execute(sqlalchemy.text(
        'SELECT * FROM %s WHERE %s' % (table, where)), params).mappings(
    ).one()
    base = {k: v for k, v in row.items() if k != 'id'}
    rows = [dict(base, **c) for c in changes]
    columns = sorted(rows[0])
    conn.execute(sqlalchemy.text('INSERT INTO %s (%s) VALUES (%s)' % (
        table, ', '.join(columns), ', '.join(':' + c for c in columns))),
        rows)


def clone_state(seed: str, others: list[str]) -> None:
    """Give every node of ``others`` the compute node row and the resource
    provider (inventory, traits) nova made for node ``seed``.

    Written straight into both databases, in one transaction each; what a
    first start would have written for the same Ironic node (the nodes are
    clones of one another), under the node's own UUID.
    """
    with main_db_api.get_engine().begin() as conn:
        _copy_rows(conn, 'compute_nodes', 'hypervisor_hostname = :u',
                   {'u': seed}, [{'uuid': u, 'hypervisor_hostname': u}
                                 for u in others])
    with placement_db.get_placement_engine().begin() as conn:
        seed_id = conn.execute(sqlalchemy.text(
            'SELECT id FROM resource_providers WHERE uuid = :u'),
            {'u': seed}).scalar_one()
        top = conn.execute(sqlalchemy.text(
            'SELECT max(id) FROM resource_providers')).scalar_one()
        ids = {u: top + 1 + i for i, u in enumerate(others)}
        _copy_rows(conn, 'resource_providers', 'id = :i', {'i': seed_id},
                   [{'id': ids[u], 'uuid': u, 'name': u,
                     'root_provider_id': ids[u]} for u in others])
        for table in ('inventories', 'resource_provider_traits'):
            keys = conn.execute(sqlalchemy.text(
                'SELECT * FROM %s WHERE resource_provider_id = :i' % table),
                {'i': seed_id}).mappings().all()
            for key in keys:
                pick = ('resource_class_id' if table == 'inventories'
                        else 'trait_id')
                _copy_rows(conn, table, 'resource_provider_id = :i AND %s = '
                           ':k' % pick, {'i': seed_id, 'k': key[pick]},
                           [{'resource_provider_id': ids[u]}
                            for u in others])


# One period ------------------------------------------------------------------

@dataclasses.dataclass
class PeriodRun:
    size: int
    driver: str
    kind: str
    workers: int
    nodes: int
    wall: float
    cpu: float
    parts: dict[str, Account]
    methods: dict[str, Account]
    placement_requests: dict[str, int]
    sql: dict[str, int]
    writes: dict[str, int]
    ironic_requests: int
    ironic_cpu: float
    #: CPU of the database server (PostgreSQL) meanwhile; 0 on sqlite.
    db_cpu: float

    def per_node_ms(self, value: float) -> float:
        return value * 1e3 / self.nodes if self.nodes else float('nan')

    @property
    def rest_cpu(self) -> float:
        return self.cpu - self.parts[DRIVER].cpu - self.parts[PLACEMENT].cpu


def _copied(accounts: dict[str, Account]) -> dict[str, Account]:
    """A snapshot: the instruments go on adding to their own accounts."""
    return {k: dataclasses.replace(v) for k, v in accounts.items()}


class Sink:
    """Every period measured, also written to a JSON file as it comes.

    A run cut short (by a deadline, a crash) keeps what it measured, and
    ``--from-json`` reports it.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.runs: list[PeriodRun] = []

    def add(self, run: PeriodRun) -> None:
        self.runs.append(run)
        if self.path:
            with open(self.path + '.tmp', 'w') as f:
                json.dump([dataclasses.asdict(r) for r in self.runs], f,
                          indent=1)
            os.replace(self.path + '.tmp', self.path)


def load(path: str) -> list[PeriodRun]:
    """The periods a ``--json`` file holds."""
    with open(path) as f:
        records = json.load(f)
    runs = []
    for r in records:
        for key in ('parts', 'methods'):
            r[key] = {k: Account(**v) for k, v in r[key].items()}
        runs.append(PeriodRun(**r))
    return runs


class Host:
    """One compute manager (one driver) on ``HOST``, and its periods."""

    def __init__(self, cell: Cell, ironic: Any, instruments: Instruments,
                 errors: ErrorCounter, size: int, driver: str,
                 sink: Sink) -> None:
        self.cell = cell
        self.sink = sink
        self.ironic = ironic
        self.instruments = instruments
        self.errors = errors
        self.size = size
        self.driver = driver
        self.manager = cell.compute_manager(driver)
        #: When the last period that refreshed associations ended.
        self.refreshed = time.monotonic()
        instruments.wrap_driver(self.manager.driver)

    def close(self) -> None:
        self.manager.driver.cleanup_host(HOST)

    def period(self, kind: str, workers: int) -> PeriodRun:
        if CONF.compute.update_resources_max_workers != workers:
            CONF.set_override('update_resources_max_workers', workers,
                              group='compute')
            # nova makes the pool once, at its first use, with the size
            # then: drop it, and the next period makes it anew. (What
            # reset_all_executors() does, without waiting a second for the
            # idle workers of every pool to time out.)
            pool = thread_pool_factory.FACTORY._all_executors.pop(
                thread_pool_factory.ExecutorType.UPDATE_RESOURCES, None)
            if pool is not None:
                pool.shutdown(wait=False)
        if kind == REFRESH:
            CONF.set_override('resource_provider_association_refresh', 1,
                              group='compute')
            # Every provider was last refreshed before the end of the last
            # period that refreshed them: once more than a second has passed
            # since then, all are due.
            time.sleep(max(0.0, self.refreshed + 1.05 - time.monotonic()))
        else:
            CONF.set_override('resource_provider_association_refresh',
                              NEVER_DUE_S, group='compute')
        self.cell.heartbeat()
        errors_before = self.errors.count
        self.instruments.reset()
        ironic_before = common.process_group_cpu(self.ironic.proc.pid)
        db_before = self.cell.databases.server_cpu()
        startup = kind in (FIRST, RESTART)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.manager.update_available_resource(self.cell.ctxt,
                                               startup=startup)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        if kind != STEADY:
            self.refreshed = time.monotonic()
        ironic_cpu = (common.process_group_cpu(self.ironic.proc.pid) -
                      ironic_before)
        db_cpu = self.cell.databases.server_cpu() - db_before
        if self.errors.count != errors_before:
            raise RuntimeError('%s %s period logged %d errors; the first: %s'
                               % (self.driver, kind, self.errors.count -
                                  errors_before, self.errors.first))
        handled = self.instruments.methods.get(
            '%s get_available_resource' % DRIVER, Account()).calls
        i = self.instruments
        run = PeriodRun(self.size, self.driver, kind, workers, handled, wall,
                        cpu, _copied(i.parts), _copied(i.methods),
                        dict(i.placement_requests), dict(i.sql),
                        dict(i.writes), i.ironic_requests, ironic_cpu,
                        db_cpu)
        # (After the snapshot: these queries are the bench's, not nova's.)
        rows, providers = self.cell.counts()
        if not handled == rows == providers == self.size:
            raise RuntimeError(
                '%s %s period: %d nodes in Ironic, %d handled, %d compute '
                'node rows, %d providers' % (self.driver, kind, self.size,
                                             handled, rows, providers))
        for part in (DRIVER, PLACEMENT):
            run.parts.setdefault(part, Account())
        self.sink.add(run)
        progress('  %6d %-7s %-11s workers %d: %7.1fs wall %7.1fs cpu  '
                 '%5.1f / %5.1f ms a node  driver %4.1f%% of cpu  '
                 'placement %d requests  writes %s'
                 % (self.size, self.driver, kind, workers, wall, cpu,
                    run.per_node_ms(wall), run.per_node_ms(cpu),
                    100 * run.parts[DRIVER].cpu / cpu,
                    sum(run.placement_requests.values()),
                    sum(run.writes.values())))
        return run


# A node count ----------------------------------------------------------------

@dataclasses.dataclass
class Plan:
    steady: int
    workers: list[int]
    seed: int
    clone_above: int
    #: Above this many nodes, only a restart and one steady period a
    #: driver: the refresh and workers figures come from smaller counts.
    lean_above: int


def measure_size(workdir: str, size: int, order: list[str], plan: Plan,
                 databases: Databases, sink: Sink) -> None:
    """Every period of both drivers over ``size`` Ironic nodes."""
    sub = os.path.join(workdir, str(size))
    os.makedirs(sub)
    progress('Ironic with %d nodes' % size)
    ironic = scale.make_ironic(sub, size)
    ironic.start()
    cell = None
    errors = ErrorCounter()
    logging.getLogger().addHandler(errors)
    try:
        ironic.wait_ready()
        cell = Cell(sub, ironic.url, databases)
        instruments = Instruments(ironic.url)
        with instruments.installed():
            first = True
            for name in order:
                if first:
                    first_start(cell, ironic, instruments, errors, size,
                                name, plan, sink)
                    first = False
                host = Host(cell, ironic, instruments, errors, size, name,
                            sink)
                try:
                    host.period(RESTART, 1)
                    if size > plan.lean_above:
                        host.period(STEADY, 1)
                        continue
                    for _ in range(plan.steady):
                        host.period(STEADY, 1)
                    host.period(REFRESH, 1)
                    for workers in plan.workers:
                        if workers == 1:
                            continue
                        host.period(STEADY, workers)
                        host.period(REFRESH, workers)
                finally:
                    host.close()
    finally:
        logging.getLogger().removeHandler(errors)
        if cell is not None:
            cell.close()
        ironic.stop()


def first_start(cell: Cell, ironic: Any, instruments: Instruments,
                errors: ErrorCounter, size: int, name: str, plan: Plan,
                sink: Sink) -> None:
    """The first period ever; above ``clone_above`` nodes, on a sample.

    nova's first start makes every row and provider through placement, at
    about 0.1 s a node here: at 10^4 nodes, more than the whole bench. So
    above ``clone_above`` nodes, it runs with Ironic holding only ``seed``
    nodes (the others moved out of its node table meanwhile), and the
    others get copies of one node's row and provider.
    """
    if size <= plan.clone_above:
        host = Host(cell, ironic, instruments, errors, size, name, sink)
        try:
            host.period(FIRST, 1)
            return
        finally:
            host.close()
    uuids = common.random_uuids(size)
    hidden = uuids[plan.seed:]
    hide_nodes(ironic.db_path, hidden)
    host = Host(cell, ironic, instruments, errors, plan.seed, name, sink)
    try:
        host.period(FIRST, 1)
    finally:
        host.close()
    unhide_nodes(ironic.db_path)
    started = time.perf_counter()
    clone_state(uuids[0], hidden)
    progress('  copied %d compute node rows and providers in %.1fs'
             % (len(hidden), time.perf_counter() - started))


def hide_nodes(db_path: str, uuids: list[str]) -> None:
    """Move nodes out of Ironic's node table, into ``hidden_nodes``.

    Set-up only: their traits stay, under the same node ids.
    """
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute('CREATE TABLE hidden_nodes AS SELECT * FROM nodes '
                     'WHERE 0')
        conn.executemany('INSERT INTO hidden_nodes SELECT * FROM nodes '
                         'WHERE uuid = ?', [(u,) for u in uuids])
        conn.execute('DELETE FROM nodes WHERE uuid IN (SELECT uuid FROM '
                     'hidden_nodes)')


def unhide_nodes(db_path: str) -> None:
    """Put back what :func:`hide_nodes` moved out."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute('INSERT INTO nodes SELECT * FROM hidden_nodes')
        conn.execute('DROP TABLE hidden_nodes')


# Report ----------------------------------------------------------------------

def _pick(runs: list[PeriodRun], size: int, driver: str, kind: str,
          workers: int = 1) -> list[PeriodRun]:
    return [r for r in runs if (r.size, r.driver, r.kind, r.workers) ==
            (size, driver, kind, workers)]


def median_run(runs: list[PeriodRun]) -> PeriodRun:
    """The run of median wall time (the lower one of an even count)."""
    ordered = sorted(runs, key=lambda r: r.wall)
    return ordered[(len(ordered) - 1) // 2]


def _ms(x: float) -> str:
    return '%.1f' % x


def table(runs: list[PeriodRun]) -> str:
    rows = []
    keys = []
    for r in runs:
        key = (r.size, r.driver, r.kind, r.workers)
        if key not in keys:
            keys.append(key)
    keys.sort(key=lambda k: (k[0], [FIRST, RESTART, STEADY, REFRESH].index(
        k[2]), k[3], k[1]))
    for size, driver, kind, workers in keys:
        mine = _pick(runs, size, driver, kind, workers)
        r = median_run(mine)
        d = r.parts[DRIVER]
        p = r.parts[PLACEMENT]
        rows.append([
            str(size), driver, kind, str(workers), str(len(mine)),
            str(r.nodes), '%.1f' % r.wall, '%.1f' % r.cpu,
            _ms(r.per_node_ms(r.wall)), _ms(r.per_node_ms(r.cpu)),
            _ms(r.per_node_ms(d.cpu)), '%.1f' % (100 * d.cpu / r.cpu),
            '%.1f' % (100 * d.wall / r.wall) if workers == 1 else '-',
            _ms(r.per_node_ms(p.cpu)), _ms(r.per_node_ms(r.rest_cpu)),
            '%.1f' % (sum(r.placement_requests.values()) / r.nodes),
            '%.1f' % (r.sql.get('nova', 0) / r.nodes),
            str(sum(r.writes.values())), str(r.ironic_requests),
            '%.1f' % r.ironic_cpu, '%.1f' % r.db_cpu])
    headers = ['nodes', 'driver', 'period', 'workers', 'runs', 'handled',
               'wall s', 'cpu s', 'wall ms/node', 'cpu ms/node',
               'driver cpu ms/node', 'driver % cpu', 'driver % wall',
               'placement cpu ms/node', 'rest cpu ms/node',
               'placement req/node', 'nova SQL/node', 'writes',
               'Ironic req', 'Ironic cpu s', 'DB server cpu s']
    return common.table(headers, rows)


@dataclasses.dataclass
class Fit:
    """Per-node wall of one driver at one node count, and what fits."""

    size: int
    driver: str
    steady_ms: float
    refresh_ms: float
    #: The node count whose refresh cost was added, when not ``size``.
    refresh_from: int | None = None

    @property
    def average_ms(self) -> float:
        """Per node and period, a refresh every 300 s of 60 s periods."""
        due = math.ceil(ASSOCIATION_REFRESH_S / PERIOD_S)
        return self.steady_ms + (self.refresh_ms - self.steady_ms) / due

    @property
    def fit_steady(self) -> int:
        return int(PERIOD_S * 1e3 / self.steady_ms)

    @property
    def fit_average(self) -> int:
        return int(PERIOD_S * 1e3 / self.average_ms)


def _wall_ms(runs: list[PeriodRun]) -> float:
    # The run the table shows.
    r = median_run(runs)
    return r.per_node_ms(r.wall)


def fits(runs: list[PeriodRun]) -> list[Fit]:
    """Per node count and driver.

    Where a count ran no refresh period, the refresh's extra wall per node
    comes from the largest smaller count that ran one: that extra is
    per-node work only (four more placement GETs a node).
    """
    out = []
    for size in sorted({r.size for r in runs}):
        for driver in (OURS, INTREE):
            steady = _pick(runs, size, driver, STEADY)
            if not steady:
                continue
            refresh = _pick(runs, size, driver, REFRESH)
            if refresh:
                out.append(Fit(size, driver, _wall_ms(steady),
                               _wall_ms(refresh)))
                continue
            smaller = [f for f in out if f.driver == driver and
                       f.size < size and f.refresh_from is None]
            if not smaller:
                continue
            base = smaller[-1]
            s = _wall_ms(steady)
            out.append(Fit(size, driver, s,
                           s + base.refresh_ms - base.steady_ms, base.size))
    return out


def anchors(runs: list[PeriodRun]) -> list[str]:
    lines = []
    for size in sorted({r.size for r in runs}):
        for driver in (OURS, INTREE):
            steady = _pick(runs, size, driver, STEADY)
            if not steady:
                continue
            s = median_run(steady)
            sc = s.per_node_ms(s.cpu)
            refresh = _pick(runs, size, driver, REFRESH)
            if refresh:
                f = median_run(refresh)
                fc = f.per_node_ms(f.cpu)
                about_refresh = 'refresh %.1f ms (anchor ~%.0f: x%.2f)' % (
                    fc, ANCHOR_REFRESH_MS, fc / ANCHOR_REFRESH_MS)
            else:
                about_refresh = 'no refresh period run'
            lines.append(
                '%d nodes, %s: steady %.1f ms cpu a node (anchor ~%.0f: '
                'x%.2f), %s; the driver %.1f%% of a steady period\'s cpu '
                '(anchor: a few percent), its listing (get_available_nodes) '
                '%.1f%% of the wall' % (
                    size, driver, sc, ANCHOR_STEADY_MS,
                    sc / ANCHOR_STEADY_MS, about_refresh,
                    100 * s.parts[DRIVER].cpu / s.cpu,
                    100 * s.methods.get('%s get_available_nodes' % DRIVER,
                                        Account()).wall / s.wall))
            for workers in sorted({r.workers for r in runs
                                   if r.size == size} - {1}):
                for kind in (STEADY, REFRESH):
                    many = _pick(runs, size, driver, kind, workers)
                    one = _pick(runs, size, driver, kind, 1)
                    if many and one:
                        m, o = median_run(many), median_run(one)
                        lines.append(
                            '  update_resources_max_workers = %d, %s: wall '
                            'x%.2f, cpu x%.2f of one worker' % (
                                workers, kind, m.wall / o.wall,
                                m.cpu / o.cpu))
    return lines


def fit_lines(runs: list[PeriodRun]) -> list[str]:
    lines = []
    for f in fits(runs):
        lines.append(
            'nodes per host that fit a 60 s period, %s (measured at %d '
            'nodes): %d steady (%.1f ms a node), %d with a refresh every '
            '300 s (%.1f ms a node on average%s)' % (
                f.driver, f.size, f.fit_steady, f.steady_ms, f.fit_average,
                f.average_ms,
                '' if f.refresh_from is None else
                '; EXTRAPOLATED: the refresh cost per node measured at %d '
                'nodes' % f.refresh_from))
    return lines


# Sizing ----------------------------------------------------------------------

#: The largest share over the mean, by ring: ``balanced`` dividing shards,
#: with at least three shards a host (``bench shards``: at most 1.10), and
#: ``compatible``, the in-tree driver's (``bench rings``: about 1.5 with
#: 100 hosts).
SHARE = {OURS: 1.10, INTREE: 1.5}
FLEETS = (10 ** 3, 10 ** 4, 10 ** 5)


@dataclasses.dataclass
class Costs:
    """Wall milliseconds: a listed node, and nova's work for a managed one."""

    driver: str
    size: int
    listing_ms: float
    nova_ms: float


def costs(runs: list[PeriodRun]) -> list[Costs]:
    """From the largest node count of each driver.

    The listing (``get_available_nodes``) is paid per node *listed*: every
    node in scope with ``divide = nodes`` and with the in-tree driver, only
    the host's shards with ``divide = shards``. The rest of a period (the
    average with refreshes) is paid per node *managed*.
    """
    out = []
    for driver in (OURS, INTREE):
        mine = [f for f in fits(runs) if f.driver == driver]
        if not mine:
            continue
        fit = mine[-1]
        steady = _pick(runs, fit.size, driver, STEADY)
        listing = statistics.median(
            r.methods.get('%s get_available_nodes' % DRIVER,
                          Account()).wall * 1e3 / r.nodes for r in steady)
        out.append(Costs(driver, fit.size, listing,
                         fit.average_ms - listing))
    return out


def computes(c: Costs, nodes: int, shards: bool) -> int | None:
    """Fewest hosts whose every period fits 60 s with one host down.

    None when the listing of the whole scope alone takes 60 s.
    """
    budget = PERIOD_S * 1e3
    share = SHARE[c.driver] * nodes
    if shards:
        return 1 + math.ceil(share * (c.listing_ms + c.nova_ms) / budget)
    listing = nodes * c.listing_ms
    if listing >= budget:
        return None
    return 1 + math.ceil(share * c.nova_ms / (budget - listing))


def sizing_lines(runs: list[PeriodRun]) -> list[str]:
    measured = costs(runs)
    if not measured:
        return ['no figures: sizing needs a refresh period at some node '
                'count of the runs reported (none runs above --lean-above; '
                'add a smaller count, e.g. --nodes 1000,10000, or report '
                'both runs: --from-json A.json B.json)']
    lines = []
    for c in measured:
        lines.append(
            '%s (from %d nodes): %.3f ms a listed node, %.1f ms of nova a '
            'managed node (a refresh every 300 s included), largest share '
            '%.2f x the mean' % (c.driver, c.size, c.listing_ms, c.nova_ms,
                                 SHARE[c.driver]))
    for nodes in FLEETS:
        parts = []
        for c in measured:
            modes = [(True, 'divide = shards'), (False, 'divide = nodes')]
            for shards, label in modes if c.driver == OURS else [
                    (False, 'every host lists every node')]:
                n = computes(c, nodes, shards)
                parts.append('%s, %s: %s' % (
                    c.driver, label,
                    '%d computes' % n if n is not None else
                    'none fits (the listing alone takes %.0f s)' % (
                        nodes * c.listing_ms / 1e3)))
        lines.append('%d nodes: %s' % (nodes, '; '.join(parts)))
    return lines


# Main ------------------------------------------------------------------------

QUICK: dict[str, Any] = {'nodes': '100,300', 'steady': 1, 'workers': '4'}
FULL: dict[str, Any] = {'nodes': '1000,10000', 'steady': 2, 'workers': '4'}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='bench period')
    parser.add_argument('--quick', action='store_true',
                        help='small node counts (%s), one steady period: a '
                        'smoke run of a few minutes' % QUICK['nodes'])
    parser.add_argument('--nodes', help='comma-separated node counts per '
                        'host (default %s)' % FULL['nodes'])
    parser.add_argument('--steady', type=int, help='steady periods with one '
                        'worker (default %d)' % FULL['steady'])
    parser.add_argument('--workers', help='comma-separated values of '
                        '[compute] update_resources_max_workers to run '
                        'besides 1 (default %s)' % FULL['workers'])
    parser.add_argument('--drivers', default='%s,%s' % (OURS, INTREE),
                        help='comma-separated drivers (default both)')
    parser.add_argument('--clone-above', type=int, default=2000,
                        help='above this many nodes, the first start makes '
                        'the rows and providers of --seed nodes and copies '
                        'them for the others (default 2000)')
    parser.add_argument('--lean-above', type=int, default=2000,
                        help='above this many nodes, run only a restart and '
                        'one steady period of each driver; refresh figures '
                        'are then extrapolated from the largest smaller '
                        'count (default 2000)')
    parser.add_argument('--seed', type=int, default=100,
                        help='nodes of a cloned first start (default 100)')
    parser.add_argument('--db', default='sqlite',
                        help="nova's and placement's databases: sqlite "
                        '(default) or the URL of a PostgreSQL superuser, '
                        'e.g. postgresql://postgres@127.0.0.1:5432, on '
                        'which to make throwaway databases')
    parser.add_argument('--json', metavar='PATH',
                        help='also write every period to PATH (a JSON list), '
                        'each as soon as it is measured')
    parser.add_argument('--from-json', metavar='PATH', nargs='+',
                        help='measure nothing: report the periods these '
                        '--json files hold')
    parser.add_argument('--keep', action='store_true',
                        help='keep the working directory')
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key in ('nodes', 'steady', 'workers'):
        if getattr(args, key) is None:
            setattr(args, key, defaults[key])
    try:
        args.sizes = [int(n) for n in args.nodes.split(',')]
        args.worker_counts = [int(n) for n in args.workers.split(',') if n]
    except ValueError:
        parser.error('--nodes and --workers take comma-separated integers')
    args.driver_names = args.drivers.split(',')
    if (any(n < 1 for n in args.sizes + args.worker_counts) or
            args.steady < 1 or args.seed < 1):
        parser.error('--nodes, --workers, --steady and --seed must be at '
                     'least 1')
    unknown = set(args.driver_names) - {OURS, INTREE}
    if unknown or not args.driver_names:
        parser.error('--drivers: %s; choose from %s, %s' % (
            ','.join(sorted(unknown)) or 'none', OURS, INTREE))
    return args


def run(args: argparse.Namespace, workdir: str) -> list[PeriodRun]:
    plan = Plan(args.steady, args.worker_counts, args.seed,
                args.clone_above, args.lean_above)
    sink = Sink(args.json)
    databases = Databases(args.db)
    try:
        for i, size in enumerate(args.sizes):
            # Alternate which driver goes first (and makes the first start).
            order = (args.driver_names if i % 2 == 0 else
                     args.driver_names[::-1])
            measure_size(workdir, size, order, plan, databases, sink)
    finally:
        databases.close()
    return sink.runs


def report(runs: list[PeriodRun]) -> None:
    print("nova's update_available_resource on one host (medians; cpu is "
          "this process's: nova, the driver and the in-process placement):")
    print(table(runs))
    print()
    print('Anchors (issue 24.4):')
    for line in anchors(runs):
        print('  ' + line)
    print()
    for line in fit_lines(runs) or [
            'nodes per host that fit a 60 s period: no figures (they need a '
            'refresh period at this node count or a smaller one)']:
        print(line)
    print()
    print('Sizing: the fewest nova-compute hosts whose periods fit 60 s with '
          'one host down (EXTRAPOLATED from the per-node costs above):')
    for line in sizing_lines(runs):
        print('  ' + line)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.from_json:
        report([r for path in args.from_json for r in load(path)])
        return 0
    scale.exit_on_sigterm()
    scale.quiet_logs()
    print('Machine: %s' % common.machine())
    workdir = tempfile.mkdtemp(prefix='nim-bench-period-')
    try:
        runs = run(args, workdir)
    finally:
        if args.keep:
            progress('kept %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report(runs)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
