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
"""The pure ring benchmark, side by side with tooz's HashRing.

For each size (nodes x hosts) and algorithm, in one run:

* build  -- building the ring for a member set (cached per member set in
  the driver, so reported apart), median of several runs;
* own    -- one host working out the nodes it manages (what every service
  does every period), median of several runs, and its ratio to tooz's
  ``HashRing(members, partitions=32)`` doing the same the way nova's
  in-tree driver does (``host in ring.get_nodes(uuid)`` per node);
* p2m    -- the largest share over the mean share;
* join / leave -- nodes that change hands when one host joins or leaves,
  over the ideal (nodes / hosts);
* mem    -- peak memory traced while building and selecting, in one more
  run of each: no timed run is traced, for tooz or for this package's
  rings, since tracing slows tooz's allocation-heavy lookups about 3x.

Usage: ``tox -e bench -- rings [--quick] [--sizes 1e5x100,1e6x1000]``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
from typing import Any

from tooz import hashring

from bench import common
from nova_ironic_multi import rings

ALGORITHMS = ('compatible', 'balanced')
FULL_SIZES = [(n, h) for n in (10 ** 4, 10 ** 5, 10 ** 6)
              for h in (3, 10, 100, 1000)]
QUICK_SIZES = [(10 ** 4, 3), (10 ** 4, 100), (10 ** 5, 100)]

# (algorithm, nodes, hosts) -> (bound on own/tooz, bound on p2m, on moves)
TARGETS = {
    ('compatible', 10 ** 5, 100): (0.2, None, None),
    ('balanced', 10 ** 5, 100): (0.05, 1.02, 1.2),
    ('balanced', 10 ** 6, 1000): (0.02, 1.05, 1.2),
}


class ToozRing:
    """tooz's HashRing behind the same calls, used the in-tree way."""

    name = 'tooz'

    def __init__(self, members: list[str], exponent: int) -> None:
        self.ring = hashring.HashRing(members, partitions=2 ** exponent)

    def select(self, nodes: list[str], member: str) -> list[str]:
        get = self.ring.get_nodes
        return [n for n in nodes if member in get(n.encode('utf-8'))]

    def assign(self, nodes: list[str]) -> dict[str, str]:
        get = self.ring.get_nodes
        return {n: next(iter(get(n.encode('utf-8')))) for n in nodes}


def build(algorithm: str, members: list[str]) -> Any:
    if algorithm == 'tooz':
        return ToozRing(members, 5)
    return rings.load(algorithm, members, 5)


def moved(before: dict[str, str], after: dict[str, str]) -> int:
    return sum(1 for n, h in before.items() if after[n] != h)


def run_size(n_nodes: int, n_hosts: int, nodes: list[str],
             repeat: int) -> list[dict[str, Any]]:
    members = ['compute-%04d' % i for i in range(n_hosts)]
    me = members[len(members) // 2]
    results: list[dict[str, Any]] = []
    tooz_base: dict[str, str] = {}
    for algorithm in ('tooz',) + ALGORITHMS:
        # Every ring, tooz's included, is timed the same way: the median
        # of untraced runs (memory comes from one more, traced, run).
        built = common.median_of(functools.partial(build, algorithm, members),
                                 repeat)
        ring = built.value
        own = common.median_of(functools.partial(ring.select, nodes, me),
                               repeat)
        base = ring.assign(nodes)
        counts = collections.Counter(base.values())
        joined = build(algorithm, members + ['compute-new']).assign(nodes)
        left = build(algorithm, members[1:]).assign(nodes)
        results.append({
            'algorithm': algorithm, 'nodes': n_nodes, 'hosts': n_hosts,
            'build': built.wall, 'own': own.wall, 'own_cpu': own.cpu,
            'p2m': max(counts.values()) / (n_nodes / n_hosts),
            'join': moved(base, joined) / (n_nodes / (n_hosts + 1)),
            'leave': moved(base, left) / (n_nodes / n_hosts),
            'mem': max(built.peak_bytes, own.peak_bytes),
            'same_as_tooz': None,
        })
        if algorithm == 'compatible':
            results[-1]['same_as_tooz'] = base == tooz_base
        if algorithm == 'tooz':
            tooz_base = base
        print('  %-10s build %.3fs own %.3fs' % (algorithm, built.wall,
                                                 own.wall),
              file=sys.stderr, flush=True)
    return results


def report(results: list[dict[str, Any]]) -> tuple[str, list[str]]:
    tooz = {(r['nodes'], r['hosts']): r for r in results
            if r['algorithm'] == 'tooz'}
    rows, verdicts = [], []
    for r in results:
        ref = tooz[(r['nodes'], r['hosts'])]
        ratio = r['own'] / ref['own'] if ref['own'] else float('nan')
        rows.append([
            '%.0e' % r['nodes'], str(r['hosts']), r['algorithm'],
            '%.3f' % r['build'], '%.4f' % r['own'],
            '-' if r['algorithm'] == 'tooz' else '%.3f' % ratio,
            '%.3f' % r['p2m'], '%.2f' % r['join'], '%.2f' % r['leave'],
            '%.1f' % (r['mem'] / 2 ** 20),
            {None: '', True: 'yes', False: 'NO'}[r['same_as_tooz']],
        ])
        target = TARGETS.get((r['algorithm'], r['nodes'], r['hosts']))
        if target:
            t_ratio, t_p2m, t_move = target
            checks = ['own/tooz %.3f <= %.2f %s' % (
                ratio, t_ratio, 'met' if ratio <= t_ratio else 'MISSED')]
            if t_p2m:
                checks.append('p2m %.3f <= %.2f %s' % (
                    r['p2m'], t_p2m, 'met' if r['p2m'] <= t_p2m else
                    'MISSED'))
            if t_move:
                worst = max(r['join'], r['leave'])
                checks.append('moves %.2f <= %.1fx %s' % (
                    worst, t_move, 'met' if worst <= t_move else 'MISSED'))
            if r['same_as_tooz'] is not None:
                checks.append('mapping identical to tooz: %s'
                              % r['same_as_tooz'])
            verdicts.append('%s %.0e x %d: %s' % (
                r['algorithm'], r['nodes'], r['hosts'], '; '.join(checks)))
    headers = ['nodes', 'hosts', 'ring', 'build s', 'own s', 'own/tooz',
               'p2m', 'join/ideal', 'leave/ideal', 'mem MiB', '=tooz']
    return common.table(headers, rows), verdicts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench rings')
    parser.add_argument('--quick', action='store_true',
                        help='only three small sizes')
    parser.add_argument('--sizes', help='e.g. 1e5x100,1e6x1000')
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        sizes = [(int(float(n)), int(h)) for n, h in
                 (s.split('x') for s in args.sizes.split(','))]
    print('Machine: %s' % common.machine())
    for algorithm in ALGORITHMS:
        # Plugin look-up (stevedore scans entry points once) is not part
        # of building a ring.
        rings.load(algorithm, ['warm-up'], 1)
    results = []
    cache: dict[int, list[str]] = {}
    for n_nodes, n_hosts in sizes:
        print('%.0e nodes x %d hosts' % (n_nodes, n_hosts), file=sys.stderr,
              flush=True)
        if n_nodes not in cache:
            cache.clear()
            cache[n_nodes] = common.random_uuids(n_nodes)
        results += run_size(n_nodes, n_hosts, cache[n_nodes], args.repeat)
    text, verdicts = report(results)
    print(text)
    print()
    print('Targets (issue: own time vs tooz at the same size, balance, '
          'movement):')
    for v in verdicts or ['(no target size in this run)']:
        print('  ' + v)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
