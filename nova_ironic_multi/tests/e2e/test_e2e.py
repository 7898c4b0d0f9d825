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
"""End to end: real nova services dividing a real Ironic, one story.

One deployment for the whole module (:mod:`..fixtures.deployment`); the
tests run in order and each starts from where the previous one left off,
like an operator's day:

a. servers boot on distinct nodes;
b. a compute is killed and its free nodes move to its peer;
c. it comes back and takes its share back, with nothing duplicated;
d. a host is moved to another conductor group by SIGHUP (eventlet mode),
   and a bad SIGHUP leaves a host as it was (threading mode, then
   eventlet);
e. the cloud as its users and operators see it through Keystone: the
   demo user reboots and rebuilds its server but sees no hypervisor and no
   Ironic node, the operator disables and forces down a host, Keystone
   stops for a while, and computes with a wrong password or a region
   without Ironic refuse to start;
e5. the operator sets ``takeover = fenced`` (SIGHUP); a host with the demo
   user's servers is killed and fenced (``openstack compute service set
   --down``): within one period its instances are on the survivors, where
   the demo user reboots and deletes them; the host comes back, is
   unfenced and takes only free nodes (the figures of the operations docs:
   time to manageable, nodes managed twice, instances lost or stuck);
e6. planned scale-in and back out: the demo project has servers on every
   host; host3 gets ``drain_on_stop`` by SIGHUP and SIGTERM: it disables
   itself, hands its servers to the hosts the ring names without it and
   exits, while the demo user reboots, stops and starts every server;
   started again it enables itself and takes only its share of the free
   nodes; no node is ever managed by two hosts;
f. the operator labels the nodes with shards (``nova-ironic-multi shards
   plan|apply``) and switches every host to ``divide = shards`` by SIGHUP:
   each host lists only its shards, a killed host's shards move to the
   survivors (a killed host that is not fenced keeps its instances),
   nova's ``[ironic] shard`` beside it stops a compute at start; the
   hosts are stopped and started with ``membership_driver = tooz`` (a
   real Redis), a fenced host's instances move by shard, and SIGHUP takes
   them back to ``divide = nodes``;
and SIGTERM stops the computes cleanly.

Keystone authenticates every service and the operator: the computes find
Ironic in the catalog (host3 with an application credential), and every
action an operator takes is an ``openstack`` command.

After the move nobody serves g2, but its compute nodes and providers are
kept, so nova still schedules there: the host that last reported them must
refuse such a node (and nova reschedules) instead of deploying it.

The layout: host1 and host2 share conductor group g1 (``peer_list =
host1,host2``), host3 alone serves g2 (``peer_list = host3``). Static
peer lists must be the same on every host of a group, so moving host3 to
g1 means three SIGHUPs: host1 and host2 learn the new list first (so no
node is ever claimed twice; a few are unmanaged for one period), then host3
switches group. g2's compute nodes are then kept, not deleted: Ironic still
has the nodes.

Every check is what an operator would look at: nova's API, placement, the
cell database, Ironic's API, the processes and their logs. Actions go
through the ``openstack`` client; the frequent polls read the APIs with an
admin token directly, since one command costs seconds. Waits are
bounded and say what they waited for.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from concurrent import futures
import dataclasses
import itertools
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, cast
import uuid

import pytest

from nova_ironic_multi.division import sharding
from nova_ironic_multi import rings
from nova_ironic_multi.tests.e2e import reports
from nova_ironic_multi.tests.fixtures import deployment
from nova_ironic_multi.tests.fixtures import keystone
from nova_ironic_multi.tests.fixtures import processes
from nova_ironic_multi.tests.fixtures import prometheus
from nova_ironic_multi.tests.fixtures import redis_server

HOSTS = ('host1', 'host2', 'host3')
G1_HOSTS = ('host1', 'host2')
G1_PEERS = 'host1,host2'
ALL_PEERS = 'host1,host2,host3'
G1_NODES = 6
G2_NODES = 3
RING, EXPONENT = 'compatible', 5
BAREMETAL_FLAVOR = {
    'resources:CUSTOM_BAREMETAL': '1', 'resources:VCPU': '0',
    'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0',
}
PERIOD = deployment.RESOURCE_PERIOD
BOOT_TIMEOUT = 180
#: Down after service_down_time, then the peer's next period, with room
#: for a loaded machine.
TAKEOVER_TIMEOUT = deployment.SERVICE_DOWN_TIME + 20 * PERIOD
SETTLE_TIMEOUT = 150
STOP_TIMEOUT = 60
#: What the bounds the operations docs state (a dead host's free nodes
#: move within the detection time plus one period; a reload applies by
#: the next period) are given on top, on a loaded test machine: the
#: period's own run (listing, division, nova writing its rows), this
#: test's polling of nova, and scheduling delays. The waits above are
#: longer, so that a missed bound fails with its figure.
BOUND_SLACK = 15


def assert_within(took: float, bound: float, what: str) -> None:
    assert took <= bound + BOUND_SLACK, (
        '%s took %.1fs: more than the documented %.1fs plus %ds of slack'
        % (what, took, bound, BOUND_SLACK))

SPECS = [
    deployment.ComputeSpec('host1', eventlet=False,
                           partition={'partition_key': 'g1',
                                      'peer_list': G1_PEERS}),
    deployment.ComputeSpec('host2', eventlet=False,
                           partition={'partition_key': 'g1',
                                      'peer_list': G1_PEERS}),
    # The other documented way to give nova-compute its Ironic access.
    deployment.ComputeSpec('host3', eventlet=True,
                           partition={'partition_key': 'g2',
                                      'peer_list': 'host3'},
                           app_credential=True),
]


# The plan: fixed nodes, so every run divides them the same way ------------

def share(members: Iterable[str], nodes: Iterable[str]) -> dict[str, str]:
    """``{node: host}``: how the ring divides these free nodes."""
    return rings.load(RING, members, EXPONENT).assign(list(nodes))


def by_host(division: Mapping[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = collections.defaultdict(set)
    for node, host in division.items():
        out[host].add(node)
    return out


def node_uuid(group: str, i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, 'nim-e2e:%s-%d' % (group, i)))


@dataclasses.dataclass(frozen=True)
class Plan:
    g1: list[str]
    g2: list[str]
    #: The g1 node of host1's server and the g1 node of host2's server:
    #: each stays with its host whether two or three hosts share g1.
    node_a: str
    node_b: str

    @property
    def nodes(self) -> dict[str, list[str]]:
        return {'g1': self.g1, 'g2': self.g2}


def make_plan() -> Plan:
    """The first fixed node set where every step has something to show.

    host2 has free nodes beside its server's (b: something to take over);
    with three hosts on g1, host1 keeps a free node beside its server's
    (d: a server can still boot there) and host3 gets one (d: the move
    shows).
    """
    g2 = [node_uuid('g2', i) for i in range(G2_NODES)]
    for offset in itertools.count():
        g1 = [node_uuid('g1', offset + i) for i in range(G1_NODES)]
        two = by_host(share(G1_HOSTS, g1))
        three = by_host(share(HOSTS, g1))
        a = sorted(two['host1'] & three['host1'])
        b = sorted(two['host2'] & three['host2'])
        if (a and b and len(two['host2']) >= 3 and
                len(three['host1']) >= 2 and three['host3']):
            return Plan(g1, g2, a[0], b[0])
    raise AssertionError('unreachable')


# The environment and what an operator looks at ---------------------------

class Env:
    def __init__(self, dep: deployment.Deployment, plan: Plan) -> None:
        self.dep = dep
        self.plan = plan
        self.nova = dep.nova
        self.ironic = dep.ironic.client
        #: name -> server id, for the servers alive now.
        self.servers: dict[str, str] = {}
        #: name -> the cloud (clouds.yaml) that created the server.
        self.owners: dict[str, str] = {}
        self.flavor = ''
        #: ``[ironic_multi]`` membership options in force on every host,
        #: and given to ``nova-ironic-multi`` as an operator would (empty:
        #: the default, servicegroup).
        self.membership: dict[str, str] = {}
        #: The Redis of tooz membership, once a step started it.
        self.redis: redis_server.RedisServer | None = None

    def cli(self, cloud: str, *args: str) -> Any:
        """``openstack`` as ``cloud``: admin, system-admin or demo."""
        return self.dep.openstack(cloud, *args)

    def ring_show(self, divide: str) -> Any:
        """``nova-ironic-multi ring show`` of g1 with the hosts' options."""
        return self.dep.nova_ironic_multi(
            {'partition_key': 'g1', 'peer_list': ALL_PEERS,
             'divide': divide, **self.membership}, 'ring', 'show')

    @property
    def all_nodes(self) -> set[str]:
        return set(self.plan.g1) | set(self.plan.g2)

    def compute(self, host: str) -> deployment.Compute:
        return self.dep.computes[host]

    def rows(self) -> list[dict[str, Any]]:
        return self.dep.cell.compute_nodes()

    def db_division(self) -> dict[str, str]:
        """``{node: host}`` from the cell database; asserts no duplicate."""
        rows = self.rows()
        assert_one_row_per_node(rows)
        return {r['hypervisor_hostname']: r['host'] for r in rows}

    def busy(self) -> dict[str, str]:
        """``{node: host}`` of the live servers, from nova's API."""
        out = {}
        for server_id in self.servers.values():
            s = self.nova.server(server_id)
            out[s['OS-EXT-SRV-ATTR:hypervisor_hostname']] = (
                s['OS-EXT-SRV-ATTR:host'])
        return out

    def expected(self, members: Iterable[str],
                 group_nodes: Iterable[str]) -> dict[str, str]:
        """Who should manage each node of a group now.

        Owners keep the nodes of their instances; the ring divides the free
        ones.
        """
        busy = {n: h for n, h in self.busy().items()
                if n in set(group_nodes)}
        free = [n for n in group_nodes if n not in busy]
        return {**busy, **share(members, free)}

    def wait_division(self, want: Mapping[str, str], what: str,
                      timeout: float = SETTLE_TIMEOUT) -> dict[str, str]:
        """Until the cell database says ``want`` (for those nodes).

        Every reading along the way is checked for duplicate rows.
        """
        last: dict[str, dict[str, str]] = {}

        def check() -> bool:
            db = self.db_division()
            last['db'] = db
            return all(db.get(n) == h for n, h in want.items())

        try:
            processes.wait_for(what, check, timeout, interval=0.5,
                               alive=self.running_computes())
        except processes.Timeout as e:
            raise AssertionError('%s\nwanted %s\ncell DB %s' % (
                e, sorted(want.items()), sorted(last.get('db', {}).items()))
            ) from e
        return last['db']

    def running_computes(self) -> list[processes.Process]:
        return [c.process for c in self.dep.computes.values()
                if c.process.running()]

    def wait_up(self, host: str, state: str = 'up',
                timeout: float = 90) -> float:
        started = time.monotonic()
        processes.wait_for(
            'nova-compute %s to be %s in os-services' % (host, state),
            lambda: self.nova.services()[host]['state'] == state, timeout,
            interval=0.25)
        return time.monotonic() - started

    def boot(self, name: str, host: str | None = None,
             hypervisor_hostname: str | None = None) -> str:
        """``openstack server create``, by the demo user when it can.

        Asking for a host or a node is an admin's call in nova's default
        policy, so those servers are the admin's.
        """
        cloud = 'admin' if host or hypervisor_hostname else 'demo'
        args = ['server', 'create', '--flavor', self.flavor, '--image',
                self.dep.image_id, '--nic', 'none', '-f', 'json']
        if host:
            args += ['--host', host]
        if hypervisor_hostname:
            args += ['--hypervisor-hostname', hypervisor_hostname]
        server_id: str = self.cli(cloud, *args, name)['id']
        self.servers[name] = server_id
        self.owners[name] = cloud
        return server_id

    def wait_active(self, server_id: str) -> dict[str, Any]:
        def active() -> dict[str, Any] | None:
            s = self.nova.server(server_id)
            if s['status'] == 'ERROR':
                raise AssertionError('server %s went to ERROR: %s' % (
                    server_id, s.get('fault')))
            return s if s['status'] == 'ACTIVE' else None

        return processes.wait_for('server %s to be ACTIVE' % server_id,
                                  active, BOOT_TIMEOUT)

    def delete(self, name: str) -> str:
        """``openstack server delete`` by its owner; returns the node."""
        server_id = self.servers.pop(name)
        node = self.nova.server(server_id)[
            'OS-EXT-SRV-ATTR:hypervisor_hostname']
        self.cli(self.owners.pop(name), 'server', 'delete', server_id)
        processes.wait_for('server %s to be deleted' % server_id,
                           lambda: not self.nova.server_exists(server_id),
                           BOOT_TIMEOUT)
        return node

    def log_lines(self, host: str, pattern: str, since: int = 0) -> list[str]:
        text = self.compute(host).process.log_text(since)
        return [line for line in text.splitlines()
                if re.search(pattern, line)]

    def wait_log(self, host: str, pattern: str, since: int,
                 count: int = 1, timeout: float = 60) -> list[str]:
        """Until the log of ``host`` has ``count`` lines matching."""
        return processes.wait_for(
            '%d line(s) matching %r in the log of %s'
            % (count, pattern, host),
            lambda: (lines if len(lines := self.log_lines(
                host, pattern, since)) >= count else None),
            timeout, interval=0.25, alive=[self.compute(host).process])

    def periods(self, host: str, since: int, count: int = 2) -> None:
        """Until ``host`` ran ``count`` divisions (one per period)."""
        self.wait_log(host, r'Managing \d+ Ironic nodes', since, count,
                      timeout=count * PERIOD + 60)


