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
"""Databases native threads can share, for nova releases whose fixtures
keep each one in a single in-memory SQLite connection (nova 33).

nova's functional fixtures give the API database, each cell database and
placement's database an in-memory SQLite database, which lives in one
connection that every thread of the test then shares. Under eventlet only
one greenthread runs at a time between two I/O points, so that holds; in
native-threading mode two threads interleave their statements on the one
connection and each sees the other's transaction (``cannot rollback - no
transaction is active``, a build that loses its own update). nova 34's
fixtures give each database a file of its own in WAL mode (several
connections: readers never wait) and let one writer transaction at a time
per database; nova 33's do not.

:func:`install`, called by the functional base before nova's fixtures run,
does the same for a nova whose fixtures lack it, and only in threading
mode. Everything lives in one temporary directory per test.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import importlib
import os
import sqlite3
import threading
from typing import Any

import fixtures
from nova.db.main import api as main_db_api
from nova.db import migration
from nova import utils
from oslo_config import cfg
from oslo_db.sqlalchemy import enginefacade
from placement.tests import fixtures as placement_db_fixtures

CONF = cfg.CONF
# (By its full name: the package's ``nova`` attribute is nova itself.)
nova_fixtures = importlib.import_module('nova.tests.fixtures.nova')


def needed() -> bool:
    """Whether this nova's fixtures need it.

    In threading mode, where they do not serialise writers themselves.
    """
    return (utils.concurrency_mode_threading() and
            not hasattr(nova_fixtures, 'DatabaseWriteLock'))


def install(test: Any) -> None:
    """Give ``test``'s databases a WAL file each and one writer at a time.

    A no-op where :func:`needed` is false.
    """
    if not needed():
        return
    files = Files(test.useFixture(fixtures.TempDir()).path)
    test.useFixture(OneWriterPerDatabase())
    test.useFixture(fixtures.MockPatchObject(
        nova_fixtures.Database, 'setUp', _database_setup(files)))
    test.useFixture(fixtures.MockPatchObject(
        nova_fixtures.CellDatabases, 'add_cell_database',
        _add_cell_database(files)))
    test.useFixture(fixtures.MockPatchObject(
        placement_db_fixtures.Database, '__init__',
        _placement_database(files)))


class Files:
    """SQLite files in WAL mode, one per database, in ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._count = 0
        self._lock = threading.Lock()

    def new(self, label: str) -> str:
        """A new empty database file; its SQLAlchemy URL."""
        with self._lock:
            self._count += 1
            n = self._count
        safe = ''.join(c if c.isalnum() else '_' for c in label)
        path = os.path.join(self.directory, '%02d-%s.sqlite' % (n, safe))
        with contextlib.closing(sqlite3.connect(path)) as conn:
            # Persistent in the file: every later connection uses it.
            conn.execute('PRAGMA journal_mode=WAL')
        return 'sqlite:///' + path


class OneWriterPerDatabase(fixtures.Fixture):
    """A writer transaction holds its database's lock until it ends.

    SQLite takes one writer at a time; threads that start writer
    transactions together would otherwise fail with ``database is
    locked``. The lock is re-entrant: nova nests writer transactions on
    one database in one thread. Databases do not wait for each other.
    """

    def _setUp(self) -> None:
        locks: dict[str, threading.RLock] = {}
        guard = threading.Lock()
        manager = enginefacade._TransactionContextManager
        original = manager._transaction_scope

        def lock_of(tcm: Any) -> threading.RLock:
            key = str(tcm.writer.get_engine().url)
            with guard:
                return locks.setdefault(key, threading.RLock())

        @contextlib.contextmanager
        def scope(tcm: Any, context: Any) -> Iterator[Any]:
            if tcm._mode is not enginefacade._WRITER:
                with original(tcm, context) as resource:
                    yield resource
                return
            with lock_of(tcm), original(tcm, context) as resource:
                yield resource

        self.useFixture(fixtures.MockPatchObject(
            manager, '_transaction_scope', scope))


def _dump(engine: Any) -> str:
    with contextlib.closing(engine.raw_connection()) as raw:
        return ''.join(raw.driver_connection.iterdump())


def _load(engine: Any, schema: str) -> None:
    with contextlib.closing(engine.raw_connection()) as raw:
        raw.driver_connection.executescript(schema)


def _database_setup(files: Files) -> Any:
    """nova's ``Database.setUp``, with its database in a file."""
    original = nova_fixtures.Database.setUp
    groups = {'main': 'database', 'api': 'api_database'}

    def setup(fixture: Any) -> None:
        if fixture.connection is not None:
            original(fixture)
            return
        # nova's fixture configures its engine from this option.
        group = groups[fixture.database]
        CONF.set_override('connection', files.new(fixture.database),
                          group=group)
        try:
            original(fixture)
        finally:
            CONF.clear_override('connection', group=group)

    return setup


def _add_cell_database(files: Files) -> Any:
    """nova's ``CellDatabases.add_cell_database``, its database a file."""

    def add(fixture: Any, connection_str: str,
            default: bool = False) -> None:
        ctxt_mgr = main_db_api.create_context_manager(
            connection=files.new('cell-' + connection_str))
        fixture._ctxt_mgrs[connection_str] = ctxt_mgr
        # As nova's: the first local access (service start) is a cell's.
        fixture._last_ctxt_mgr = ctxt_mgr
        if fixture._default_ctxt_mgr is None or default:
            fixture._default_ctxt_mgr = ctxt_mgr
        engine = ctxt_mgr.writer.get_engine()
        key = ('main', None)
        if nova_fixtures.DB_SCHEMA[key]:
            _load(engine, nova_fixtures.DB_SCHEMA[key])
            return
        # The first cell of the process: migrate it, keep its schema.
        with fixtures.MonkeyPatch('nova.db.main.api.get_context_manager',
                                  lambda context: ctxt_mgr):
            migration.db_sync(database='main')
        nova_fixtures.DB_SCHEMA[key] = _dump(engine)

    return add


def _placement_database(files: Files) -> Any:
    """placement's ``Database.__init__``, its database a file."""
    original = placement_db_fixtures.Database.__init__

    def init(fixture: Any, *args: Any, **kwargs: Any) -> None:
        original(fixture, *args, **kwargs)
        # oslo.db's ad hoc fixture takes this URL as it is.
        fixture.url = files.new('placement')
        fixture.driver = 'sqlite'

    return init
