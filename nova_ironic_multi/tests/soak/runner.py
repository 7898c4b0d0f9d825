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
"""One soak: the deployment, the traffic, the faults, the checks, the table.

The deployment is the e2e tier's (:mod:`..fixtures.deployment`): Keystone,
placement, nova-api, conductor and scheduler, three computes with this
driver (host1 and host2 in threading mode sharing conductor group g1,
host3 in eventlet mode alone in g2, with an application credential), one
ironic-conductor per group and ironic-api, on PostgreSQL and RabbitMQ.
Four things differ: the computes reach Ironic through a fault proxy (the
catalog's baremetal endpoint), every service reaches RabbitMQ through a
TCP proxy that can play a broker restart, every host runs with ``takeover
= fenced``, and nova's reaper of deleted instances runs every 20 s rather
than every 30 minutes, so that an orphan is reaped within the run.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import contextlib
import dataclasses
import http.server
import json
import re
import shutil
import sys
import threading
import time
from typing import Any, cast, TextIO
import uuid

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1.identity import v3 as ks_v3
from keystoneauth1 import session as ks_session

from nova_ironic_multi.tests.fixtures import deployment
from nova_ironic_multi.tests.fixtures import fault_proxy
from nova_ironic_multi.tests.fixtures import keystone
from nova_ironic_multi.tests.fixtures import processes
from nova_ironic_multi.tests.soak import checker as checker_mod
from nova_ironic_multi.tests.soak import faults
from nova_ironic_multi.tests.soak import invariants
from nova_ironic_multi.tests.soak import observe
from nova_ironic_multi.tests.soak import report
from nova_ironic_multi.tests.soak import schedule
from nova_ironic_multi.tests.soak import tcp_proxy
from nova_ironic_multi.tests.soak import workload

NODES = {'g1': 7, 'g2': 3}
SHARDS = 3
FLAVOR = 'baremetal'
#: After a fault is lifted, the deployment converges within this, or it
#: is a violation.
CONVERGE_TIMEOUT = 150.0
#: After the traffic stops: requests end, nodes are torn down and reaped.
SETTLE_TIMEOUT = invariants.IRONIC_GRACE + 90.0
INITIAL = {
    'host1': invariants.HostConfig('g1', ('host1', 'host2')),
    'host2': invariants.HostConfig('g1', ('host1', 'host2')),
    'host3': invariants.HostConfig('g2', ('host3',)),
}
EVENTLET = {'host3'}
#: ``[DEFAULT] instance_build_timeout`` of the computes (seconds): half a
#: boot's bound (workload.BOUNDS), many times a deploy's few seconds.
BUILD_TIMEOUT = 150


def node_uuid(group: str, i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, 'nim-soak:%s-%d' % (group, i)))


def specs() -> list[deployment.ComputeSpec]:
    return [deployment.ComputeSpec(
        host, eventlet=host in EVENTLET,
        partition={**conf.options(), 'takeover': 'fenced'},
        app_credential=host in EVENTLET)
        for host, conf in INITIAL.items()]


class SoakDeployment(deployment.Deployment):
    """The e2e deployment, nova's reaper on a soak's time scale.

    RabbitMQ is reached through a proxy (:attr:`amqp_port`) when set.
    """

    amqp_port = 0

    def nova_common(self, name: str) -> dict[str, dict[str, object]]:
        sections = super().nova_common(name)
        if self.amqp_port:
            sections['DEFAULT']['transport_url'] = self.rabbit.transport_url(
                self.vhost).replace(
                    '@%s:%d/' % (self.rabbit.host, self.rabbit.port),
                    '@127.0.0.1:%d/' % self.amqp_port)
        return sections

    def compute_common(self, host: str) -> dict[str, dict[str, object]]:
        sections = super().compute_common(host)
        sections['DEFAULT'].update({
            'running_deleted_instance_action': 'reap',
            'running_deleted_instance_poll_interval':
                int(invariants.REAP_INTERVAL),
            # A build request lost in a fault ends in ERROR with its cause
            # (nova_ironic_multi.period.unclaimed), well within a boot's bound.
            'instance_build_timeout': BUILD_TIMEOUT,
        })
        return sections


class Proxy(fault_proxy.FaultProxy):
    """The fault proxy; 503 (as a load balancer) while ironic-api is down."""

    def _serve(self, handler: http.server.BaseHTTPRequestHandler,
               body: bytes) -> None:
        try:
            super()._serve(handler, body)
        except OSError:
            # (The client may have gone too: nothing to answer then.)
            with contextlib.suppress(OSError):
                self._answer(
                    handler, 503, [('Content-Type', 'text/plain')],
                    b'503 Service Unavailable: no server is available')


@dataclasses.dataclass
class Result:
    seed: int
    profile: str
    minutes: float
    steps: list[str]
    requests: dict[str, dict[str, int]]
    faults: dict[str, int]
    converge: dict[str, list[float]]
    unconverged: dict[str, int]
    cut_short: dict[str, int]
    violations: list[str]
    table: str
    #: Problems of servers no compute ever had (``Violation.outside``).
    outside: list[str]
    notes: dict[str, Any]
    run_dir: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


class Soak:
    def __init__(self, seed: int, minutes: float, profile: str,
                 run_dir: str, out: TextIO = sys.stdout) -> None:
        self.seed = seed
        self.minutes = minutes
        self.profile = schedule.PROFILES[profile]
        self.run_dir = run_dir
        self.out = out
        self.nodes = {g: [node_uuid(g, i) for i in range(n)]
                      for g, n in NODES.items()}
        self.fleet = sum(NODES.values())
        self.dep = SoakDeployment(run_dir, specs(), self.nodes)
        self.proxy = Proxy(self.dep.ironic.url)
        self.amqp = tcp_proxy.TcpProxy((self.dep.rabbit.host,
                                        self.dep.rabbit.port))
        self.dbs = observe.Databases(self.dep.pg, self.dep.db)
        self.configs = dict(INITIAL)
        self.intended_down: set[str] = set()
        #: Computes the client sends nothing but deletes to (about to stop,
        #: or starting).
        self.unsafe_hosts: set[str] = set()
        self.groups_down: set[str] = set()
        self.terminated = 0
        self.violations: list[checker_mod.Violation] = []
        self.outside: list[checker_mod.Violation] = []
        self._vlock = threading.Lock()
        self.step_label = 'setup'
        self.kind = 'setup'
        self.last_fault = time.monotonic()
        self.started = time.monotonic()
        self.executed: list[schedule.Step] = []
        self.crashes: collections.Counter[str] = collections.Counter()
        self.checker: checker_mod.Checker | None = None
        self.workload: workload.Workload | None = None

    # Output ---------------------------------------------------------------

    def say(self, text: str) -> None:
        self.out.write('[soak %6.0fs] %s\n' % (time.monotonic() -
                                               self.started, text))
        self.out.flush()

    def _report(self, v: checker_mod.Violation) -> None:
        with self._vlock:
            (self.outside if v.outside else self.violations).append(v)
        self.say(v.describe())

    def violation(self, invariant: str, subject: str, evidence: str,
                  step: str | None = None, outside: str = '') -> None:
        self._report(checker_mod.Violation(
            self.seed, step or self.step_label,
            time.monotonic() - self.started, invariant, subject, evidence,
            outside))

    # Start and stop -------------------------------------------------------

    def setup(self) -> None:
        self.proxy.setUp()
        # Only the last requests are kept: a long run sends many.
        self.proxy.requests = collections.deque(maxlen=200)  # type: ignore
        self.dep.ironic_catalog_url = self.proxy.url
        self.dep.amqp_port = self.amqp.start()
        self.dep.start()
        self.say('deployment up (%s)' % ', '.join(
            '%s %.0fs' % kv for kv in self.dep.timings.items()))
        self.cli('flavor', 'create', '--id', FLAVOR, '--ram', '1024',
                 '--vcpus', '1', '--disk', '10',
                 '--property', 'resources:CUSTOM_BAREMETAL=1',
                 '--property', 'resources:VCPU=0',
                 '--property', 'resources:MEMORY_MB=0',
                 '--property', 'resources:DISK_GB=0', FLAVOR)
        self.cli('quota', 'set', '--instances', '-1', '--cores', '-1',
                 '--ram', '-1', keystone.DEMO_PROJECT)
        self.dep.nova_ironic_multi(
            {'partition_key': 'g1', 'peer_list': 'host1,host2'},
            'shards', 'apply', '--count', str(SHARDS))
        auth = ks_v3.Password(
            auth_url=self.dep.keystone.auth_url, username=keystone.DEMO[0],
            password=keystone.DEMO[1], user_domain_name=keystone.DOMAIN,
            project_name=keystone.DEMO_PROJECT,
            project_domain_name=keystone.DOMAIN)
        session = ks_session.Session(auth=auth)
        compute = ks_adapter.Adapter(
            session, service_type='compute', interface='public',
            region_name=keystone.REGION,
            default_microversion=deployment.COMPUTE_VERSION)
        followers = {h: observe.LogFollower(c.process.log_path)
                     for h, c in self.dep.computes.items()}
        self.checker = checker_mod.Checker(
            self.seed, self.dbs, followers, self._state, self._dead,
            self.started, self._report)
        self.workload = workload.Workload(
            self.seed, self.profile.pace, self.fleet, compute,
            # (The demo user's session is scoped to its project.)
            cast(str, session.get_project_id()), self.dbs,
            self.dep.image_id, FLAVOR,
            lambda: self.step_label, lambda: self.last_fault,
            self.violation, self.unsafe)
        self.checker.start()
        self.transition('ready')
        self.wait_converged()

    def teardown(self) -> list[str]:
        if self.workload is not None:
            self.workload.stop()
        if self.checker is not None:
            self.checker.stop()
        with_proxy = []
        try:
            self.proxy.cleanUp()
        except Exception as e:
            with_proxy.append('fault proxy: %s' % e)
        problems = self.dep.stop() + with_proxy
        self.amqp.stop()
        return problems

    # What the checker needs ------------------------------------------------

    def _state(self) -> tuple[dict[str, invariants.HostConfig], set[str],
                              set[str]]:
        running = {h for h, c in self.dep.computes.items()
                   if c.process.running() and
                   c.process.name not in self.intended_down}
        return (dict(self.configs), running,
                set(self.nodes) - self.groups_down)

    def _dead(self) -> list[invariants.Problem]:
        out = []
        for proc in self.dep.all_processes():
            if (proc.proc is None or proc.running() or
                    proc.name in self.intended_down):
                continue
            out.append(invariants.Problem(
                'services keep running', proc.name,
                'exited with status %s unasked: %s' % (
                    proc.returncode, proc.tail(15)), None, str(proc.pid)))
        return out

    def unsafe(self) -> set[str]:
        """Computes not to send actions to: stopped, starting, not live."""
        out = set(self.unsafe_hosts)
        out.update(h for h, c in self.dep.computes.items()
                   if not c.process.running())
        snap = self.checker.last_snapshot if self.checker else None
        if snap is not None:
            out.update(h for h, s in snap.services.items()
                       if not s.live(invariants.DOWN_TIME))
        return out

    # Told by the faults ----------------------------------------------------

    def quiesce(self, host: str, timeout: float = 30) -> None:
        """No more actions for ``host``, and those sent have begun."""
        assert self.workload is not None
        self.unsafe_hosts.add(host)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not self.workload.unstarted(host):
                    return
            except Exception as e:
                self.say('quiesce %s: %s' % (host, e))
            self.sleep(1)
        self.say('quiesce %s: requests still queued after %.0fs'
                 % (host, timeout))

    def release(self, host: str, since: float,
                timeout: float = 180) -> None:
        """Actions may go to ``host`` again once it ran a period.

        :param since: the wall time of its start.
        """
        assert self.checker is not None
        follower = self.checker.followers[host]
        proc = self.dep.computes[host].process
        try:
            processes.wait_for(
                '%s to run a period after its start' % host,
                lambda: (follower.last is not None and
                         follower.last.at >= since),
                timeout, alive=[proc])
        except (processes.Timeout, processes.ProcessDied) as e:
            self.violation('a started compute runs its periods', host,
                           str(e)[-1000:])
        self.unsafe_hosts.discard(host)


    def disrupt(self) -> None:
        self.last_fault = time.monotonic()
        assert self.checker is not None
        self.checker.disrupt(self.step_label)

    def transition(self, label: str) -> None:
        self.last_fault = time.monotonic()
        assert self.checker is not None
        self.checker.transition(self.step_label, '%s: %s' % (self.kind,
                                                             label))

    def set_config(self, host: str, **options: str) -> None:
        conf = dataclasses.asdict(self.configs[host])
        for key, value in options.items():
            conf[key] = (tuple(value.split(',')) if key == 'peer_list'
                         else value)
        self.configs[host] = invariants.HostConfig(**conf)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self._restart_crashed()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(1.0, left))

    def _restart_crashed(self) -> None:
        for proc in self.dep.all_processes():
            if (proc.proc is None or proc.running() or
                    proc.name in self.intended_down):
                continue
            # The checker reports it (once per process); start it again
            # so that the run goes on.
            time.sleep(2 * checker_mod.SAMPLE_INTERVAL)
            self.crashes[proc.name] += 1
            self.say('%s exited unasked (status %s); starting it again'
                     % (proc.name, proc.returncode))
            proc.start()

    def cli(self, *args: str) -> Any:
        try:
            return self.dep.openstack('admin', *args)
        except (deployment.CLIError, OSError) as e:
            self.violation('operator commands work', ' '.join(args[:3]),
                           str(e)[-500:])
            return None

    def wait_service_up(self, host: str, timeout: float = 120) -> None:
        proc = self.dep.computes[host].process
        try:
            processes.wait_for(
                '%s to report up' % host,
                lambda: self.dbs.rows(
                    'nova', "SELECT 1 FROM services WHERE host = %s AND "
                    "\"binary\" = 'nova-compute' AND deleted = 0 AND "
                    "extract(epoch from timezone('utc', now()) - "
                    'coalesce(last_seen_up, created_at)) < %s',
                    (host, invariants.DOWN_TIME)), timeout, alive=[proc])
        except (processes.Timeout, processes.ProcessDied) as e:
            self.violation('a started compute reports up', host, str(e))

    def wait_log(self, host: str, pattern: str, since: int,
                 what: str, timeout: float = 30,
                 invariant: str = 'invalid reloads are refused') -> None:
        proc = self.dep.computes[host].process
        try:
            processes.wait_for(
                what, lambda: re.search(pattern, proc.log_text(since)),
                timeout, interval=0.5)
        except processes.Timeout as e:
            self.violation(invariant, host, str(e))

    def online_groups(self) -> set[str]:
        return {r[0] for r in self.dbs.rows(
            'ironic', 'SELECT conductor_group FROM conductors WHERE online')}

    def drain(self, host: str, timeout: float = 180) -> None:
        assert self.workload is not None
        uuids = [r[0] for r in self.dbs.rows(
            'nova', 'SELECT uuid FROM instances WHERE host = %s AND '
            'deleted = 0', (host,))]
        if not uuids:
            return
        self.say('draining %s: deleting %d server(s)' % (host, len(uuids)))
        requests = self.workload.delete(uuids)
        deadline = time.monotonic() + timeout
        while (time.monotonic() < deadline and
               any(r.outcome is None for r in requests)):
            self.sleep(1)

    def wait_converged(self, timeout: float = CONVERGE_TIMEOUT) -> float:
        assert self.checker is not None
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.checker.converged():
                return time.monotonic() - started
            self.sleep(1)
        self.violation('converges after a fault', self.kind,
                       'not converged %.0fs after the last transition: %s'
                       % (timeout, '; '.join(self.checker.why_not())[:3000]))
        return timeout

    # The run --------------------------------------------------------------

    def run(self) -> Result:
        assert self.checker is not None and self.workload is not None
        seconds = self.minutes * 60
        plan = schedule.plan(self.seed, self.profile, seconds)
        self.say('seed %d, profile %s, %.1f minutes; the schedule (a run '
                 'goes as far as time allows):' % (self.seed,
                                                   self.profile.name,
                                                   self.minutes))
        for step in plan:
            self.say('  ' + step.describe())
        self.workload.start()
        begin = time.monotonic()
        for step in schedule.steps(self.seed, self.profile):
            if time.monotonic() - begin + step.gap + step.hold > seconds:
                break
            self.step_label, self.kind = 'traffic before #%d' % step.index, \
                'traffic'
            self.sleep(step.gap)
            self.step_label = '#%d %s' % (step.index, step.kind)
            self.kind = step.kind
            self.say('step ' + step.describe())
            try:
                faults.run(self, step)
            except Exception as e:
                self.violation('the fault is applied and lifted', step.kind,
                               '%s: %s' % (type(e).__name__, e))
            self.executed.append(step)
            took = self.wait_converged()
            self.say('step #%d converged after %.1fs' % (step.index, took))
        self.settle()
        return self.result()

    def settle(self) -> None:
        assert self.checker is not None and self.workload is not None
        self.step_label, self.kind = 'settle', 'settle'
        self.say('settling: no more requests; waiting for the %d under way'
                 % len(self.workload.pending()))
        self.workload.stop_sending()
        deadline = time.monotonic() + max(workload.BOUNDS.values())
        while self.workload.pending() and time.monotonic() < deadline:
            self.sleep(1)
        self.transition('traffic stopped')
        self.wait_converged()
        self.final_check('with servers')
        servers = [s.uuid for s in self.workload.servers()]
        self.say('deleting the %d servers left' % len(servers))
        self.step_label, self.kind = 'cleanup', 'cleanup'
        requests = self.workload.delete(servers, kind='delete')
        deadline = time.monotonic() + workload.BOUNDS['delete']
        while (any(r.outcome is None for r in requests) and
               time.monotonic() < deadline):
            self.sleep(1)
        self.transition('servers deleted')
        self.wait_converged()
        self.final_check('servers deleted')
        self.workload.stop()

    def final_check(self, label: str) -> None:
        """Every problem gone within the longest grace, else a violation."""
        assert self.checker is not None and self.workload is not None
        deadline = time.monotonic() + SETTLE_TIMEOUT
        problems: list[invariants.Problem] = []
        while time.monotonic() < deadline:
            try:
                problems = self.checker.sample()
            except Exception as e:
                problems = [invariants.Problem(
                    'the checker reads', 'databases', str(e), 0)]
            if not problems:
                break
            self.sleep(checker_mod.SAMPLE_INTERVAL)
        for p in problems:
            self.violation('at the end (%s): %s' % (label, p.invariant),
                           p.subject, p.evidence, outside=p.outside)
        for s in self.workload.servers():
            if s.task_state is not None or s.status in ('BUILD',):
                self.violation('at the end (%s): no server stuck' % label,
                               s.uuid, '%s, task state %s, host %s, node %s'
                               % (s.status, s.task_state, s.host, s.node),
                               outside=workload.outside([s]))
        self.say('final check (%s): %d problem(s)' % (label, len(problems)))

    def result(self) -> Result:
        assert self.checker is not None and self.workload is not None
        requests: dict[str, dict[str, int]] = {}
        for r in self.workload.requests:
            by = requests.setdefault(r.kind, {})
            by[r.outcome or 'stuck'] = by.get(r.outcome or 'stuck', 0) + 1
        fault_counts = collections.Counter(s.kind for s in self.executed)
        converge = self.checker.convergence_figures()
        unconverged = collections.Counter(self.checker.unconverged())
        cut_short = collections.Counter(self.checker.cut_short())
        violations = [v.describe() for v in self.violations]
        outside = [v.describe() for v in self.outside]
        header = ('nova-ironic-multi soak: seed %d, profile %s, %.1f '
                  'minutes of faults, %d steps, %d requests (%d servers '
                  'asked for)' % (
                      self.seed, self.profile.name, self.minutes,
                      len(self.executed), len(self.workload.requests),
                      sum(r.size for r in self.workload.requests)))
        followers = self.checker.followers
        notes: dict[str, Any] = {
            'computes': {h: dict(f.counts) for h, f in followers.items()},
            'errors': {h: dict(sorted(f.errors.items(),
                                      key=lambda kv: -kv[1])[:15])
                       for h, f in followers.items()},
            'restarted after a crash': dict(self.crashes),
            'database connections terminated': self.terminated,
            'checker samples': self.checker.samples,
            'checker samples lost': self.checker.failed_samples,
            'request outcomes': self._details(),
        }
        return Result(
            self.seed, self.profile.name, self.minutes,
            [s.describe() for s in self.executed], requests,
            dict(fault_counts), converge, dict(unconverged),
            dict(cut_short), violations,
            report.table(requests, fault_counts, converge, unconverged,
                         violations, header, cut_short,
                         notes['request outcomes'], outside),
            outside, notes, self.run_dir)

    def _details(self) -> dict[str, int]:
        """How often each cause ended a request (masked)."""
        assert self.workload is not None
        out: collections.Counter[str] = collections.Counter()
        for r in self.workload.requests:
            if r.outcome not in (None, 'ok'):
                out['%s %s: %s' % (r.kind, r.outcome, observe.UUIDS.sub(
                    '#', r.detail)[:150])] += 1
        return dict(out.most_common(40))


def run(seed: int, minutes: float, profile: str, run_dir: str,
        out: TextIO = sys.stdout,
        keep: Callable[[Result | None], bool] = lambda r: True
        ) -> Result | None:
    """Set up, soak, tear down; the result (None if it never started)."""
    soak = Soak(seed, minutes, profile, run_dir, out)
    result = None
    try:
        soak.setup()
        result = soak.run()
        return result
    finally:
        problems = soak.teardown()
        if problems:
            soak.say('clean-up problems: %s' % problems)
        if not keep(result):
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            soak.say('run directory kept: %s' % run_dir)
