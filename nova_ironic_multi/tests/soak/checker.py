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
"""The checker: samples the deployment, turns lasting problems into
violations, and times how long the deployment takes to converge.

Quiet. The deployment is quiet when no disruptive fault is under way
(Keystone, Ironic or RabbitMQ gone, ...). A transition (a fault applied in
a state the deployment must handle, or lifted) and any change in what the
division depends on (a host's liveness, enabled or forced down flags, the
partitions) restart the quiet clock: the graces count from there.

What each compute did. Every period nova's resource tracker on each
compute logs a line per node it reports; the checker reads them, so it
knows which hosts reported each node lately, and holds that against the
facts (:func:`invariants.reporting_problems`): never the product's own
division. A running, live compute that logs no period for a while fails
too.

Convergence. After a transition, the first sample where every running
compute that should be up is up (and those that should not be are seen
down), every running compute has logged a period since, each node is
reported as :func:`invariants.reporting_problems` wants and nova's row
names that host, a fenced or drained host's instances are on live hosts,
and no grace problem is left: that is the time the transition took to
converge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import threading
import time
import traceback
from typing import Any

from nova_ironic_multi.tests.soak import invariants
from nova_ironic_multi.tests.soak import observe

SAMPLE_INTERVAL = 2.0
#: A running, live compute logs a period at least this often.
STALL = 3 * invariants.PERIOD


@dataclasses.dataclass
class Violation:
    seed: int
    step: str
    at: float            # seconds since the start of the soak
    invariant: str
    subject: str
    evidence: str
    #: Not the driver's: the service at fault (see ``Problem.outside``).
    outside: str = ''

    def describe(self) -> str:
        return ('%s seed=%d step=%s t=%.0fs [%s] %s: %s'
                % ('OUTSIDE THE DRIVER (%s)' % self.outside if self.outside
                   else 'VIOLATION', self.seed, self.step, self.at,
                   self.invariant, self.subject, self.evidence))


@dataclasses.dataclass
class Convergence:
    label: str
    started: float
    finished: float | None = None
    #: Another transition came before it converged (not counted).
    interrupted: bool = False

    @property
    def seconds(self) -> float | None:
        if self.finished is None:
            return None
        return self.finished - self.started


class Checker:
    """Samples in a thread of its own; see the module docstring."""

    def __init__(self, seed: int, dbs: observe.Databases,
                 followers: Mapping[str, observe.LogFollower],
                 state: Callable[[], tuple[dict[str, invariants.HostConfig],
                                           set[str], set[str]]],
                 extra: Callable[[], list[invariants.Problem]],
                 started: float, report: Callable[[Violation], None]) -> None:
        """
        :param state: () -> (partitions in force, running computes,
            conductor groups that should be online).
        :param extra: more problems (processes that died).
        """
        self.seed = seed
        self.dbs = dbs
        self.followers = dict(followers)
        self.state = state
        self.extra = extra
        self.started = started
        self.report = report
        self.tracker = invariants.Tracker()
        self.lock = threading.Lock()
        self.step = 'start'
        self.disrupted = False
        self.quiet_since: float = time.monotonic()
        self.quiet_wall: float = time.time()
        self._signature: Any = None
        self.known_providers: dict[str, int] = {}
        self.convergences: list[Convergence] = []
        self.pending: Convergence | None = None
        self.samples = 0
        self.failed_samples = 0
        self.last_error = ''
        self.last_problems: list[invariants.Problem] = []
        self.last_snapshot: observe.Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # Told by the fault schedule -----------------------------------------

    def disrupt(self, step: str) -> None:
        """A disruptive fault starts: graces stop counting."""
        with self.lock:
            self.step = step
            self.disrupted = True
            if self.pending is not None:
                self.pending.interrupted = True
                self.pending = None

    def transition(self, step: str, label: str) -> None:
        """A state the deployment must handle from now on: time it."""
        with self.lock:
            self.step = step
            self.disrupted = False
            self._quiet()
            if self.pending is not None:
                self.pending.interrupted = True
            self.pending = Convergence(label, time.monotonic())
            self.convergences.append(self.pending)

    def converged(self) -> bool:
        with self.lock:
            return self.pending is None or self.pending.finished is not None

    def _quiet(self) -> None:
        self.quiet_since = time.monotonic()
        self.quiet_wall = time.time()

    # Sampling -------------------------------------------------------------

    def start(self) -> None:
        for follower in self.followers.values():
            follower.skip_to_end()
        self._thread = threading.Thread(target=self._run, name='checker',
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            try:
                self.sample()
            except Exception as e:
                # A database fault ends the checker's query too: that
                # sample is lost, the next one is taken.
                self.failed_samples += 1
                self.last_error = '%s: %s' % (type(e).__name__, e)
                if self.failed_samples % 20 == 1:
                    traceback.print_exc()

    def sample(self) -> list[invariants.Problem]:
        configs, running, groups = self.state()
        snap = self.dbs.snapshot()
        for follower in self.followers.values():
            follower.poll()
        now = time.monotonic()
        wall = time.time()
        with self.lock:
            self.samples += 1
            self.last_snapshot = snap
            signature = (
                tuple(sorted((h, s.live(invariants.DOWN_TIME))
                             for h, s in snap.services.items())),
                tuple(sorted(running)), tuple(sorted(configs.items())))
            if signature != self._signature:
                self._signature = signature
                self._quiet()
            for rp in snap.providers:
                if rp.name in snap.nodes:
                    self.known_providers.setdefault(rp.name, rp.id)
            must = invariants.should_be_managed(snap, configs, running)
            reported = {h: self.followers[h].reported(
                wall, invariants.REPORT_WINDOW) for h in running}
            problems = (
                invariants.rows_and_providers(snap, self.known_providers) +
                invariants.reporting_problems(snap, configs, running,
                                              reported, must) +
                self._period_problems(running, snap, wall) +
                invariants.stranded_problems(snap, configs, running) +
                invariants.task_state_problems(snap) +
                invariants.ironic_problems(snap) +
                invariants.allocation_problems(snap) + self.extra())
            quiet = None if self.disrupted else self.quiet_since
            for p in self.tracker.update(problems, now, quiet):
                self.report(Violation(self.seed, self.step,
                                      now - self.started, p.invariant,
                                      p.subject, p.evidence, p.outside))
            self.last_problems = problems
            if (self.pending is not None and self.pending.finished is None
                    and not self.disrupted and self._settled(
                        snap, problems, configs, running, groups)):
                self.pending.finished = now
                self.pending = None
            return problems

    def _period_problems(self, running: set[str], snap: observe.Snapshot,
                         wall: float) -> list[invariants.Problem]:
        problems = []
        for host in sorted(running):
            follower = self.followers[host]
            last = follower.last
            service = snap.services.get(host)
            live = service is not None and service.live(invariants.DOWN_TIME)
            if last is None or last.at < self.quiet_wall:
                if live and wall - self.quiet_wall > STALL:
                    problems.append(invariants.Problem(
                        'periods go on', host,
                        'no resource-tracker period logged for %.0fs'
                        % (wall - max(self.quiet_wall,
                                      last.at if last else 0)),
                        invariants.DIVISION_GRACE))
                continue
            if live and wall - last.at > STALL:
                problems.append(invariants.Problem(
                    'periods go on', host, 'last period logged %.0fs ago: %s'
                    % (wall - last.at, last.line[-200:]),
                    invariants.DIVISION_GRACE))
        return problems

    def _settled(self, snap: observe.Snapshot,
                 problems: list[invariants.Problem],
                 configs: Mapping[str, invariants.HostConfig],
                 running: set[str], groups: set[str]) -> bool:
        return not self.unsettled(snap, problems, configs, running, groups)

    def unsettled(self, snap: observe.Snapshot,
                  problems: list[invariants.Problem],
                  configs: Mapping[str, invariants.HostConfig],
                  running: set[str], groups: set[str]) -> list[str]:
        """Why the deployment has not converged (nothing: it has)."""
        why = []
        # Running computes report up; stopped ones are seen down (their
        # peers act on that).
        for host in sorted(configs):
            service = snap.services.get(host)
            if service is None:
                why.append('%s has no service record' % host)
            elif service.up(invariants.DOWN_TIME) != (host in running):
                why.append('%s is %s (last heartbeat %.0fs ago)' % (
                    host, 'up' if host not in running else 'not up yet',
                    service.age))
        for host in sorted(running):
            last = self.followers[host].last
            if last is None or last.at < self.quiet_wall:
                why.append('%s has logged no period since' % host)
        if not groups <= snap.conductor_groups:
            why.append('no conductor online for %s' % sorted(
                groups - snap.conductor_groups))
        division = ('reported by one host', 'reported within scope',
                    "reported by its instance's host",
                    'reported by a live host',
                    'compute node of the reporting host', 'periods go on',
                    'instances on a live host')
        why += ['%s: %s' % (p.invariant, p.evidence) for p in problems
                if p.invariant in division]
        return why

    def why_not(self) -> list[str]:
        """Why the last sample was not converged."""
        snap = self.last_snapshot
        if snap is None:
            return ['no sample taken (%s)' % self.last_error]
        configs, running, groups = self.state()
        with self.lock:
            return self.unsettled(snap, self.last_problems, configs,
                                  running, groups)

    # Figures ---------------------------------------------------------------

    def convergence_figures(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for c in self.convergences:
            if c.seconds is not None and not c.interrupted:
                out.setdefault(c.label, []).append(c.seconds)
        return out

    def unconverged(self) -> list[str]:
        return [c.label for c in self.convergences
                if c.finished is None and not c.interrupted]

    def cut_short(self) -> list[str]:
        """Transitions the next one came before they converged.

        (A fault held shorter than the deployment takes to settle in it.)
        """
        return [c.label for c in self.convergences
                if c.finished is None and c.interrupted]
