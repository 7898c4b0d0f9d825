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
"""The in-process cell's databases take writers from many threads at once.

Every functional test runs nova's services as threads of one process, all
writing to the API database, the cell databases and placement's. Each
thread here writes its own rows at the same time as the others; every row
must be there at the end, and no write may fail. On a nova whose fixtures
keep each database in one shared in-memory connection (nova 33 in
native-threading mode) this fails without :mod:`.threaded_sqlite`.
"""

from __future__ import annotations

from collections.abc import Callable
import threading

from nova import context as nova_context
from nova import objects
from nova import test
from nova.tests.functional import fixtures as func_fixtures

from nova_ironic_multi.tests.functional import threaded_sqlite

THREADS = 6
ROWS = 15


class ThreadedDatabasesTest(test.TestCase):

    def setUp(self) -> None:
        threaded_sqlite.install(self)
        super().setUp()
        self.placement = self.useFixture(func_fixtures.PlacementFixture()).api
        self.ctxt = nova_context.get_admin_context()

    def _together(self, write: Callable[[int, int], None]) -> None:
        """``write(thread, row)`` from every thread at once."""
        errors: list[BaseException] = []
        start = threading.Barrier(THREADS)

        def run(t: int) -> None:
            try:
                start.wait(30)
                for r in range(ROWS):
                    write(t, r)
            except BaseException as e:  # noqa: B036 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(t,))
                   for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertEqual([], [repr(e) for e in errors])

    def test_cell_database(self) -> None:
        def write(t: int, r: int) -> None:
            objects.Service(self.ctxt, host='h%d-%d' % (t, r),
                            binary='nova-compute', topic='compute').create()

        self._together(write)
        services = objects.ServiceList.get_all(self.ctxt)
        self.assertEqual({'h%d-%d' % (t, r) for t in range(THREADS)
                          for r in range(ROWS)},
                         {s.host for s in services})

    def test_api_database(self) -> None:
        def write(t: int, r: int) -> None:
            objects.Flavor(self.ctxt, name='f%d-%d' % (t, r),
                           flavorid='f%d-%d' % (t, r), memory_mb=1,
                           vcpus=1, root_gb=0).create()

        self._together(write)
        names = {f.name for f in objects.FlavorList.get_all(self.ctxt)}
        want = {'f%d-%d' % (t, r) for t in range(THREADS)
                for r in range(ROWS)}
        self.assertEqual(want, names & want)

    def test_placement_database(self) -> None:
        def write(t: int, r: int) -> None:
            resp = self.placement.post(
                '/resource_providers', {'name': 'rp%d-%d' % (t, r)},
                version='1.20')
            assert resp.status == 200, (resp.status, resp.content)

        self._together(write)
        got = self.placement.get('/resource_providers').body
        self.assertEqual({'rp%d-%d' % (t, r) for t in range(THREADS)
                          for r in range(ROWS)},
                         {p['name'] for p in got['resource_providers']})