def send_unreadable_partition_key(env: Env, host: str) -> list[str]:
    """SIGHUP ``host`` with a partition_key the option rejects.

    Waits for the rejection (the old value, g1, kept) and two more
    periods; returns the rejection's log lines.
    """
    compute = env.compute(host)
    mark = compute.process.log_size()
    compute.reconfigure(partition_key='not valid!')
    compute.sighup()
    rejected = env.wait_log(
        host, r'Reload: rejected the new value of \[ironic_multi\] '
        r'partition_key', mark)
    assert "keeping 'g1'" in rejected[0], rejected
    env.periods(host, compute.process.log_size())
    return rejected


def assert_servers_untouched(env: Env,
                             hosts: Mapping[str, str] | None = None) -> None:
    """Every server ACTIVE and running, on its host, nobody stopped one.

    ``hosts`` maps server ids to the host they must still be on.
    """
    for name, server_id in env.servers.items():
        s = env.nova.server(server_id)
        state = (s['status'], s['OS-EXT-STS:power_state'],
                 s['OS-EXT-STS:task_state'])
        assert state == ('ACTIVE', 1, None), (name, state)
        if hosts is not None and server_id in hosts:
            assert s['OS-EXT-SRV-ATTR:host'] == hosts[server_id], name
    for host in HOSTS:
        stopped = env.log_lines(host, 'Instance shutdown by itself')
        assert not stopped, stopped


def assert_one_row_per_node(rows: list[dict[str, Any]]) -> None:
    counts = collections.Counter(r['hypervisor_hostname'] for r in rows)
    dupes = {n: [r['host'] for r in rows if r['hypervisor_hostname'] == n]
             for n, c in counts.items() if c > 1}
    assert not dupes, 'nodes with several live compute_nodes rows: %s' % (
        dupes)
    wrong = [r for r in rows if r['uuid'] != r['hypervisor_hostname']]
    assert not wrong, 'compute node uuid is not the node uuid: %s' % wrong


def assert_one_provider_per_node(env: Env) -> None:
    providers = env.dep.placement.providers()
    names = collections.Counter(p['name'] for p in providers)
    assert {n: c for n, c in names.items() if c > 1} == {}
    assert {p['uuid'] for p in providers} == env.all_nodes
    assert all(p['uuid'] == p['name'] for p in providers)
    for p in providers:
        inventory = env.dep.placement.inventories(p['uuid'])
        assert inventory['CUSTOM_BAREMETAL']['total'] == 1, (p, inventory)


def kill_and_wait_takeover(env: Env, host: str,
                           moves: Mapping[str, str]) -> dict[str, float]:
    """``kill -9 host``, then until nova marks it down and its peers
    report ``moves`` (``{node: new host}``) in the cell database.

    :returns: seconds from the kill to ``'down'`` and to ``'takeover'``.
    """
    killed = time.monotonic()
    env.compute(host).process.signal(signal.SIGKILL)
    marks: dict[str, float] = {}

    def progress() -> bool:
        now = time.monotonic() - killed
        if ('down' not in marks and
                env.nova.services()[host]['state'] == 'down'):
            marks['down'] = now
        db = env.db_division()
        if 'takeover' not in marks and all(db.get(n) == h
                                           for n, h in moves.items()):
            marks['takeover'] = now
        return len(marks) == 2

    processes.wait_for(
        'nova to mark %s down and its peers to report %s'
        % (host, sorted(moves.items())), progress, TAKEOVER_TIMEOUT,
        interval=0.25, alive=[env.compute(h).process for h in HOSTS
                              if h != host and
                              env.compute(h).process.running()])
    return marks


# The deployment ------------------------------------------------------------

def _interrupt(signo: int, frame: Any) -> None:
    raise KeyboardInterrupt('SIGTERM')


@pytest.fixture(scope='module')
def env(request: pytest.FixtureRequest, figures: list[str],
        outcomes: dict[str, str]) -> Iterator[Env]:
    """One deployment for the module.

    Its run directory is kept (and named) if a test failed or did not
    finish, or if ``NIM_E2E_KEEP`` is set; removed otherwise.
    """
    root = os.environ.get('NIM_E2E_RUN_ROOT') or tempfile.gettempdir()
    run_dir = tempfile.mkdtemp(prefix='nim-e2e-', dir=root)
    plan = make_plan()
    dep = deployment.Deployment(run_dir, SPECS, plan.nodes)
    started = time.monotonic()
    up = False
    # A CI time-out's SIGTERM must still stop every process and drop every
    # database: as KeyboardInterrupt, pytest runs the finalisers.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    the_env = Env(dep, plan)
    try:
        dep.start()
        up = True
        figures.append('deployment up in %.1fs (%s)' % (
            time.monotonic() - started,
            ', '.join('%s %.1fs' % kv for kv in dep.timings.items())))
        if dep.reaped:
            figures.append('reaped what dead runs left: %s'
                           % ', '.join(dep.reaped))
        yield the_env
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # finish cleaning
        problems = dep.stop()
        if the_env.redis is not None:
            the_env.redis.stop()
        signal.signal(signal.SIGTERM, previous)
        mine = [i.nodeid for i in request.session.items
                if getattr(i, 'module', None) is request.module]
        failed = (not up or problems or
                  any(outcomes.get(n) not in ('passed', 'skipped')
                      for n in mine))
        if failed or os.environ.get('NIM_E2E_KEEP'):
            note = 'run directory kept: %s (logs in %s/logs)' % (
                run_dir, run_dir)
            if problems:
                note += '; clean-up failed: %s' % problems
            figures.append(note)
            sys.stderr.write('\n' + note + '\n')
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
        # Never hide the error that brought us here behind this one.
        if sys.exc_info()[0] is None:
            assert not problems, 'clean-up failed: %s' % problems


# a. Boot ---------------------------------------------------------------

def test_a_servers_boot_active_on_distinct_nodes(env: Env) -> None:
    env.wait_division({**share(G1_HOSTS, env.plan.g1),
                       **share(['host3'], env.plan.g2)},
                      'the initial division in the cell database')
    assert_one_provider_per_node(env)
    env.flavor = 'baremetal'
    env.cli('admin', 'flavor', 'create', '--id', env.flavor, '--ram',
            '1024', '--vcpus', '1', '--disk', '10', *itertools.chain(
                *(('--property', '%s=%s' % kv)
                  for kv in BAREMETAL_FLAVOR.items())), env.flavor)
    wanted_host = {'on-host1': 'host1', 'on-host2': 'host2',
                   'on-host3': 'host3'}
    env.boot('on-host1', host='host1', hypervisor_hostname=env.plan.node_a)
    env.boot('on-host2', host='host2', hypervisor_hostname=env.plan.node_b)
    env.boot('on-host3', host='host3')
    env.boot('anywhere')

    servers = {name: env.wait_active(sid)
               for name, sid in env.servers.items()}

    nodes = {name: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
             for name, s in servers.items()}
    assert len(set(nodes.values())) == len(servers), nodes
    assert nodes['on-host1'] == env.plan.node_a
    assert nodes['on-host2'] == env.plan.node_b
    assert nodes['on-host3'] in env.plan.g2
    assert_servers_untouched(env)
    for name, s in servers.items():
        host = s['OS-EXT-SRV-ATTR:host']
        if name in wanted_host:
            assert host == wanted_host[name], (name, host)
        node = env.ironic.node.get(nodes[name])
        assert node.instance_uuid == s['id'], (name, node.instance_uuid)
        assert node.provision_state == 'active', (name, node)
        assert env.dep.cell.instance_host(s['id']) == (host, nodes[name])
        # The compute node that holds it belongs to the same host.
        assert env.db_division()[nodes[name]] == host


# a2. A real Prometheus scrapes the computes -------------------------------

