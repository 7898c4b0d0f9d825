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
"""One refresh over 10^4 real Ironic nodes, side by side with nova's driver.

The set-up, shared by both drivers:

* a real all-in-one Ironic 39 (API and conductor in one process, one API
  worker, ``[api] max_limit = 1000``) on sqlite, holding ``--nodes``
  fake-hardware nodes in ``available``, each with one trait: clones of a
  node Ironic itself enrolled
  (:mod:`nova_ironic_multi.tests.fixtures.ironic_server`). sqlite rather
  than PostgreSQL: listing is bound by the API's Python work per node, not
  by the database (the same 10^4 nodes list in about the same time on
  PostgreSQL), and sqlite needs no server;
* a throwaway sqlite nova database (nova's own schema migrations) with
  three ``nova-compute`` services, host1 to host3, each with an Ironic
  compute node and a heartbeat just before every call, and no instance;
* ``CONF.host = host1``, ``[ironic] endpoint_override`` at that Ironic and
  ``auth_type = none``: both drivers read the same options.

What is measured is one ``get_available_nodes()``, the refresh nova's
resource tracker runs every period, of (a) this package's driver and (b)
nova 34's in-tree ``nova.virt.ironic.driver.IronicDriver``, both with
their default ring (ours: ``compatible``, 2^5 partitions a host, the
in-tree mapping bit for bit). Each repetition builds a fresh driver
object, calls ``init_host('host1')``, then times a *cold* call (nothing
cached: the connection, microversion negotiation and first listing) and a
*warm* second call of the same object. The two drivers alternate, and
their order flips every repetition. One untimed call of each comes first,
so lazy imports and plugin scans are not charged to either.

Per call: wall and process CPU seconds; the HTTP requests sent and the
seconds spent in them (counted in ``requests.Session.send``, which both
drivers' keystoneauth sessions go through, so the same counter for both);
the CPU seconds the Ironic processes spent meanwhile; the nodes returned.

Memory is measured in separate calls, one a driver, because tracing every
allocation slows allocation-heavy code and would skew the timings: the
peak traced during a cold refresh, and what the driver's node cache keeps
afterwards (traced memory still in use once the call's garbage is
collected, minus what is left when the cache is dropped; for this driver
the cache includes the ring cache's memo of the last selection, which holds
every in-scope node UUID), per cached node and extrapolated to 10^5 cached
nodes. No target is met unless both drivers returned the same, non-empty
set of nodes in every call.

Usage: ``tox -e bench -- scale [--nodes 10000] [--repeat 5] [--keep]``.
"""

from __future__ import annotations

import argparse
import collections.abc
import contextlib
import dataclasses
import gc
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
from typing import Any
from urllib import parse
import uuid

from nova import monkey_patch

# nova-compute chooses its concurrency model before anything imports
# oslo.service: native threads, as tox's OS_NOVA_DISABLE_EVENTLET_PATCHING=1
# says (and the default here).
monkey_patch.patch(backend='threading')

from nova import config as nova_config  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova.db.main import api as main_db_api  # noqa: E402
from nova.db import migration  # noqa: E402
from nova import objects  # noqa: E402
from nova.virt.ironic import driver as intree_driver  # noqa: E402
from oslo_utils import timeutils  # noqa: E402
import requests  # noqa: E402

from bench import common  # noqa: E402
from bench import placement  # noqa: E402
from nova_ironic_multi import driver as our_driver  # noqa: E402
from nova_ironic_multi.tests.fixtures import ironic_server  # noqa: E402

CONF = nova_config.CONF
HOSTS = ('host1', 'host2', 'host3')
ME = 'host1'
TRAIT = 'CUSTOM_GOLD'
OURS, INTREE = 'ours', 'in-tree'
#: Issue 7: ours at most this fraction of the in-tree wall time...
WALL_RATIO_TARGET = 0.25
#: ... and the node cache at most this many bytes per 10^5 nodes.
CACHE_TARGET_BYTES = 100 * 10 ** 6
MB = 10 ** 6
#: The paths of Ironic's node listings (ironicclient, openstacksdk).
LISTINGS = ('/v1/nodes', '/v1/nodes/detail')


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# Counting requests -----------------------------------------------------------

