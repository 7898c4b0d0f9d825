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
"""The fault schedule: a pure function of the seed and the profile.

Faults come one at a time: a quiet gap (traffic only), the fault, held for
a while, then lifted; the next step starts once the deployment converged
(or the bound for that ran out). The kinds are drawn in rounds: each round
is a seeded permutation of every kind, so a run long enough for one round
meets every kind, and a short run meets the first few of the seed's order.
Targets, held times, gaps and the variant of each kind are drawn from the
same generator: the same seed and profile give the same steps, printed at
the start of the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
import dataclasses
import random

#: Every kind of fault, with what it does (the table's row names).
KINDS: dict[str, str] = {
    'kill-compute': 'kill -9 a nova-compute, start it again',
    'sigterm-compute': 'SIGTERM a nova-compute (graceful), start it again',
    'fence': 'kill -9 a nova-compute, force it down (takeover = fenced), '
             'start it, force it up',
    'scale-in': 'SIGTERM a nova-compute with drain_on_stop = true (its '
                'instances handed over), start it again without',
    'sighup-peers': 'SIGHUP: host2 leaves the peer list of g1, then back',
    'sighup-group': 'SIGHUP: host3 (drained, disabled) moves from g2 to g1, '
                    'then back',
    'sighup-divide': 'SIGHUP: every host to divide = shards, then nodes',
    'sighup-invalid': 'SIGHUP with a value the options refuse, then the '
                      'good file again',
    'ironic-conductor': 'kill -9 an ironic-conductor, start it again',
    'ironic-api': 'stop ironic-api (SIGTERM), start it again',
    'rabbitmq': "RabbitMQ gone for the deployment's vhost: connections "
                'closed and refused, queues deleted, then allowed again',
    'database': "pg_terminate_backend on every connection to nova's and "
                "placement's databases, a few times",
    'keystone': 'Keystone stopped, then started',
    'ironic-503': 'Ironic answers 503 to every request of the computes '
                  '(fault proxy)',
}

COMPUTES = ('host1', 'host2', 'host3')
#: Hosts with a peer in their conductor group: a fenced one's instances
#: have somewhere to go.
FENCEABLE = ('host1', 'host2')
CONDUCTOR_GROUPS = ('g1', 'g2')
#: Values each option refuses (each is one invalid SIGHUP).
INVALID = (
    ('partition_key', 'not valid!'),
    ('divide', 'sideways'),
    ('takeover', 'sometimes'),
    ('membership_driver', 'no-such-driver'),
)


@dataclasses.dataclass(frozen=True)
class Profile:
    """How long things last, in seconds, as ``(low, high)`` ranges."""

    name: str
    gap: tuple[float, float]
    #: How long a compute stays dead; past ``service_down_time`` (10 s) its
    #: peers take its free nodes.
    compute_down: tuple[float, float]
    hold: tuple[float, float]
    #: The client's pause between two requests.
    pace: tuple[float, float]


PROFILES = {
    'short': Profile('short', gap=(3, 8), compute_down=(8, 20),
                     hold=(6, 14), pace=(1.5, 4.0)),
    'long': Profile('long', gap=(10, 40), compute_down=(5, 45),
                    hold=(10, 40), pace=(2.0, 6.0)),
}


@dataclasses.dataclass(frozen=True)
class Step:
    index: int
    kind: str
    #: The host, conductor group or option the fault acts on ('' if none).
    target: str
    #: Seconds of traffic before the fault.
    gap: float
    #: Seconds the fault lasts before it is lifted.
    hold: float
    #: Kind-specific detail (an invalid value, a number of repeats).
    detail: str = ''

    def describe(self) -> str:
        what = self.kind
        if self.target:
            what += ' ' + self.target
        if self.detail:
            what += ' (%s)' % self.detail
        return '#%d after %.0fs: %s, held %.0fs' % (self.index, self.gap,
                                                   what, self.hold)


def _uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    return round(rng.uniform(*bounds), 1)


def _step(rng: random.Random, index: int, kind: str,
          profile: Profile) -> Step:
    gap = _uniform(rng, profile.gap)
    hold = _uniform(rng, profile.hold)
    target = detail = ''
    if kind in ('kill-compute', 'sigterm-compute'):
        target = rng.choice(COMPUTES)
        hold = _uniform(rng, profile.compute_down)
    elif kind in ('fence', 'scale-in'):
        target = rng.choice(FENCEABLE)
        # Down long enough for nova to see it, and for a takeover.
        hold = max(hold, 12.0)
    elif kind == 'sighup-invalid':
        target = rng.choice(COMPUTES)
        option, value = rng.choice(INVALID)
        detail = '%s = %s' % (option, value)
    elif kind == 'ironic-conductor':
        target = rng.choice(CONDUCTOR_GROUPS)
    elif kind == 'database':
        detail = '%d times' % rng.randint(1, 3)
    return Step(index, kind, target, gap, hold, detail)


def steps(seed: int, profile: Profile,
          kinds: Sequence[str] = tuple(KINDS)) -> Iterator[Step]:
    """The endless schedule of ``seed``: rounds of every kind, permuted."""
    rng = random.Random('nim-soak-faults:%d:%s' % (seed, profile.name))
    index = 0
    while True:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            index += 1
            yield _step(rng, index, kind, profile)


def plan(seed: int, profile: Profile, seconds: float) -> list[Step]:
    """The steps whose gaps and holds alone fit in ``seconds``.

    A run executes a prefix of this (convergence takes time too); the
    list is what the run prints as its schedule.
    """
    out: list[Step] = []
    total = 0.0
    for step in steps(seed, profile):
        total += step.gap + step.hold
        if out and total > seconds:
            break
        out.append(step)
    return out