@pytest.fixture(scope='module')
def prom(env: Env) -> Iterator[prometheus.Server]:
    """A Prometheus server scraping the three computes every second."""
    server = prometheus.Server(
        os.path.join(env.dep.run_dir, 'prometheus'),
        {host: env.compute(host).metrics_port for host in HOSTS},
        env.dep.log_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


MANAGED = 'sum(nova_ironic_multi_nodes{kind="managed"})'


def test_a2_prometheus_sees_every_node_managed_once(
        env: Env, prom: prometheus.Server, figures: list[str]) -> None:
    # Settled (test a): g1 divided by host1 and host2, g2 by host3.
    fleet = len(env.all_nodes)
    started = time.monotonic()
    processes.wait_for(
        'Prometheus to scrape the three computes, each managed node once',
        lambda: (prom.scalar('count(up{job="nova-compute"} == 1)') == 3 and
                 prom.scalar(MANAGED) == fleet and
                 prom.scalar('sum(nova_ironic_multi_nodes{kind="share"})')
                 == fleet), SETTLE_TIMEOUT)
    figures.append('Prometheus: 3 computes scraped, %d nodes managed once, '
                   'after %.1fs' % (fleet, time.monotonic() - started))
    # The hosts of each scope agree on their members: one digest a scope.
    views = prom.query('count by (scope) (count by (scope, digest) '
                       '(nova_ironic_multi_member_view_info))')
    assert sorted((v['scope'], n) for v, n in views) == [
        ("conductor group 'g1'", 1), ("conductor group 'g2'", 1)], views
    # Every host's periods are timed, and none is NotReady.
    for host in HOSTS:
        count = prom.scalar('nova_ironic_multi_period_duration_seconds_count'
                            '{host="%s"}' % host)
        assert count is not None and count > 0, (host, count)
    assert prom.scalar('sum(nova_ironic_multi_not_ready)') == 0
    ok = prom.scalar(
        'sum(nova_ironic_multi_ironic_requests_total{outcome="ok"})')
    assert ok is not None and ok > 0, ok


# b. A compute dies -------------------------------------------------------

def test_b_killed_compute_free_nodes_move_to_its_peer(
        env: Env, figures: list[str], request: pytest.FixtureRequest
) -> None:
    before = env.db_division()
    busy = env.busy()
    hosts = {sid: env.nova.server(sid)['OS-EXT-SRV-ATTR:host']
             for sid in env.servers.values()}
    host2_free = {n for n, h in before.items()
                  if h == 'host2' and n not in busy}
    assert host2_free, 'host2 has no free node to take over: %s' % before
    host2 = env.compute('host2').process
    marks = kill_and_wait_takeover(env, 'host2',
                                   dict.fromkeys(host2_free, 'host1'))
    assert host2.wait(10) == -signal.SIGKILL
    # Prometheus: once host2's target is down (a failed scrape marks its
    # series stale), host2's instance nodes are the only ones nobody
    # manages, and no node was ever counted twice meanwhile.
    prom = request.getfixturevalue('prom')
    host2_busy = sum(1 for h in busy.values() if h == 'host2')
    processes.wait_for(
        'Prometheus to count host2\'s free nodes under host1',
        lambda: prom.scalar(MANAGED) == len(env.all_nodes) - host2_busy,
        PERIOD + 3 * prometheus.SCRAPE_INTERVAL + 10)
    most = prom.scalar('max_over_time(%s[5m:1s])' % MANAGED)
    assert most is not None and most <= len(env.all_nodes), most
    line = ('kill -9 host2 (%d free nodes): nova marked it down after '
            '%.1fs, host1 reported all of them after %.1fs '
            '(service_down_time %ds, resource period %ds)'
            % (len(host2_free), marks['down'], marks['takeover'],
               deployment.SERVICE_DOWN_TIME, PERIOD))
    figures.append(line)
    print(line)
    # Detection: service_down_time after the last report (one report
    # interval before the kill at most); then one period of host1.
    assert_within(marks['down'], deployment.SERVICE_DOWN_TIME +
                  deployment.REPORT_INTERVAL, 'nova marking host2 down')
    assert_within(marks['takeover'] - marks['down'], PERIOD,
                  'host1 taking host2\'s free nodes once host2 was down')

    after = env.db_division()
    # The nodes of host2's instances stay with host2; nothing else moved.
    for node, host in before.items():
        if node not in host2_free:
            assert after[node] == host, (node, host, after[node])
    assert_servers_untouched(env, hosts)
    assert env.busy() == busy
    for node in busy:
        assert env.ironic.node.get(node).provision_state == 'active'
    assert_one_provider_per_node(env)


# c. It comes back --------------------------------------------------------

def test_c_restarted_compute_takes_its_share_back_without_duplicates(
        env: Env, figures: list[str]) -> None:
    host2 = env.compute('host2')
    restarted = time.monotonic()
    host2.start()
    env.wait_up('host2')
    want = {**env.expected(G1_HOSTS, env.plan.g1),
            **env.expected(['host3'], env.plan.g2)}
    env.wait_division(want, 'host2 to take its share of g1 back')
    figures.append('host2 restarted: its share back after %.1fs'
                   % (time.monotonic() - restarted))
    # Stable over two more periods of every host, still no duplicates.
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    for h in HOSTS:
        env.periods(h, marks[h])
    assert env.db_division() == want
    assert_one_provider_per_node(env)
    # Its power-state sync ran at start-up and found them running.
    assert_servers_untouched(env)

    # A server deleted after the rebalance frees its node everywhere.
    node = env.delete('anywhere')
    ironic_node = env.ironic.node.get(node)
    assert ironic_node.instance_uuid is None
    assert ironic_node.provision_state == 'available'
    assert len(env.rows()) == len(env.all_nodes)


# d. SIGHUP and SIGTERM -------------------------------------------------

def test_d1_sighup_moves_host3_from_g2_to_g1_in_eventlet_mode(
        env: Env, figures: list[str]) -> None:
    assert env.compute('host3').mode == 'eventlet'
    before = env.db_division()
    g2_rows = {n: h for n, h in before.items() if n in env.plan.g2}
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    providers = {p['uuid'] for p in env.dep.placement.providers()}

    # The peers first: they stop claiming host3's future share...
    for host in G1_HOSTS:
        env.compute(host).reconfigure(peer_list=ALL_PEERS)
        env.compute(host).sighup()
    for host in G1_HOSTS:
        env.wait_log(host, r'Partition changed from .*host3', marks[host])
    # ...then host3 switches group.
    host3 = env.compute('host3')
    host3.reconfigure(partition_key='g1', peer_list=ALL_PEERS)
    sent = time.monotonic()
    host3.sighup()

    want = env.expected(HOSTS, env.plan.g1)
    assert 'host3' in want.values(), want
    env.wait_division(want, 'g1 divided between host1, host2 and host3')
    # A reload applies by the next period.
    assert_within(time.monotonic() - sent, PERIOD,
                  'the division after host3\'s SIGHUP')

    # host3's g2 compute nodes are kept (Ironic still has the nodes), and
    # its server there is untouched.
    after = env.db_division()
    assert {n: after.get(n) for n in g2_rows} == g2_rows
    assert {p['uuid'] for p in env.dep.placement.providers()} == providers
    for node in g2_rows:
        env.wait_log('host3', 'Found orphan compute node .* hypervisor host '
                     'is %s, .* We are not deleting this as the driver says '
                     'this node has not been deleted' % node, marks['host3'],
                     timeout=2 * PERIOD + 60)
    on_host3 = env.nova.server(env.servers['on-host3'])
    assert on_host3['status'] == 'ACTIVE'
    assert env.ironic.node.get(
        on_host3['OS-EXT-SRV-ATTR:hypervisor_hostname']
    ).instance_uuid == on_host3['id']
    for host in HOSTS:
        assert env.compute(host).process.running(), host
    assert {h: s['state'] for h, s in env.nova.services().items()} == {
        h: 'up' for h in HOSTS}
    assert_servers_untouched(env)

    # The logs say what happened, in each concurrency mode.
    evidence = {
        'host3': env.wait_log('host3', r'Caught SIGHUP|Option ironic_multi'
                              r'\.\w+ changed from|Partition changed from',
                              marks['host3'], count=4),
        'host1': env.wait_log('host1', r'SIGHUP received|Option ironic_'
                              r'multi\.\w+ changed from|Partition changed '
                              r'from', marks['host1'], count=3),
    }
    text3 = '\n'.join(evidence['host3'])
    assert 'Caught SIGHUP, handling' in text3
    assert ('Option ironic_multi.partition_key changed from [g2] to [g1]'
            in text3)
    assert 'Option ironic_multi.peer_list changed from' in text3
    text1 = '\n'.join(evidence['host1'])
    assert 'SIGHUP received: re-reading the configuration files' in text1
    assert 'Option ironic_multi.peer_list changed from' in text1
    for host, lines in evidence.items():
        figures.append('SIGHUP reload on %s (%s mode):' % (
            host, env.compute(host).mode))
        figures.extend('    ' + line for line in lines)

    # The server host3 left on g2 is still its own: it can be deleted, and
    # Ironic frees the node.
    node = env.delete('on-host3')
    freed = env.ironic.node.get(node)
    assert (freed.instance_uuid, freed.provision_state) == (None,
                                                            'available')


class DeployedOutsideScope(AssertionError):
    """A compute deployed a node outside its scope."""


def test_d1_node_outside_every_scope_is_not_deployed(env: Env) -> None:
    # After the move nobody serves g2, but its compute nodes are kept, so
    # nova can still schedule there and sends the build to host3, whose
    # scope is g1 now. host3 must refuse the node, not deploy it.
    # A g2 node nova still offers: free, and not reserved in placement
    # (nodes freed after the move keep the reservation host3 last set).
    busy = env.busy()
    free_g2 = sorted(
        n for n in env.plan.g2 if n not in busy and
        env.dep.placement.inventories(n)['CUSTOM_BAREMETAL']['reserved'] == 0)
    assert free_g2, busy
    mark = env.compute('host3').process.log_size()
    server_id = env.boot('on-g2-after-move', hypervisor_hostname=free_g2[0])
    try:
        server = processes.wait_for(
            'server %s to be ACTIVE or ERROR' % server_id,
            lambda: (s if (s := env.nova.server(server_id))['status'] in
                     ('ACTIVE', 'ERROR') else None), BOOT_TIMEOUT)
        node = env.ironic.node.get(free_g2[0])
        if server['status'] == 'ACTIVE' or node.instance_uuid is not None:
            raise DeployedOutsideScope(
                'host3 (scope g1) deployed g2 node %s for server %s (%s)'
                % (node.uuid, server_id, server['status']))
        assert server['status'] == 'ERROR'
        # For that reason, not any other: host3 refused the node as
        # outside its scope (nova logs the reschedule's cause).
        env.wait_log('host3', r'Ironic node %s \(conductor group .g2., '
                     r'shard None\) is outside the scope of this service '
                     r'\(conductor group .g1.\)' % free_g2[0], mark)
    finally:
        env.delete('on-g2-after-move')


def test_d2_bad_sighup_keeps_threading_host_and_its_configuration(
        env: Env, figures: list[str]) -> None:
    host1 = env.compute('host1')
    assert host1.mode == 'threading'
    division = env.db_division()
    host1_nodes = {n for n, h in division.items() if h == 'host1'}

    # A value the option itself rejects.
    rejected = send_unreadable_partition_key(env, 'host1')

    # Still running, still up, still managing the same nodes...
    assert host1.process.running()
    assert env.nova.services()['host1']['state'] == 'up'
    assert {n for n, h in env.db_division().items()
            if h == 'host1'} == host1_nodes
    # ...and still answering: a server boots there and is deleted.
    server_id = env.boot('host1-after-bad-sighup', host='host1')
    server = env.wait_active(server_id)
    assert server['OS-EXT-SRV-ATTR:host'] == 'host1'
    assert server['OS-EXT-SRV-ATTR:hypervisor_hostname'] in host1_nodes
    env.delete('host1-after-bad-sighup')
    assert_servers_untouched(env)
    figures.append('bad SIGHUP on host1 (threading mode):')
    figures.extend('    ' + line for line in rejected)

    # A list that leaves host1 out is a valid change: host1 leaves its own
    # ring (claims no free node, keeps its instances' nodes) and says why.
    mark = host1.process.log_size()
    host1.reconfigure(partition_key='g1', peer_list='host2,host3')
    host1.sighup()
    errors = env.wait_log('host1', r'claims no free Ironic node and keeps '
                          r'only the nodes of its own instances: it is not '
                          r'in \[ironic_multi\] peer_list \(host2,host3\)',
                          mark, timeout=2 * PERIOD + 60)
    env.periods('host1', host1.process.log_size())
    assert host1.process.running()
    assert not env.log_lines('host1', 'Invalid partition options', mark)
    # Only the nodes of host1's own instances, no free node.
    last = env.log_lines('host1', r'Managing \d+ Ironic nodes', mark)[-1]
    owned, with_instances = cast('re.Match[str]', re.search(
        r'Managing (\d+) Ironic nodes \((\d+) with', last)).groups()
    assert owned == with_instances, last
    figures.extend('    ' + line for line in errors[:1])

    # Putting the good file back ends the errors.
    mark = host1.process.log_size()
    host1.reconfigure(peer_list=ALL_PEERS)
    host1.sighup()
    env.wait_log('host1', r'Option ironic_multi\.peer_list changed from '
                 r'\[host2,host3\]', mark)
    env.wait_log('host1', r'is a member of its ring again', mark,
                 timeout=2 * PERIOD + 60)
    env.periods('host1', host1.process.log_size())
    assert {n for n, h in env.db_division().items()
            if h == 'host1'} == host1_nodes


def test_d2_bad_sighup_keeps_eventlet_host_running(
        env: Env, figures: list[str]) -> None:
    # In eventlet mode oslo.service re-reads the files itself and then
    # reads every option to log it: an unreadable value would end the
    # process there unless the driver pinned it back.
    host3 = env.compute('host3')
    assert host3.mode == 'eventlet'
    host3_nodes = {n for n, h in env.db_division().items() if h == 'host3'}
    mark = host3.process.log_size()
    rejected = send_unreadable_partition_key(env, 'host3')
    assert host3.process.running()
    assert_servers_untouched(env)
    assert env.nova.services()['host3']['state'] == 'up'
    assert {n for n, h in env.db_division().items()
            if h == 'host3'} == host3_nodes
    assert not env.log_lines('host3', 'CRITICAL|Unhandled error', mark)
    figures.append('bad SIGHUP on host3 (eventlet mode):')
    figures.extend('    ' + line for line in rejected)

    mark = host3.process.log_size()
    host3.reconfigure(partition_key='g1')
    host3.sighup()
    env.wait_log('host3', r'Option ironic_multi\.partition_key changed '
                 r'from \[not valid!\] to \[g1\]', mark)
    env.periods('host3', host3.process.log_size())
    assert host3.process.running()
    assert_servers_untouched(env)


# e. The cloud through Keystone and the openstack client ------------------

def test_e1_demo_user_reboots_and_rebuilds_but_sees_no_hypervisor(
        env: Env) -> None:
    server_id = env.boot('demo-server')
    server = env.wait_active(server_id)
    node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
    host = server['OS-EXT-SRV-ATTR:host']

    env.cli('demo', 'server', 'reboot', '--hard', '--wait', server_id)
    # From 2.93 nova asks every rebuild to reimage a boot volume; the
    # driver looks at the server's real root disk, so an image-backed
    # server rebuilds there too (the functional tier covers 2.92).
    env.cli('demo', '--os-compute-api-version', '2.93', 'server', 'rebuild',
            '--image', env.dep.image_id, '--wait', server_id)
    server = env.wait_active(server_id)
    assert (server['OS-EXT-SRV-ATTR:host'],
            server['OS-EXT-SRV-ATTR:hypervisor_hostname']) == (host, node)
    assert server['OS-EXT-STS:power_state'] == 1
    ironic_node = env.ironic.node.get(node)
    assert (ironic_node.instance_uuid, ironic_node.provision_state,
            ironic_node.power_state) == (server_id, 'active', 'power on')
    actions = [a['Action'] for a in env.cli(
        'demo', 'server', 'event', 'list', server_id, '-f', 'json')]
    assert {'create', 'reboot', 'rebuild'} <= set(actions), actions

    # Its own server only, and no hypervisor.
    mine = env.cli('demo', 'server', 'list', '-f', 'json')
    assert [s['ID'] for s in mine] == [server_id]
    with pytest.raises(deployment.CLIError, match='os-hypervisors'):
        env.cli('demo', 'hypervisor', 'list')
    # Ironic made the server's project the lessee of its node at deploy
    # ([conductor] automatic_lessee): its members see that node, with the
    # BMC details redacted, and no other node.
    leased = env.cli('demo', 'baremetal', 'node', 'list', '-f', 'json')
    assert [n['uuid'] for n in leased] == [node]
    own = env.cli('demo', 'baremetal', 'node', 'show', node, '-f', 'json')
    assert 'Redacted' in str(own['driver_info']), own['driver_info']
    with pytest.raises(deployment.CLIError, match='404'):
        env.cli('demo', 'baremetal', 'node', 'show', env.plan.node_a)
    # The operators see both: nova's admin the hypervisors, Ironic's
    # (system scope) the nodes.
    hypervisors = env.cli('admin', 'hypervisor', 'list', '-f', 'json')
    assert {h['Hypervisor Hostname'] for h in hypervisors} == env.all_nodes
    listed = env.cli('system-admin', 'baremetal', 'node', 'list', '-f',
                     'json')
    assert {n['uuid'] for n in listed} == env.all_nodes
    shown = env.cli('system-admin', 'baremetal', 'node', 'show', node,
                    '-f', 'json')
    assert shown['instance_uuid'] == server_id
    env.delete('demo-server')


def test_e2_disabled_or_forced_down_host_gives_its_free_nodes_away(
        env: Env, figures: list[str]) -> None:
    host2 = env.compute('host2').process
    others = [h for h in HOSTS if h != 'host2']
    everyone = env.expected(HOSTS, env.plan.g1)
    env.wait_division(everyone, 'g1 divided between the three hosts')
    steps = [
        ('--disable', others, 'host2 disabled: its free g1 nodes move'),
        ('--enable', HOSTS, 'host2 enabled: its share back'),
        ('--down', others, 'host2 forced down: its free g1 nodes move'),
        ('--up', HOSTS, 'host2 up again: its share back'),
    ]
    for flag, members, what in steps:
        started = time.monotonic()
        env.cli('admin', 'compute', 'service', 'set', flag, 'host2',
                'nova-compute')
        want = env.expected(members, env.plan.g1)
        env.wait_division(want, what)
        figures.append('openstack compute service set %s host2: division '
                       'settled after %.1fs' % (flag,
                                                time.monotonic() - started))
    assert host2.running()
    services = env.nova.services()
    assert (services['host2']['status'], services['host2']['state'],
            services['host2']['forced_down']) == ('enabled', 'up', False)
    assert_servers_untouched(env)
    assert_one_provider_per_node(env)


#: How long one period may take, Keystone down, on a loaded machine: a
#: period's requests are each asked once (no retries).
OUTAGE_PERIOD_BOUND = 2 * PERIOD + 10


def keystone_outage(env: Env, figures: list[str], mode: str) -> None:
    """Keystone stops: every host is NotReady each period, at once.

    Every compute-node row and provider stays, no period is held longer
    than :data:`OUTAGE_PERIOD_BOUND`, and when Keystone is back every host
    manages its nodes again.
    """
    division = env.db_division()
    providers = {p['uuid'] for p in env.dep.placement.providers()}
    keystone = env.dep.keystone
    # The mark at the stop: only what the hosts log from now on counts.
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    keystone.stop()
    stopped = time.monotonic()
    try:
        noticed = {}
        for host in HOSTS:
            lines = env.wait_log(
                host, r'Ironic nodes not refreshed, keeping the last known '
                r'state', marks[host], count=3,
                timeout=deployment.IRONIC_TOKEN_CACHE + 6 * PERIOD + 60)
            noticed[host] = time.monotonic() - stopped
            assert env.log_lines(host, 'Virt driver is not ready',
                                 marks[host]), host
            # Periods go on at their pace: none waits on retries.
            times = [reports.log_time(line) for line in lines]
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            assert max(gaps) <= OUTAGE_PERIOD_BOUND, (host, gaps, lines)
            held = env.log_lines(host, r'still failed after \d+ attempts',
                                 marks[host])
            assert not held, (host, held)
            figures.append('Keystone down (divide = %s), %s after %.1fs, '
                           'periods %s s apart: %s' % (
                               mode, host, noticed[host],
                               '/'.join('%.1f' % g for g in gaps),
                               lines[0][-160:]))
        # No period saw an empty list: every compute node is still there.
        assert env.db_division() == division
        for host in HOSTS:
            assert not env.log_lines(host, 'Deleting orphan compute node',
                                     marks[host]), host
    finally:
        keystone.start()
        keystone.wait_ready()
    back = time.monotonic()
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    for host in HOSTS:
        env.periods(host, marks[host], count=1)
    figures.append('Keystone back (divide = %s): every compute managing its '
                   'nodes again after %.1fs' % (mode, time.monotonic() - back))
    assert env.db_division() == division
    assert {p['uuid'] for p in env.dep.placement.providers()} == providers
    assert_servers_untouched(env)


def test_e3_keystone_outage_is_not_ready_and_deletes_nothing(
        env: Env, figures: list[str]) -> None:
    keystone_outage(env, figures, 'nodes')


def test_e4_wrong_ironic_credentials_or_catalog_stop_the_compute(
        env: Env, figures: list[str]) -> None:
    cases = {
        'host4': ({'password': 'not-the-password'},
                  r'Keystone at \S+ rejected the service user of '
                  r'\[ironic\] \(auth_type password\)'),
        'host5': ({'region_name': 'RegionTwo'},
                  r'The service catalog has no baremetal endpoint with '
                  r'interface internal in region RegionTwo'),
    }
    computes = {}
    for host, (overrides, _) in cases.items():
        compute = env.dep.add_compute(deployment.ComputeSpec(
            host, eventlet=False,
            partition={'partition_key': 'g1',
                       'peer_list': ALL_PEERS + ',' + host}))
        compute.ironic_overrides.update(overrides)
        compute.write_conf()
        compute.start()
        computes[host] = compute
    for host, (_, pattern) in cases.items():
        status = computes[host].process.wait(deployment.START_TIMEOUT)
        assert status not in (None, 0), (host, status)
        (line,) = env.log_lines(host, 'nova-ironic-multi refuses to start: ' +
                                pattern)
        assert re.search(r'[Cc]heck \[ironic\] ', line), line
        figures.append('%s: %s' % (host, line[line.index('refuses'):]))
    services = env.nova.services()
    assert not set(cases) & set(services), services


# e5. Automatic takeover of a fenced host (takeover = fenced) ------------

#: The documented bound: every instance of a fenced host is manageable on
#: its new host within one resource period of the fence, plus five seconds.
FENCE_BOUND = PERIOD + 5


def division_for(env: Env, mode: str,
                 members: Iterable[str]) -> dict[str, str]:
    """Who should manage each g1 node, in the divide mode ``mode``."""
    if mode == 'shards':
        return shard_division(env, members)
    return env.expected(members, env.plan.g1)


def ring_host(env: Env, mode: str, members: Iterable[str],
              node: str) -> str:
    """The host the ring names for ``node`` among ``members``."""
    members = list(members)
    shard = (env.ironic.node.get(node, fields=['shard']).shard
             if mode == 'shards' else None)
    if shard is None:
        return share(members, [node])[node]
    counts = {s.name: s.count for s in env.ironic.shard.list()}
    return sharding.assign(rings.load(RING, members, EXPONENT), counts,
                           weighted=False)[shard]


def enable_fenced_takeover(env: Env) -> None:
    """``takeover = fenced`` on every host, by SIGHUP (once)."""
    hosts = [h for h in HOSTS
             if env.compute(h).partition.get('takeover') != 'fenced']
    marks = {h: env.compute(h).process.log_size() for h in hosts}
    for host in hosts:
        env.compute(host).reconfigure(takeover='fenced')
        env.compute(host).sighup()
    for host in hosts:
        env.wait_log(host, r'Option ironic_multi\.takeover changed from '
                     r'\[\w+\] to \[fenced\]', marks[host])


class RowSampler(threading.Thread):
    """The cell database's compute node records, twice a second."""

    def __init__(self, env: Env) -> None:
        super().__init__(name='compute-node-sampler', daemon=True)
        self.env = env
        self.samples: list[tuple[float, list[dict[str, Any]]]] = []
        self.error: Exception | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.samples.append((time.time(), self.env.rows()))
            except Exception as e:   # reported by finish()
                self.error = e
                return
            self._halt.wait(0.5)

    def finish(self) -> None:
        self._halt.set()
        self.join(30)
        if self.error is not None:
            raise self.error

    def most_duplicates(self) -> int:
        """The most nodes with two live records in any one sample."""
        return max((sum(1 for c in collections.Counter(
            r['hypervisor_hostname'] for r in rows).values() if c > 1)
            for _, rows in self.samples), default=0)

    def back_on(self, host: str, nodes: Iterable[str]) -> set[str]:
        """``nodes`` whose record went back to ``host`` after leaving it."""
        back = set()
        for node in nodes:
            left = False
            for _, rows in self.samples:
                on = {r['host'] for r in rows
                      if r['hypervisor_hostname'] == node}
                if on and host not in on:
                    left = True
                elif left and host in on:
                    back.add(node)
        return back


def log_slice(env: Env, host: str, start: int, end: int | None = None
              ) -> list[str]:
    text = env.compute(host).process.log_text(start)
    if end is not None:
        text = text[:max(0, end - start)]
    return text.splitlines()


def watch_handover(env: Env) -> tuple[dict[str, list[int]], dict[str, int],
                                      dict[str, int], RowSampler]:
    """What a host handing its nodes over is checked against, taken before.

    The compute node records' ids and the providers' generations (nothing
    may be re-created), each host's log size (where its log of the handover
    begins), and a started RowSampler of the records (finish it).
    """
    record_ids = env.dep.cell.compute_node_ids()
    generations = {p['uuid']: p['generation']
                   for p in env.dep.placement.providers()}
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    sampler = RowSampler(env)
    sampler.start()
    return record_ids, generations, marks, sampler


def fenced_takeover(env: Env, figures: list[str], mode: str, victim: str,
                    count: int) -> None:
    """kill -9 ``victim`` with ``count`` servers of the demo user and fence
    it; its instances are manageable on the survivors within one period;
    the demo user reboots and deletes them there; the victim comes back.

    Prints the figures of the operations docs: time from the fence to
    every instance manageable, nodes managed by two hosts at once,
    instances lost or stuck in a task state.
    """
    began = time.monotonic()
    survivors = tuple(h for h in HOSTS if h != victim)
    env.wait_division(division_for(env, mode, HOSTS),
                      'g1 divided between the three hosts')
    # The demo user's servers on the victim: the operator disables the
    # others for the boots, so the scheduler has no other choice.
    for host in survivors:
        env.cli('admin', 'compute', 'service', 'set', '--disable', host,
                'nova-compute')
    try:
        env.wait_division(division_for(env, mode, [victim]),
                          '%s alone managing the free g1 nodes' % victim)
        names = ['fenced-%s-%d' % (mode, i) for i in range(count)]
        for name in names:
            env.boot(name)
        for name in names:
            server = env.wait_active(env.servers[name])
            assert server['OS-EXT-SRV-ATTR:host'] == victim, (name, server)
    finally:
        for host in survivors:
            env.cli('admin', 'compute', 'service', 'set', '--enable', host,
                    'nova-compute')
    env.wait_division(division_for(env, mode, HOSTS),
                      'g1 divided between the three hosts again')
    # Every server on the victim's g1 nodes moves, the admin's too; one on
    # a node no survivor serves (a g2 node, when an earlier step left one)
    # stays with it.
    on_victim = {sid: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for sid in env.servers.values()
                 if (s := env.nova.server(sid))['OS-EXT-SRV-ATTR:host'] ==
                 victim and
                 s['OS-EXT-SRV-ATTR:hypervisor_hostname'] in env.plan.g1}
    assert set(on_victim) >= {env.servers[n] for n in names}, on_victim
    others = {sid: env.nova.server(sid)['OS-EXT-SRV-ATTR:host']
              for sid in env.servers.values() if sid not in on_victim}
    record_ids, generations, marks, sampler = watch_handover(env)
    try:
        # The monitor powers the host off, then fences it in nova.
        compute = env.compute(victim)
        killed = time.time()
        compute.process.signal(signal.SIGKILL)
        assert compute.process.wait(10) == -signal.SIGKILL
        api = env.dep.services['nova-api']
        api_mark = api.log_size()
        env.cli('admin', 'compute', 'service', 'set', '--down', victim,
                'nova-compute')
        # The fence: when nova-api answered the PUT (the command itself
        # returns up to seconds later).
        (put,) = [line for line in api.log_text(api_mark).splitlines()
                  if '"PUT /v2.1/os-services/' in line]
        fenced_at = reports.log_time(put)
        moved: dict[str, str] = {}

        def manageable() -> bool:
            # On a live host, idle and ACTIVE, and its node's record there
            # too: nova's API and the new host's resource tracker agree.
            rows = env.db_division()
            for sid, node in on_victim.items():
                s = env.nova.server(sid)
                host = s['OS-EXT-SRV-ATTR:host']
                if (host not in survivors or rows.get(node) != host or
                        (s['status'], s['OS-EXT-STS:task_state']) !=
                        ('ACTIVE', None)):
                    return False
                moved[sid] = host
            return True

        processes.wait_for(
            '%s\'s instances manageable on %s' % (victim, survivors),
            manageable, TAKEOVER_TIMEOUT, interval=0.25,
            alive=[env.compute(h).process for h in survivors])
        took = time.time() - fenced_at
        # Each on the host the ring names for its node, moved by that host
        # alone, which said so once.
        acted = {}
        for sid, node in on_victim.items():
            assert moved[sid] == ring_host(env, mode, survivors, node), (
                sid, node, moved[sid])
            said = {h: env.log_lines(h, r'Took over Ironic node %s with '
                                     r'instance %s from %s:'
                                     % (node, sid, victim), marks[h])
                    for h in survivors}
            assert {h: len(lines) for h, lines in said.items()} == {
                h: int(h == moved[sid]) for h in survivors}, said
            acted[sid] = reports.log_time(said[moved[sid]][0]) - fenced_at
        stuck = [sid for sid in {**on_victim, **others}
                 if (s := env.nova.server(sid))['status'] != 'ACTIVE' or
                 s['OS-EXT-STS:task_state'] is not None]
        assert not stuck, stuck

        # The demo user manages its servers on their new hosts: reboots
        # each, deletes all but one (kept through the victim's return).
        demo = [n for n in names if env.servers[n] in on_victim]
        kept = demo[0]
        #: When the demo user deleted a server: its node is free from then.
        deleted_at: dict[str, float] = {}
        actions_started = time.monotonic()

        def exercise(name: str) -> None:
            sid = env.servers[name]
            env.cli('demo', 'server', 'reboot', '--hard', '--wait', sid)
            s = env.wait_active(sid)
            assert s['OS-EXT-SRV-ATTR:host'] == moved[sid], (name, s)
            assert env.ironic.node.get(on_victim[sid]).power_state == \
                'power on'
            # The user sees why: the takeover is one of its actions.
            events = [e['Action'] for e in env.cli(
                'demo', 'server', 'event', 'list', sid, '-f', 'json')]
            assert events.count('takeover') == 1, (name, events)
            if name != kept:
                deleted_at[sid] = time.time()
                node = env.delete(name)
                freed = env.ironic.node.get(node)
                assert (freed.instance_uuid, freed.provision_state) == (
                    None, 'available'), (name, freed)

        def ring_show() -> None:
            # The operator sees each takeover in ring show.
            shown = env.ring_show(mode)
            # Its members, read through the hosts' own membership driver:
            # neither the dead victim nor the fenced one.
            assert shown['members'] == sorted(survivors), shown
            listed = {t['instance']: (t['from'], t['to'])
                      for t in shown['recent_takeovers']
                      if t['instance'] in on_victim}
            assert listed == {sid: (victim, host)
                              for sid, host in moved.items()}, shown

        with futures.ThreadPoolExecutor(len(demo) + 1) as pool:
            jobs = [pool.submit(exercise, n) for n in demo]
            jobs.append(pool.submit(ring_show))
            for job in jobs:
                job.result()
        actions = time.monotonic() - actions_started

        # The victim comes back, still fenced: it manages nothing (its
        # instances are the survivors' now, its free nodes too)...
        restart = compute.process.log_size()
        compute.start()
        env.periods(victim, restart)
        assert {re.search(r'Managing (\d+) ', line).group(1)  # type: ignore
                for line in env.log_lines(victim, r'Managing \d+ Ironic '
                                          r'nodes', restart)} == {'0'}
        # ...and, unfenced, takes only its ring share of free nodes.
        env.cli('admin', 'compute', 'service', 'set', '--up', victim,
                'nova-compute')
        unfenced = time.time()
        env.wait_up(victim)
        want = division_for(env, mode, HOSTS)
        env.wait_division(want, '%s back: g1 divided between the three'
                          % victim)
        settle = {h: env.compute(h).process.log_size() for h in HOSTS}
        for host in HOSTS:
            env.periods(host, settle[host])
        ended = time.time()
    finally:
        sampler.finish()
    db = env.db_division()
    assert {n: db.get(n) for n in want} == want
    kept_id = env.servers[kept]
    assert env.nova.server(kept_id)['OS-EXT-SRV-ATTR:host'] == moved[kept_id]
    # Nothing flaps back, and the victim never acts on what moved away.
    # (A deleted server's node is free: the ring may give it back.)
    still = [node for sid, node in on_victim.items()
             if sid in env.servers.values()]
    back = sampler.back_on(victim, still)
    assert not back, 'records back on %s: %s' % (victim, back)
    for sid in on_victim:
        assert not env.log_lines(victim, sid, restart), (victim, sid)

    # Who managed which node, from every host's periods.
    spans = [s for h in survivors for s in reports.spans(
        h, log_slice(env, h, marks[h]), until=ended)]
    spans += reports.spans(victim, log_slice(env, victim, marks[victim],
                                             restart), until=killed)
    spans += reports.spans(victim, log_slice(env, victim, restart),
                           until=ended)
    twice = reports.overlaps(spans)
    during = [o for o in twice if o.start < unfenced]
    instance_nodes = [o for sid, node in on_victim.items() for o in twice
                      if o.node == node and
                      o.start < deleted_at.get(sid, ended)]
    after = [o for o in twice if o.start >= unfenced]

    # No duplicate and no loss: one record and one provider per node, the
    # same ones as before; allocations for the live servers only.
    assert_one_row_per_node(env.rows())
    assert env.dep.cell.compute_node_ids() == record_ids
    assert_one_provider_per_node(env)
    providers = {p['uuid']: p['generation']
                 for p in env.dep.placement.providers()}
    assert providers.keys() == generations.keys()
    assert all(providers[u] >= g for u, g in generations.items()), (
        generations, providers)
    assert_allocations_only_for_live_servers(env)
    for sid, host in others.items():
        assert env.nova.server(sid)['OS-EXT-SRV-ATTR:host'] == host, sid
    lost = [sid for sid in {**on_victim, **others}
            if sid in env.servers.values() and (
                env.ironic.node.get(env.nova.server(sid)[
                    'OS-EXT-SRV-ATTR:hypervisor_hostname']).instance_uuid !=
                sid)]
    assert not lost, lost
    assert_servers_untouched(env)

    # The kept server, on the host that took it over: deleted at last.
    node = env.delete(kept)
    freed = env.ironic.node.get(node)
    assert (freed.instance_uuid, freed.provision_state) == (None,
                                                            'available')
    assert_allocations_only_for_live_servers(env)

    line = (
        'takeover = fenced (divide = %s, membership = %s), kill -9 %s and '
        'fence it: its %d '
        'instances manageable on %s after %.1fs (target %ds: one period + '
        '5s; moved at +%s s); nodes managed by two hosts at once: %d during '
        'the takeover, %d of the moved instances\', %d free node(s) for at '
        'most %.1fs when %s was unfenced; most duplicate records in a '
        'sample: %d (%d samples); instances lost or stuck in a task state: '
        '%d; demo user\'s reboots and deletes on the new hosts (and '
        'ring show) %.1fs; '
        'scenario %.0fs'
        % (mode, env.membership.get('membership_driver', 'servicegroup'),
           victim, len(on_victim), '/'.join(sorted(set(
            moved.values()))), took, FENCE_BOUND,
           '/'.join('%.1f' % t for t in sorted(acted.values())),
           len(during), len(instance_nodes), len({o.node for o in after}),
           max((o.seconds for o in after), default=0.0), victim,
           sampler.most_duplicates(), len(sampler.samples),
           len(stuck) + len(lost), actions, time.monotonic() - began))
    figures.append(line)
    print(line)
    assert sampler.most_duplicates() == 0
    assert not instance_nodes, instance_nodes
    assert not during, during
    # The free nodes of a membership change settle by the next period.
    assert_within(max((o.seconds for o in after), default=0.0), PERIOD,
                  'free nodes managed by two hosts when %s came back'
                  % victim)
    assert_within(took, FENCE_BOUND, 'every instance of the fenced %s '
                  'manageable again' % victim)


def assert_allocations_only_for_live_servers(env: Env) -> None:
    """Each live server holds one allocation, on its node; nobody else."""
    consumers: dict[str, set[str]] = collections.defaultdict(set)
    for p in env.dep.placement.providers():
        for consumer in env.dep.placement.allocations(p['uuid']):
            consumers[consumer].add(p['uuid'])
    want = {sid: {env.nova.server(sid)['OS-EXT-SRV-ATTR:hypervisor_hostname']}
            for sid in env.servers.values()}
    assert dict(consumers) == want


def test_e5_fenced_host_instances_taken_over_and_managed_by_demo_user(
        env: Env, figures: list[str]) -> None:
    enable_fenced_takeover(env)
    fenced_takeover(env, figures, 'nodes', 'host3', count=3)


# e6. Planned scale-in and back out (drain_on_stop) ----------------------

#: The host removed and added back. No server of the earlier steps is left
#: on it, so the later steps find the deployment as they would without
#: this one; and in eventlet mode the driver sees SIGTERM through the
#: signal wake-up pipe, the less direct of its two ways.
SCALED = 'host3'
#: How nova's service record says why the drained host takes no builds.
DRAIN_REASON = 'nova-ironic-multi: drained on stop'


def demo_project_server(env: Env, name: str, host: str, node: str) -> str:
    """``openstack server create`` of a demo project's server on ``node``.

    Choosing the host is an admin's call, so the admin, with the admin
    role in the demo project for the scenario, creates it there; from then
    on the demo user manages it as its own.
    """
    server_id: str = env.cli(
        'admin', '--os-project-name', keystone.DEMO_PROJECT, 'server',
        'create', '--flavor', env.flavor, '--image', env.dep.image_id,
        '--nic', 'none', '--host', host, '--hypervisor-hostname', node,
        '-f', 'json', name)['id']
    env.servers[name] = server_id
    env.owners[name] = 'demo'
    return server_id


def wait_status(env: Env, server_id: str, status: str,
                power_state: int) -> dict[str, Any]:
    """Until nova's API shows the server idle in ``status``."""
    def idle() -> dict[str, Any] | None:
        s = env.nova.server(server_id)
        if s['status'] == 'ERROR':
            raise AssertionError('server %s went to ERROR: %s' % (
                server_id, s.get('fault')))
        return s if (s['status'], s['OS-EXT-STS:task_state'],
                     s['OS-EXT-STS:power_state']) == (
                         status, None, power_state) else None

    return processes.wait_for('server %s to be %s' % (server_id, status),
                              idle, BOOT_TIMEOUT, interval=0.25)


def reboot(env: Env, name: str, host: str, node: str) -> None:
    """The demo user hard-reboots its server with the CLI, on ``host``."""
    server_id = env.servers[name]
    env.cli('demo', 'server', 'reboot', '--hard', '--wait', server_id)
    s = wait_status(env, server_id, 'ACTIVE', 1)
    assert s['OS-EXT-SRV-ATTR:host'] == host, (name, s)
    ironic_node = env.ironic.node.get(node)
    assert (ironic_node.instance_uuid, ironic_node.provision_state,
            ironic_node.power_state) == (server_id, 'active', 'power on'), (
                name, ironic_node)


def stop_start(env: Env, servers: Mapping[str, tuple[str, str]]) -> None:
    """The demo user stops its servers, then starts them, with the CLI.

    ``servers``: id -> (the host nova must keep it on, its node); Ironic
    powers each node off, then on.
    """
    env.cli('demo', 'server', 'stop', *servers)
    for server_id, (host, node) in servers.items():
        s = wait_status(env, server_id, 'SHUTOFF', 4)
        assert s['OS-EXT-SRV-ATTR:host'] == host, s
        assert env.ironic.node.get(node).power_state == 'power off', s
    env.cli('demo', 'server', 'start', *servers)
    for server_id, (host, node) in servers.items():
        s = wait_status(env, server_id, 'ACTIVE', 1)
        assert s['OS-EXT-SRV-ATTR:host'] == host, s
        ironic_node = env.ironic.node.get(node)
        assert (ironic_node.instance_uuid, ironic_node.provision_state,
                ironic_node.power_state) == (server_id, 'active',
                                             'power on'), ironic_node


def compute_service(env: Env, host: str) -> dict[str, Any]:
    """``openstack compute service list --long``'s row for ``host``."""
    (row,) = env.cli('admin', 'compute', 'service', 'list', '--service',
                     'nova-compute', '--host', host, '--long', '-f', 'json')
    return dict(row)


def test_e6_scale_in_and_out_with_drain_on_stop(
        env: Env, figures: list[str]) -> None:
    """From three computes to two and back, servers on every host.

    ``drain_on_stop`` by SIGHUP on host3, then SIGTERM: while it stops and
    after, the demo user reboots, stops and starts every server; host3's
    go to the hosts the ring names without it and exit leaves its service
    disabled for the drain. Started again, it enables itself and takes its
    ring share of the free nodes; nothing flaps back, no node is managed by
    two hosts, and every server is deleted through the CLI.
    """
    began = time.monotonic()
    compute = env.compute(SCALED)
    survivors = tuple(h for h in HOSTS if h != SCALED)
    assert compute.partition.get('peer_list') == ALL_PEERS, compute.partition
    env.wait_division(env.expected(HOSTS, env.plan.g1),
                      'g1 divided between the three hosts')

    # Servers of the demo project on every host: one on each survivor, and
    # one on each free node of host3 (the ring gives them to both
    # survivors once host3 is gone).
    db, busy = env.db_division(), env.busy()
    free = {h: sorted(n for n in env.plan.g1
                      if db[n] == h and n not in busy) for h in HOSTS}
    assert all(free.values()), free
    placed = {'scale-%s' % h: (h, free[h][0]) for h in survivors}
    placed.update({'scale-%s-%d' % (SCALED, i): (SCALED, node)
                   for i, node in enumerate(free[SCALED])})
    heirs = {node: share(survivors, [node])[node]
             for name, (h, node) in placed.items() if h == SCALED}
    assert set(heirs.values()) == set(survivors), heirs
    role = ('role', '--project', keystone.DEMO_PROJECT, '--user',
            keystone.ADMIN[0], 'admin')
    env.cli('admin', role[0], 'add', *role[1:])
    with futures.ThreadPoolExecutor(len(placed)) as pool:
        try:
            for boot in [pool.submit(demo_project_server, env, name, h,
                                     node)
                         for name, (h, node) in placed.items()]:
                boot.result()
        finally:
            # (While the servers deploy.)
            unrole = pool.submit(env.cli, 'admin', role[0], 'remove',
                                 *role[1:])
        ids = {name: env.servers[name] for name in placed}
        for name, (host, node) in placed.items():
            s = env.wait_active(ids[name])
            assert (s['OS-EXT-SRV-ATTR:host'],
                    s['OS-EXT-SRV-ATTR:hypervisor_hostname']) == (
                        host, node), s
        unrole.result()
    # Where each server must be once host3 is gone.
    after = {name: (heirs[node] if h == SCALED else h)
             for name, (h, node) in placed.items()}
    others = {sid: env.nova.server(sid)['OS-EXT-SRV-ATTR:host']
              for name, sid in env.servers.items() if name not in placed}

    # The operator sets drain_on_stop and reloads host3, then stops it.
    mark = compute.process.log_size()
    compute.reconfigure(drain_on_stop='true')
    compute.sighup()
    env.wait_log(SCALED, r'Option ironic_multi\.drain_on_stop changed from '
                 r'\[\w+\] to \[[Tt]rue\]', mark)
    record_ids, generations, marks, sampler = watch_handover(env)
    try:
        stopped_at = time.time()
        env.dep.terminate(compute)
        moved: dict[str, float] = {}

        def handed_over(name: str) -> None:
            # nova's API shows it on its new host: from then on the demo
            # user manages it there, host3 still stopping or gone.
            sid = ids[name]
            processes.wait_for(
                '%s handed over to %s' % (name, after[name]),
                lambda: env.nova.server(sid)['OS-EXT-SRV-ATTR:host'] ==
                after[name], STOP_TIMEOUT, interval=0.1)
            moved[name] = time.time() - stopped_at

        def manage(name: str) -> None:
            if placed[name][0] == SCALED:
                handed_over(name)
            reboot(env, name, after[name], placed[name][1])

        # Every server rebooted right away: the survivors' while host3
        # stops, its own as soon as they are handed over; then all are
        # stopped and started (host3 gone by then, or still stopping).
        with futures.ThreadPoolExecutor(len(placed)) as pool:
            jobs = [pool.submit(manage, name) for name in placed]
            status = compute.process.wait(STOP_TIMEOUT)
            exited = time.time() - stopped_at
            assert status == 0, (status, compute.process.tail())
            for job in jobs:
                job.result()
        stop_start(env, {ids[name]: (after[name], placed[name][1])
                         for name in placed})
        managed = time.time() - stopped_at
        drained = log_slice(env, SCALED, marks[SCALED])
        (summary,) = [line for line in drained if re.search(
            r'Draining: \d+ instance\(s\) of %s handed over' % SCALED, line)]
        assert ', 0 left,' in summary, summary
        (disabled,) = [line for line in drained if re.search(
            'Draining: nova-compute on %s is disabled' % SCALED, line)]
        (shutdown,) = [line for line in drained if 'service graceful '
                       'shutdown started' in line]

        # After the exit: the operator's view.
        def on(host: str) -> dict[str, tuple[str, str]]:
            return {s['ID']: (host, s['Status']) for s in env.cli(
                'admin', 'server', 'list', '--all-projects', '--project',
                keystone.DEMO_PROJECT, '--host', host, '-f', 'json')}

        with futures.ThreadPoolExecutor(len(survivors)) as pool:
            listed = dict(collections.ChainMap(*pool.map(on, survivors)))
        assert listed == {sid: (after[name], 'ACTIVE')
                          for name, sid in ids.items()}, listed
        service = compute_service(env, SCALED)
        assert service['Status'] == 'disabled', service
        assert service['Disabled Reason'].startswith(DRAIN_REASON), service
        # The survivors report the moved nodes as theirs (same records).
        heirs_of = {node: after[name] for name, (h, node) in placed.items()
                    if h == SCALED}
        env.wait_division(heirs_of, 'the survivors reporting host3\'s nodes')

        # Scale out: host3 starts again, without drain_on_stop. Meanwhile
        # the demo user deletes one of the servers it handed over: its
        # node is free again, and host3's share when it is back.
        gone = sorted(n for n in placed if placed[n][0] == SCALED)[0]
        with futures.ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(env.delete, gone)
            del compute.partition['drain_on_stop']
            compute.write_conf()
            restart = compute.process.log_size()
            restarted_at = time.time()
            compute.start()
            freed_node = deleting.result()
        freed = env.ironic.node.get(freed_node)
        assert (freed.instance_uuid, freed.provision_state) == (
            None, 'available'), freed
        env.wait_log(SCALED, 'nova-compute on %s was disabled by its last '
                     'drain: enabled again' % SCALED, restart,
                     timeout=deployment.START_TIMEOUT)
        env.wait_up(SCALED)
        want = env.expected(HOSTS, env.plan.g1)
        assert want[freed_node] == SCALED, want
        env.wait_division(want, 'host3 back: g1 divided between the three')
        back = time.time() - restarted_at
        settle = {h: env.compute(h).process.log_size() for h in HOSTS}
        for host in HOSTS:
            env.periods(host, settle[host])
        ended = time.time()
    finally:
        sampler.finish()
    service = compute_service(env, SCALED)
    assert (service['Status'], service['State']) == ('enabled', 'up'), (
        service)
    db = env.db_division()
    assert {n: db.get(n) for n in want} == want

    # Nothing flapped back, and host3 never acted on what it handed over.
    kept = {name: placed[name][1] for name in placed
            if placed[name][0] == SCALED and name != gone}
    assert not sampler.back_on(SCALED, kept.values())
    for name in kept:
        assert not env.log_lines(SCALED, ids[name], restart), name
    # Who managed which node, from every host's periods: host3 until its
    # shutdown began (its periodic tasks stop there) or its last period
    # under way then ended, and again after its start.
    last_audit = max([reports.log_time(line) for line in drained
                      if reports.AUDIT.search(line)], default=0.0)
    until = max(reports.log_time(shutdown), last_audit)
    spans = [s for h in survivors for s in reports.spans(
        h, log_slice(env, h, marks[h]), until=ended)]
    spans += reports.spans(SCALED, drained, until=until)
    spans += reports.spans(SCALED, log_slice(env, SCALED, restart),
                           until=ended)
    twice = reports.overlaps(spans)
    # When the survivors' periods had written the handed-over nodes'
    # records (the first sample that shows them all there).
    rows_moved = min(at for at, rows in sampler.samples
                     if at > stopped_at and
                     all(r['host'] == heirs_of[r['hypervisor_hostname']]
                         for r in rows
                         if r['hypervisor_hostname'] in heirs_of)) - stopped_at
    busy_twice = [o for o in twice if o.node in kept.values() or
                  o.node in {placed[n][1] for n in placed
                             if placed[n][0] != SCALED}]
    free_twice = [o for o in twice if o not in busy_twice]

    # No duplicate and no loss: the same records and providers.
    assert_one_row_per_node(env.rows())
    assert env.dep.cell.compute_node_ids() == record_ids
    assert_one_provider_per_node(env)
    providers = {p['uuid']: p['generation']
                 for p in env.dep.placement.providers()}
    assert providers.keys() == generations.keys()
    assert all(providers[u] >= g for u, g in generations.items())
    assert_allocations_only_for_live_servers(env)
    for sid, host in others.items():
        assert env.nova.server(sid)['OS-EXT-SRV-ATTR:host'] == host, sid
    assert_servers_untouched(env)

    # Still manageable after the return, and deletable: the demo user
    # deletes every server of the scenario.
    with futures.ThreadPoolExecutor(len(placed)) as pool:
        nodes = list(pool.map(env.delete, [n for n in placed if n != gone]))
    for node in nodes:
        freed = env.ironic.node.get(node)
        assert (freed.instance_uuid, freed.provision_state) == (
            None, 'available'), freed
    assert_allocations_only_for_live_servers(env)
    env.wait_division(env.expected(HOSTS, env.plan.g1),
                      'g1 divided between the three hosts at the end')

    line = (
        'scale-in (drain_on_stop by SIGHUP, SIGTERM to %s in %s mode) with '
        '%d servers (%d on %s): disabled +%.1fs, handed over by +%s s (%s), '
        'exited 0 at +%.1fs, the survivors\' records at +%.1fs; the demo '
        'user\'s reboots, stop and start of every server done at +%.1fs; '
        'scale-out: enabled again, and its share of the free nodes back, '
        '%.1fs after its start; nodes managed by two hosts at once: %d of '
        'servers, %d free for at most %.1fs; most duplicate records in a '
        'sample: %d (%d samples); scenario %.0fs'
        % (SCALED, compute.mode, len(placed), len(heirs), SCALED,
           reports.log_time(disabled) - stopped_at,
           '/'.join('%.1f' % t for t in sorted(moved.values())),
           summary[summary.index('Draining:'):],
           exited, rows_moved, managed, back, len(busy_twice),
           len({o.node for o in free_twice}),
           max((o.seconds for o in free_twice), default=0.0),
           sampler.most_duplicates(), len(sampler.samples),
           time.monotonic() - began))
    figures.append(line)
    print(line)
    assert sampler.most_duplicates() == 0
    assert not busy_twice, busy_twice
    assert_within(max((o.seconds for o in free_twice), default=0.0), PERIOD,
                  'free nodes managed by two hosts when %s came back'
                  % SCALED)


# f. Dividing the listing by shard ---------------------------------------

def shard_count(busy: Mapping[str, str], unlabelled: str,
                labelled: list[str]) -> int:
    """The fewest shards (three or more) where the switch shows something.

    Every host manages some g1 node, and host1 some free labelled one (to
    hand over when it dies). With the ``compatible`` ring each shard name
    is placed on its own, so the names Ironic counts besides (``'None'``)
    change nothing here.
    """
    ring = rings.load(RING, HOSTS, EXPONENT)
    for count in itertools.count(3):
        label = {n: sharding.label(n, count) for n in labelled}
        placed = ring.assign(sorted(set(label.values())))
        free = {n: placed[label[n]] for n in labelled}
        managers = {*busy.values(), *free.values(),
                    *share(HOSTS, [unlabelled]).values()}
        if managers == set(HOSTS) and 'host1' in free.values():
            return count
    raise AssertionError('unreachable')


def shard_division(env: Env, members: Iterable[str]) -> dict[str, str]:
    """Who should manage each g1 node with ``divide = shards``.

    From Ironic's own view: the shard of every node and the counts of
    ``GET /v1/shards``. Owners keep the nodes of their instances; a free
    node goes to its shard's host, or, without a shard, to the node ring.
    """
    members = list(members)
    busy = {n: h for n, h in env.busy().items() if n in env.plan.g1}
    shard_of = {n.uuid: n.shard for n in env.ironic.node.list(
        fields=['uuid', 'shard'], conductor_group='g1')}
    counts = {s.name: s.count for s in env.ironic.shard.list()}
    assignment = sharding.assign(rings.load(RING, members, EXPONENT),
                                 counts, weighted=False)
    free = [n for n in env.plan.g1 if n not in busy]
    unsharded = [n for n in free if shard_of[n] is None]
    return {**busy, **share(members, unsharded),
            **{n: assignment[shard_of[n]] for n in free
               if shard_of[n] is not None}}


def listings(env: Env, host: str, since: int) -> list[str]:
    """What ``host`` asked Ironic to list since ``since`` (its DEBUG log)."""
    return [re.search(r'request\(s\) \(([^)]*)\)', line).group(1)  # type: ignore
            for line in env.log_lines(host, r'Listed \d+ Ironic nodes in',
                                      since)]


def test_f1_shards_applied_then_sighup_divides_by_shard(
        env: Env, figures: list[str]) -> None:
    everyone = env.expected(HOSTS, env.plan.g1)
    env.wait_division(everyone, 'g1 divided node by node between the three')
    partition = {'partition_key': 'g1', 'peer_list': ALL_PEERS}
    # One free node will stay without a shard; the labels give every host
    # some of the others.
    busy = {n: h for n, h in env.busy().items() if n in env.plan.g1}
    free = sorted(set(env.plan.g1) - set(busy))
    unlabelled = free[0]
    count = shard_count(busy, unlabelled, free[1:])

    # The operator labels the nodes with the CLI: plan, apply, apply again.
    plan = env.dep.nova_ironic_multi(partition, 'shards', 'plan',
                                     '--count', str(count))
    assert {c['node'] for c in plan['changes']} == set(env.plan.g1), plan
    assert not plan['applied']
    # Labels move nothing while divide = nodes.
    assert plan['free_nodes_changing_hands'] == []
    applied = env.dep.nova_ironic_multi(partition, 'shards', 'apply',
                                        '--count', str(count))
    assert applied['applied'] and applied['changes'] == plan['changes']
    again = env.dep.nova_ironic_multi(partition, 'shards', 'apply',
                                      '--count', str(count))
    assert again['changes'] == []
    # Ironic's view, through the operator's client: every g1 node labelled
    # by its UUID, no g2 node (out of the CLI's scope).
    labels = by_host({n: sharding.label(n, count) for n in env.plan.g1})

    def ironic_lists(*args: str) -> set[str]:
        return {n['uuid'] for n in env.cli(
            'system-admin', 'baremetal', 'node', 'list', *args, '-c',
            'UUID', '-f', 'json')}

    for label, nodes in labels.items():
        assert ironic_lists('--shards', label) == nodes, label
    assert ironic_lists('--unsharded') == set(env.plan.g2)
    # One free node left without a shard: divided node by node.
    env.cli('system-admin', 'baremetal', 'node', 'unset', '--shard',
            unlabelled)
    env.periods('host1', env.compute('host1').process.log_size())
    db = env.db_division()
    assert {n: db[n] for n in everyone} == everyone

    # divide = shards on every host, by SIGHUP (host3 in eventlet mode).
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    started = time.monotonic()
    for host in HOSTS:
        env.compute(host).reconfigure(divide='shards')
        env.compute(host).sighup()
    want = shard_division(env, HOSTS)
    assert set(want.values()) == set(HOSTS), want
    assert want != everyone, 'the switch moves no node: nothing to show'
    env.wait_division(want, 'g1 divided by shard between the three')
    took = time.monotonic() - started
    figures.append('divide = shards by SIGHUP (%d shards): division '
                   'settled after %.1fs' % (count, took))
    assert_within(took, PERIOD, 'the division by shard after the SIGHUPs')
    for host in HOSTS:
        # (From [None] when the file never set it: the default is nodes.)
        env.wait_log(host, r'Option ironic_multi\.divide changed from '
                     r'\[\w+\] to \[shards\]', marks[host])
        env.wait_log(host, r'Listing every node in scope once', marks[host])

    # Warm periods: each host lists its shards and the unsharded nodes of
    # g1, never the whole group; no shard is listed by two hosts.
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    for host in HOSTS:
        env.periods(host, marks[host])
    lists: dict[str, set[str]] = {}
    for host in HOSTS:
        asked = listings(env, host, marks[host])
        assert asked, host
        for filters in asked:
            assert 'conductor_group=g1' in filters, (host, filters)
            assert 'shards=' in filters or 'sharded=False' in filters, (
                host, filters)
        lists[host] = {name for f in asked for part in f.split(', ')
                       if part.startswith('shards=')
                       for name in part[len('shards='):].split(',')}
        figures.append('%s lists: %s' % (host, '; '.join(sorted(set(asked)))))
    # No shard listed by two hosts, every label left listed by one.
    assert sum(map(len, lists.values())) == len(set().union(*lists.values()))
    left = {sharding.label(n, count) for n in env.plan.g1 if n != unlabelled}
    assert left <= set().union(*lists.values()), (left, lists)
    # The operator's view agrees: ring show names the shards each host
    # lists, ring explain the host of each free node.
    partition['divide'] = 'shards'
    shown = env.dep.nova_ironic_multi(partition, 'ring', 'show')
    assert shown['members'] == list(HOSTS), shown['members']
    assert {h: set(shown['shards']['by_host'].get(h, {})) for h in HOSTS} == {
        h: lists[h] - {'None'} for h in HOSTS}, (shown['shards'], lists)
    for node in free:
        explained = env.dep.nova_ironic_multi(partition, 'ring', 'explain',
                                              node)
        assert explained['owner'] == want[node], (node, explained)
    db = env.db_division()
    assert {n: db[n] for n in want} == want
    assert_one_provider_per_node(env)
    assert_servers_untouched(env)


def test_f1b_keystone_outage_in_shard_mode_is_not_ready_at_once(
        env: Env, figures: list[str]) -> None:
    # GET /v1/shards and the reads of single nodes are asked once too.
    keystone_outage(env, figures, 'shards')


def test_f2_killed_host_shards_move_to_survivors(
        env: Env, figures: list[str], request: pytest.FixtureRequest
) -> None:
    before = env.db_division()
    host1 = env.compute('host1')
    survivors = ('host2', 'host3')
    want = shard_division(env, survivors)
    moving = {n for n, h in before.items()
              if h == 'host1' and want.get(n) != 'host1'}
    assert moving, 'host1 has no free g1 node to hand over: %s' % before
    # Prometheus, divide = shards: the three hosts divide g1 by shard (g2
    # is in nobody's scope since d1), each g1 node managed once, in the
    # ring share of one host, and the hosts agree on their members.
    prom = request.getfixturevalue('prom')
    in_scope = len(env.plan.g1)
    started = time.monotonic()
    processes.wait_for(
        'Prometheus to count each g1 node once with divide = shards',
        lambda: (prom.scalar(MANAGED) == in_scope and prom.scalar(
            'sum(nova_ironic_multi_nodes{kind="share"})') == in_scope),
        PERIOD + 3 * prometheus.SCRAPE_INTERVAL + 10)
    views = prom.query('count by (scope) (count by (scope, digest) '
                       '(nova_ironic_multi_member_view_info))')
    assert [n for _, n in views] == [1], views
    figures.append('Prometheus, divide = shards: %d g1 nodes managed once '
                   'after %.1fs' % (in_scope, time.monotonic() - started))
    host1_busy = sum(1 for n, h in env.busy().items()
                     if h == 'host1' and n in env.plan.g1)
    killed = time.monotonic()
    marks = kill_and_wait_takeover(env, 'host1',
                                   {n: want[n] for n in moving})
    # host1's target down, its instance nodes are the only ones nobody
    # manages; no node was counted twice since the kill.
    processes.wait_for(
        'Prometheus to count host1\'s shards under the survivors',
        lambda: prom.scalar(MANAGED) == in_scope - host1_busy,
        PERIOD + 3 * prometheus.SCRAPE_INTERVAL + 10)
    window = int(time.monotonic() - killed) + 5
    most = prom.scalar('max_over_time(%s[%ds:1s])' % (MANAGED, window))
    assert most is not None and most <= in_scope, most
    figures.append('divide = shards, kill -9 host1 (%d free nodes): down '
                   'after %.1fs, its nodes reported by the survivors after '
                   '%.1fs (resource period %ds)'
                   % (len(moving), marks['down'], marks['takeover'], PERIOD))
    assert_within(marks['down'], deployment.SERVICE_DOWN_TIME +
                  deployment.REPORT_INTERVAL, 'nova marking host1 down')
    assert_within(marks['takeover'] - marks['down'], PERIOD,
                  'the survivors taking host1\'s shards once it was down')
    after = env.db_division()
    for node, host in before.items():
        if node not in moving:
            assert after[node] == host, (node, host, after[node])
    assert_one_provider_per_node(env)

    # It comes back and takes its shards back.
    host1.start()
    env.wait_up('host1')
    env.wait_division(shard_division(env, HOSTS),
                      'host1 back: g1 divided by shard between the three')
    assert_servers_untouched(env)


def test_f3_nova_shard_option_with_divide_shards_refuses_to_start(
        env: Env, figures: list[str]) -> None:
    host2 = env.compute('host2')
    division = env.db_division()
    host2.ironic_overrides['shard'] = 'shard-0'
    host2.write_conf()
    env.dep.terminate(host2)
    assert host2.process.wait(STOP_TIMEOUT) == 0, host2.process.tail()
    mark = host2.process.log_size()
    host2.start()
    assert host2.process.wait(deployment.START_TIMEOUT) not in (None, 0)
    (line,) = env.log_lines('host2', 'nova-ironic-multi refuses to start',
                            mark)
    assert ('[ironic_multi] divide = shards contradicts [ironic] shard = '
            "'shard-0'" in line), line
    figures.append('host2: %s' % line[line.index('refuses'):])
    # With the file fixed it starts and takes its shards back.
    del host2.ironic_overrides['shard']
    host2.write_conf()
    mark = host2.process.log_size()
    host2.start()
    # Its service record still looks up (the refused start wrote it) and
    # the cell database still holds its nodes: wait for the new process's
    # own periods, not for those.
    env.periods('host2', mark)
    assert env.log_lines('host2', r"'divide': 'shards'", mark)
    env.wait_division(division, 'host2 back with divide = shards')
    # ...and its own periods manage what the cell database says it has.
    last = env.log_lines('host2', r'Managing \d+ Ironic nodes', mark)[-1]
    managed = int(re.search(r'Managing (\d+) Ironic', last).group(1))  # type: ignore
    assert managed == sum(1 for n, h in division.items()
                          if h == 'host2' and n in env.plan.g1), last


#: tooz membership from f3a on: a dead host leaves the group within
#: this, well before nova's service_down_time would call it down.
TOOZ_MEMBER_TIMEOUT = 4
TOOZ_HEARTBEAT = 0.5


def test_f3a_every_host_restarted_with_tooz_membership(
        env: Env, figures: list[str]) -> None:
    """The operator moves the fleet to ``membership_driver = tooz``.

    Not a mutable option, and every host of a partition must use the same
    one (hosts on different drivers see different members and would claim
    some nodes twice), so the operations docs say: stop them all, change
    the file, start them all. Each joins the tooz group on a real Redis;
    the division by shard is the same after, and ``nova-ironic-multi ring
    show`` with the hosts' options reads the three members from that group.
    """
    began = time.monotonic()
    division = env.db_division()
    env.redis = redis_server.RedisServer()
    env.membership = {'membership_driver': 'tooz',
                      'tooz_backend_url': env.redis.start(),
                      'tooz_member_timeout': str(TOOZ_MEMBER_TIMEOUT),
                      'tooz_heartbeat_interval': str(TOOZ_HEARTBEAT)}
    for host in HOSTS:
        env.dep.terminate(env.compute(host))
    marks = {}
    for host in HOSTS:
        compute = env.compute(host)
        assert compute.process.wait(STOP_TIMEOUT) == 0, compute.process.tail()
        compute.reconfigure(**env.membership)
        marks[host] = compute.process.log_size()
    for host in HOSTS:
        env.compute(host).start()
    for host in HOSTS:
        env.wait_log(host, r'Joined tooz group nova-ironic-multi',
                     marks[host])
        env.periods(host, marks[host])
    env.wait_division(division, 'the shards divided as before, by tooz')
    shown = env.ring_show('shards')
    assert shown['members'] == list(HOSTS), shown
    assert_one_provider_per_node(env)
    assert_servers_untouched(env)
    figures.append('membership_driver = tooz: the three hosts stopped, '
                   'started and dividing by shard as before in %.1fs'
                   % (time.monotonic() - began))


def test_f3b_fenced_host_in_shard_mode_with_tooz(env: Env,
                                                figures: list[str]) -> None:
    # host2 dies and leaves the tooz group (which is no fence): only once
    # it is forced down do its instances (the admin's on-host2 too) go to
    # host1 (threading mode) and host3 (eventlet mode), by shard.
    enable_fenced_takeover(env)
    fenced_takeover(env, figures, 'shards', 'host2', count=2)


def test_f4_sighup_back_to_nodes(env: Env) -> None:
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    started = time.monotonic()
    for host in HOSTS:
        env.compute(host).reconfigure(divide='nodes')
        env.compute(host).sighup()
    for host in HOSTS:
        env.wait_log(host, r'Option ironic_multi\.divide changed from '
                     r'\[shards\] to \[nodes\]', marks[host])
    env.wait_division(env.expected(HOSTS, env.plan.g1),
                      'g1 divided node by node again')
    assert_within(time.monotonic() - started, PERIOD,
                  'the division by node after the SIGHUPs')
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    for host in HOSTS:
        env.periods(host, marks[host])
        assert listings(env, host, marks[host])[-1] == 'conductor_group=g1'
    assert_one_provider_per_node(env)
    assert_servers_untouched(env)


def test_d3_sigterm_stops_every_compute_gracefully(
        env: Env, figures: list[str]) -> None:
    marks = {h: env.compute(h).process.log_size() for h in HOSTS}
    for host in HOSTS:
        env.dep.wait_serving(env.compute(host))
    for host in HOSTS:
        env.compute(host).process.signal(signal.SIGTERM)
    started = time.monotonic()
    for host in HOSTS:
        compute = env.compute(host)
        status = compute.process.wait(
            max(1.0, STOP_TIMEOUT - (time.monotonic() - started)))
        assert status == 0, (
            '%s (%s mode) exited with %s after SIGTERM:\n%s'
            % (host, compute.mode, status, compute.process.tail()))
        assert env.log_lines(host, 'nova-compute service graceful shutdown '
                             'finished', marks[host]), compute.process.tail()
    figures.append('SIGTERM: all three computes exited 0 within %.1fs'
                   % (time.monotonic() - started))