class HttpCounter:
    """Requests to Ironic sent through ``requests.Session.send``, and their
    seconds.

    keystoneauth (under both python-ironicclient and openstacksdk) sends
    every request with a ``requests.Session``; each call of ``send`` is one
    request on the wire (keystoneauth follows redirects itself). Requests
    to other services (this driver's one placement read a period, for its
    peer markers) are not counted: their time is in the driver's wall time.

    :param base_url: Ironic's endpoint; only requests under it count.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip('/')
        self.count = 0
        self.seconds = 0.0
        #: Keep the answers to node listings, read after the timed call to
        #: count the nodes Ironic listed (bench fleet). Off by default: the
        #: kept pages would add to the peak memory of a traced call.
        self.keep_listings = False
        self.listings: list[requests.Response] = []

    def reset(self) -> None:
        self.count, self.seconds = 0, 0.0
        self.listings = []

    def listed(self) -> int:
        """Nodes in the node listings answered since the last reset."""
        return sum(len(r.json().get('nodes', ())) for r in self.listings
                   if r.ok)

    @contextlib.contextmanager
    def installed(self) -> collections.abc.Iterator[HttpCounter]:
        original = requests.Session.send
        counter = self

        def send(session: requests.Session,
                 request: requests.PreparedRequest,
                 **kwargs: Any) -> requests.Response:
            url = request.url or ''
            if not (url == counter.base_url or
                    url.startswith(counter.base_url + '/')):
                return original(session, request, **kwargs)
            counter.count += 1
            started = time.perf_counter()
            try:
                response = original(session, request, **kwargs)
            finally:
                counter.seconds += time.perf_counter() - started
            path = parse.urlsplit(request.url or '').path.rstrip('/')
            if (counter.keep_listings and request.method == 'GET' and
                    path.endswith(LISTINGS)):
                counter.listings.append(response)
            return response

        requests.Session.send = send  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            requests.Session.send = original  # type: ignore[method-assign]


# The shared state: Ironic and nova -------------------------------------------

def make_ironic(workdir: str, n_nodes: int) -> ironic_server.IronicProcess:
    """An all-in-one Ironic (not started) holding ``n_nodes`` nodes."""
    db_path = os.path.join(workdir, 'ironic.sqlite')
    shutil.copy(ironic_server.seed_db(), db_path)
    uuids = common.random_uuids(n_nodes)
    ironic_server.clone_nodes(db_path, [(u, '') for u in uuids],
                              {u: [TRAIT] for u in uuids})
    return ironic_server.IronicProcess(workdir, db_path)


class NovaState:
    """A sqlite nova database with three up Ironic compute services, and
    placement in this process (this driver reads its peers' markers there).
    """

    def __init__(self, workdir: str,
                 hosts: collections.abc.Sequence[str] = HOSTS) -> None:
        nova_config.parse_args(['bench-scale'], default_config_files=[],
                               configure_db=False, init_rpc=False)
        objects.register_all()
        CONF.set_override('connection', 'sqlite:///%s' % os.path.join(
            workdir, 'nova.sqlite'), group='database')
        main_db_api.configure(CONF)
        migration.db_sync(database='main')
        self.ctxt = nova_context.get_admin_context()
        self.services = [self._add_compute(host) for host in hosts]
        self.reports = 0
        self.placement = placement.InProcessPlacement(
            'sqlite:///%s' % os.path.join(workdir, 'placement.sqlite'))
        self.placement.setUp()

    def close(self) -> None:
        self.placement.cleanUp()

    def _add_compute(self, host: str) -> int:
        service = main_db_api.service_create(self.ctxt, {
            'host': host, 'binary': 'nova-compute', 'topic': 'compute',
            'report_count': 0, 'uuid': str(uuid.uuid4()),
            'version': objects.service.SERVICE_VERSION})
        main_db_api.compute_node_create(self.ctxt, {
            'service_id': service['id'], 'host': host,
            'uuid': str(uuid.uuid4()), 'hypervisor_hostname': host,
            'hypervisor_type': 'ironic', 'hypervisor_version': 1,
            'cpu_info': '', 'vcpus': 0, 'memory_mb': 0, 'local_gb': 0,
            'vcpus_used': 0, 'memory_mb_used': 0, 'local_gb_used': 0})
        return int(service['id'])

    def heartbeat(self) -> None:
        """Every service reports in, as its periodic task would."""
        self.reports += 1
        for service_id in self.services:
            main_db_api.service_update(self.ctxt, service_id, {
                'report_count': self.reports,
                'last_seen_up': timeutils.utcnow()})


def configure_drivers(ironic_url: str) -> None:
    CONF.set_override('host', ME)
    CONF.set_override('endpoint_override', ironic_url, group='ironic')
    CONF.set_override('auth_type', 'none', group='ironic')


# The two drivers -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Contender:
    name: str
    make: collections.abc.Callable[[], Any]
    #: Forget the node cache (for the retained-memory measurement).
    drop_cache: collections.abc.Callable[[Any], None]
    #: The nodes in the cache.
    cached: collections.abc.Callable[[Any], int]
    #: Requests the driver counted itself, if it does (a cross-check).
    own_requests: collections.abc.Callable[[Any], int | None]


def _drop_ours(driver: Any) -> None:
    # The node cache, and the ring cache's memo of the last selection: it
    # keeps every in-scope node UUID (not only the cached ones) until the
    # next period, so it is part of what a refresh leaves behind.
    driver._inventory._snapshot = None
    driver._inventory._pipeline._rings._memo = None


def _drop_intree(driver: Any) -> None:
    driver.node_cache = {}


CONTENDERS = {
    OURS: Contender(OURS, lambda: our_driver.IronicDriver(None),
                    _drop_ours,
                    lambda d: len(d._inventory.cached().nodes),
                    lambda d: sum(d._ironic.requests.values())),
    INTREE: Contender(INTREE, lambda: intree_driver.IronicDriver(None),
                      _drop_intree, lambda d: len(d.node_cache),
                      lambda d: None),
}


def fresh(contender: Contender) -> Any:
    driver = contender.make()
    driver.init_host(ME)
    return driver


# One call --------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    driver: str
    call: str            # 'cold' or 'warm'
    wall: float
    cpu: float
    requests: int
    http_seconds: float
    server_cpu: float
    nodes: frozenset[str]

    @property
    def returned(self) -> int:
        return len(self.nodes)


@dataclasses.dataclass
class Memory:
    driver: str
    peak: int
    retained: int
    cached: int
    returned: int

    @property
    def per_node(self) -> float:
        return self.retained / self.cached if self.cached else float('nan')


class Bench:
    """The shared state and the measurements over it."""

    def __init__(self, ironic: ironic_server.IronicProcess,
                 nova: NovaState, counter: HttpCounter) -> None:
        self.ironic = ironic
        self.nova = nova
        self.counter = counter

    def server_cpu(self) -> float:
        assert self.ironic.proc is not None
        return common.process_group_cpu(self.ironic.proc.pid)

    def call(self, contender: Contender, driver: Any, call: str) -> Run:
        """Time one ``get_available_nodes()`` (no memory tracing)."""
        self.nova.heartbeat()
        self.counter.reset()
        own_before = contender.own_requests(driver)
        server_before = self.server_cpu()
        timing = common.measure(driver.get_available_nodes,
                                trace_memory=False)
        server = self.server_cpu() - server_before
        own_after = contender.own_requests(driver)
        if own_before is not None and own_after is not None and (
                own_after - own_before != self.counter.count):
            progress('  warning: %s counted %d requests, the counter %d'
                     % (contender.name, own_after - own_before,
                        self.counter.count))
        return Run(contender.name, call, timing.wall, timing.cpu,
                   self.counter.count, self.counter.seconds, server,
                   frozenset(timing.value))

    def warm_up(self) -> None:
        """One untimed call of each driver: imports, plugin scans."""
        for contender in CONTENDERS.values():
            driver = fresh(contender)
            try:
                self.nova.heartbeat()
                driver.get_available_nodes()
            finally:
                driver.cleanup_host(ME)

    def repetition(self, order: list[str]) -> list[Run]:
        runs = []
        for name in order:
            driver = fresh(CONTENDERS[name])
            try:
                for call in ('cold', 'warm'):
                    run = self.call(CONTENDERS[name], driver, call)
                    progress('  %-7s %s  %6.2fs wall %6.2fs cpu %3d requests'
                             ' %5d nodes' % (name, call, run.wall, run.cpu,
                                             run.requests, run.returned))
                    runs.append(run)
            finally:
                driver.cleanup_host(ME)
        return runs

    def memory(self, contender: Contender) -> Memory:
        """Peak during a cold refresh, and what the node cache keeps."""
        driver = fresh(contender)
        try:
            self.nova.heartbeat()
            gc.collect()
            tracemalloc.start()
            try:
                returned = len(driver.get_available_nodes())
                peak = tracemalloc.get_traced_memory()[1]
                gc.collect()
                with_cache = tracemalloc.get_traced_memory()[0]
                cached = contender.cached(driver)
                contender.drop_cache(driver)
                gc.collect()
                without = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
        finally:
            driver.cleanup_host(ME)
        return Memory(contender.name, peak, with_cache - without, cached,
                      returned)


# Report ----------------------------------------------------------------------

Medians = dict[tuple[str, str], dict[str, float]]


def medians(runs: list[Run]) -> Medians:
    """Per (driver, call): the median of each measure, and the run count."""
    out: Medians = {}
    for name in (OURS, INTREE):
        for call in ('cold', 'warm'):
            mine = [r for r in runs if r.driver == name and r.call == call]
            out[(name, call)] = {
                attr: statistics.median(getattr(r, attr) for r in mine)
                for attr in ('wall', 'cpu', 'http_seconds', 'server_cpu',
                             'requests', 'returned')}
            out[(name, call)]['runs'] = len(mine)
    return out


def ratio(m: Medians, call: str, attr: str = 'wall') -> float:
    return m[(OURS, call)][attr] / m[(INTREE, call)][attr]


def timing_table(m: Medians) -> str:
    rows = []
    for call in ('cold', 'warm'):
        for name in (OURS, INTREE):
            v = m[(name, call)]
            rows.append([name, call, '%d' % v['runs'], '%.2f' % v['wall'],
                         '%.2f' % v['cpu'], '%.2f' % v['http_seconds'],
                         '%.2f' % v['server_cpu'], '%d' % v['requests'],
                         '%d' % v['returned']])
        rows.append(['ours/in-tree', call, '', '%.2f' % ratio(m, call),
                     '%.2f' % ratio(m, call, 'cpu'), '', '', '', ''])
    headers = ['driver', 'call', 'runs', 'wall s', 'cpu s', 'in HTTP s',
               'Ironic cpu s', 'requests', 'nodes']
    return common.table(headers, rows)


def memory_table(memory: list[Memory], n_nodes: int) -> str:
    rows = []
    for m in memory:
        rows.append([m.driver, '%.1f' % (m.peak / MB), '%d' % m.cached,
                     '%.1f' % (m.retained / MB), '%.0f' % m.per_node,
                     '%.1f' % (m.per_node * 10 ** 5 / MB),
                     '%.0f' % (m.peak * 10 ** 5 / n_nodes / MB)])
    headers = ['driver', 'peak MB', 'cached nodes', 'cache MB',
               'B/cached node', 'cache MB @1e5', 'peak MB @1e5 listed']
    return common.table(headers, rows)


def _met(ok: bool) -> str:
    return 'met' if ok else 'MISSED'


def verdicts(runs: list[Run], m: Medians, ours_memory: Memory) -> list[str]:
    cold = ratio(m, 'cold')
    sets = {r.nodes for r in runs}
    fewest = min((len(s) for s in sets), default=0)
    # A figure of a run that returned no node, or different nodes from the
    # two drivers, measures a broken refresh: no target is met then.
    same = len(sets) == 1 and fewest > 0
    per_1e5 = ours_memory.per_node * 10 ** 5
    lines = [
        'wall ours/in-tree, cold call (median): %.2f <= %.2f %s' % (
            cold, WALL_RATIO_TARGET,
            _met(same and cold <= WALL_RATIO_TARGET)),
        "  floor: Ironic's own CPU while serving our listing, %.2fs, is "
        '%.2f of the in-tree wall time' % (
            m[(OURS, 'cold')]['server_cpu'],
            m[(OURS, 'cold')]['server_cpu'] / m[(INTREE, 'cold')]['wall']),
        'same set of nodes from both drivers in all %d calls: %s (%d '
        'nodes)' % (len(runs), 'yes' if same else 'NO', fewest),
        'ours, node cache and ring memo at 10^5 nodes: %.0f B/node x 10^5 '
        '= %.1f MB <= %d MB %s' % (
            ours_memory.per_node, per_1e5 / MB, CACHE_TARGET_BYTES // MB,
            _met(same and per_1e5 <= CACHE_TARGET_BYTES)),
    ]
    if not same:
        lines.append('no target is met: the drivers returned %s' % (
            'no node' if fewest == 0 else 'different nodes'))
    return lines


# Main ------------------------------------------------------------------------

def measure_all(bench: Bench, repeat: int) -> tuple[list[Run],
                                                    list[Memory]]:
    progress('warm-up: one untimed call of each driver')
    bench.warm_up()
    runs: list[Run] = []
    for rep in range(repeat):
        order = [OURS, INTREE] if rep % 2 == 0 else [INTREE, OURS]
        progress('repetition %d of %d' % (rep + 1, repeat))
        runs += bench.repetition(order)
    progress('memory: one traced cold call of each driver')
    memory = [bench.memory(CONTENDERS[name]) for name in (OURS, INTREE)]
    return runs, memory


def exit_on_sigterm() -> None:
    """Unwind on SIGTERM as on Ctrl-C: Ironic stopped, directory removed."""
    def handler(signo: int, frame: Any) -> None:
        raise SystemExit(128 + signo)

    signal.signal(signal.SIGTERM, handler)


def quiet_logs() -> None:
    """Errors only: the in-tree driver warns on every refresh."""
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench scale')
    parser.add_argument('--nodes', type=int, default=10000,
                        help='Ironic nodes (default 10000)')
    parser.add_argument('--repeat', type=int, default=5,
                        help='timed calls of each driver (default 5)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the working directory (Ironic logs and '
                        'database, nova database)')
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.repeat < 1:
        parser.error('--nodes and --repeat must be at least 1')
    exit_on_sigterm()
    quiet_logs()
    print('Machine: %s' % common.machine())
    workdir = tempfile.mkdtemp(prefix='nim-bench-scale-')
    ironic = None
    nova = None
    try:
        progress('Ironic with %d nodes in %s' % (args.nodes, workdir))
        started = time.perf_counter()
        ironic = make_ironic(workdir, args.nodes)
        ironic.start()
        ironic.wait_ready()
        progress('  ready in %.1fs at %s' % (time.perf_counter() - started,
                                             ironic.url))
        nova = NovaState(workdir)
        configure_drivers(ironic.url)
        counter = HttpCounter(ironic.url)
        with counter.installed():
            runs, memory = measure_all(Bench(ironic, nova, counter),
                                       args.repeat)
    finally:
        if nova is not None:
            nova.close()
        if ironic is not None:
            ironic.stop()
        if args.keep:
            progress('kept %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    m = medians(runs)
    print('One get_available_nodes() on %s with %d Ironic nodes, 3 hosts '
          '(medians of %d):' % (ME, args.nodes, args.repeat))
    print(timing_table(m))
    print()
    print('Memory (one traced cold call each):')
    print(memory_table(memory, args.nodes))
    print()
    print('Targets (issue 7):')
    for line in verdicts(runs, m, memory[0]):
        print('  ' + line)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
