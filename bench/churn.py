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
"""How many other free nodes change host when a server boots or is deleted.

Each such move is a compute node changing host in nova: the window nova's
rebalance bugs lived in. The target is none, at 10^3 nodes / 10 hosts and
10^4 / 100, for both rings. A third of the nodes start deployed; then
``--steps`` boots and as many deletes, each followed by every host's
division. Shown side by side: the division the driver makes (the ring
divides every node in scope, ``ownership.select``) and the one it made
before (the ring saw only the free nodes), with the free-node balance
(largest share of free nodes over the mean) of each, and the free nodes
that two hosts claimed or none did, counted at every step (each would be a
compute node reported twice, or by nobody).

Usage: ``tox -e bench -- churn [--steps 50] [--sizes 1e3x10,1e4x100]``.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
from typing import NamedTuple

from bench import common
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi import rings

SIZES = [(10 ** 3, 10), (10 ** 4, 100)]


class Node:
    __slots__ = ('uuid', 'instance_uuid', 'conductor_group', 'shard')

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        self.instance_uuid: str | None = None
        self.conductor_group: str | None = None
        self.shard: str | None = None


class Division(NamedTuple):
    #: free node -> its one manager (nodes with none or several left out)
    managers: dict[str, str]
    #: free nodes two or more hosts claimed, and free nodes nobody claimed
    doubled: int
    unmanaged: int


def division(nodes: list[Node], owner: dict[str, str], ring: rings.Ring,
             members: list[str], free_only: bool) -> Division:
    """Who manages each free node, over every host's ``ownership.select``.

    Every claim is kept: a node two hosts claim is counted, never settled
    in favour of the first host asked.
    """
    def ring_select(uuids: list[str], me: str) -> list[str]:
        if free_only:   # the previous behaviour: the ring saw free nodes
            uuids = [n.uuid for n in nodes if n.instance_uuid is None]
        return ring.select(uuids, me)

    claims: dict[str, set[str]] = collections.defaultdict(set)
    for host in members:
        mine = {i for i, h in owner.items() if h == host}
        for u in ownership.select(nodes, mine, ring_select, host,
                                  partition.Scope()).owned:
            claims[u].add(host)
    free = [n.uuid for n in nodes if n.instance_uuid is None]
    return Division(
        {u: next(iter(claims[u])) for u in free if len(claims[u]) == 1},
        sum(1 for u in free if len(claims[u]) > 1),
        sum(1 for u in free if not claims[u]))


class Result(NamedTuple):
    moved: float       # other free nodes moved per boot or delete
    steps: int
    p2m: float         # free-node balance at the end
    doubled: int       # free nodes claimed by two hosts, over all steps
    unmanaged: int     # free nodes claimed by none, over all steps


def run(n_nodes: int, n_hosts: int, algorithm: str, free_only: bool,
        steps: int) -> Result:
    rnd = random.Random(34)
    members = ['compute-%04d' % i for i in range(n_hosts)]
    ring = rings.load(algorithm, members, 5)
    nodes = [Node(u) for u in common.random_uuids(n_nodes)]
    owner: dict[str, str] = {}
    for i, node in enumerate(nodes[::3]):
        node.instance_uuid = 'seed-%d' % i
        owner[node.instance_uuid] = rnd.choice(members)
    before = division(nodes, owner, ring, members, free_only)
    doubled, unmanaged = before.doubled, before.unmanaged
    moved = 0
    for step in range(2 * steps):
        booting = step < steps
        candidates = [n for n in nodes
                      if (n.instance_uuid is None) == booting]
        node = rnd.choice(candidates)
        if booting:   # nova places the server on the node's manager
            node.instance_uuid = 'boot-%d' % step
            manager = before.managers.get(node.uuid)
            if manager is None:   # claimed twice or by nobody (counted)
                manager = rnd.choice(members)
            owner[node.instance_uuid] = manager
        else:
            owner.pop(node.instance_uuid or '')
            node.instance_uuid = None
        after = division(nodes, owner, ring, members, free_only)
        doubled += after.doubled
        unmanaged += after.unmanaged
        moved += sum(1 for u, h in after.managers.items()
                     if u != node.uuid and before.managers.get(u, h) != h)
        before = after
    shares = [0] * n_hosts
    index = {m: i for i, m in enumerate(members)}
    for host in before.managers.values():
        shares[index[host]] += 1
    p2m = max(shares) / (len(before.managers) / n_hosts)
    return Result(moved / (2 * steps), 2 * steps, p2m, doubled, unmanaged)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench churn')
    parser.add_argument('--steps', type=int, default=20,
                        help='boots, and as many deletes, per size')
    parser.add_argument('--sizes', help='nodes x hosts, comma-separated '
                        '(default 1e3x10,1e4x100)')
    args = parser.parse_args(argv)
    sizes = SIZES
    if args.sizes:
        sizes = [(int(float(n)), int(h)) for n, h in
                 (s.split('x') for s in args.sizes.split(','))]
    print('Machine: %s' % common.machine())
    rows, verdicts = [], []
    for n_nodes, n_hosts in sizes:
        for algorithm in ('compatible', 'balanced'):
            for free_only in (True, False):
                r = run(n_nodes, n_hosts, algorithm, free_only, args.steps)
                label = 'before (free nodes)' if free_only else (
                    'now (every node in scope)')
                rows.append(['%.0e' % n_nodes, str(n_hosts), algorithm,
                             label, str(r.steps), '%.2f' % r.moved,
                             '%.3f' % r.p2m, str(r.doubled),
                             str(r.unmanaged)])
                if not free_only:
                    ok = r.moved == 0 and not r.doubled and not r.unmanaged
                    verdicts.append(
                        '%s %.0e x %d: %.2f other nodes moved per boot or '
                        'delete (target 0), %d free nodes claimed twice and '
                        '%d by nobody over all steps (target 0) %s' % (
                            algorithm, n_nodes, n_hosts, r.moved, r.doubled,
                            r.unmanaged, 'met' if ok else 'MISSED'))
                print('  %s %s done' % (algorithm, label), file=sys.stderr,
                      flush=True)
    print(common.table(['nodes', 'hosts', 'ring', 'ring input', 'steps',
                        'moved/step', 'free p2m', 'claimed twice',
                        'unmanaged'], rows))
    print()
    print('Targets (issue 12 item 5):')
    for v in verdicts:
        print('  ' + v)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
