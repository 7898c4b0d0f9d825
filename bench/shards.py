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
"""How evenly ``divide = shards`` spreads the nodes over the hosts.

Pure: no Ironic, no nova. For each fleet (nodes, hosts, shard sizes) and
each count of nodes without a shard, every host's nodes come from
:func:`division.divide`, the function a period calls, fed what ``GET
/v1/shards`` would count: a host's shards plus its node-ring share of the
nodes without a shard. The figure is the largest host's nodes over the
mean (``max/mean``), beside the same with the shard placement used before
issue 20.6, which weighed the nodes without a shard as one more shard.

Shards are ``shards apply`` labels (:func:`sharding.label`, about even)
or skewed (sizes falling as 1/sqrt(rank): the largest of 100 is 18 times
the smallest). The ``balanced`` ring weighs shards by node count and has a
target where each host gets at least three shards; ``compatible`` places
shard names as it places nodes, with no weighing, and is shown for
comparison only. ``floor`` is the least max/mean any placement could
reach: the host of the largest shard also gets its share of the nodes
without a shard.

Usage: ``tox -e bench -- shards [--quick]``.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Mapping
import math
import sys
from typing import Any

from bench import common
from nova_ironic_multi import division
from nova_ironic_multi.division import partition
from nova_ironic_multi.division import sharding
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi import rings
from nova_ironic_multi.rings import base

#: (name, sharded nodes, hosts, shards, shard sizes: 'even' | 'labels' |
#: 'skewed', nodes without a shard: with none, and with some).
FLEETS = [
    ('issue 20.6', 900, 3, 9, 'even', 300),
    ('labels', 10 ** 4, 3, 100, 'labels', 3000),
    ('labels', 10 ** 4, 10, 100, 'labels', 3000),
    ('skewed', 10 ** 4, 10, 100, 'skewed', 3000),
    ('labels', 10 ** 4, 100, 100, 'labels', 3000),
]
#: Target on max/mean, balanced ring, for fleets of at least 10 shards per
#: host (with and without nodes without a shard): the weighing's cap is
#: 5 % above the mean, plus a shard's rounding and the node ring's spread
#: of the nodes without a shard.
TARGET = 1.10
SHARDS_PER_HOST = 3


def shard_sizes(kind: str, nodes: list[str], count: int
                ) -> dict[str, str]:
    """node -> its shard."""
    if kind == 'labels':
        return {n: sharding.label(n, count) for n in nodes}
    if kind == 'even':
        return {n: sharding.LABEL % (i % count) for i, n in enumerate(nodes)}
    weights = [1 / math.sqrt(rank + 1) for rank in range(count)]
    bounds = [0.0]
    for w in weights:
        bounds.append(bounds[-1] + w / sum(weights) * len(nodes))
    return {n: sharding.LABEL % next(s for s in range(count)
                                     if i < bounds[s + 1])
            for i, n in enumerate(nodes)}


def _before(ring: base.Ring, counts: Mapping[str, int]) -> dict[str, str]:
    """The weighted placement before issue 20.6.

    The nodes without a shard weighed as one more shard, on one member.
    """
    members = len(ring.members)
    cap = math.ceil(sum(counts.values()) / members *
                    (1 + sharding.WEIGHT_SLACK))
    load = dict.fromkeys(ring.members, 0)
    placed: dict[str, str] = {}
    for name in sorted(counts, key=lambda s: (-counts[s], s)):
        order = ring.owners(name, members)
        fits = [m for m in order if load[m] + counts[name] <= cap]
        chosen = fits[0] if fits else min(order, key=lambda m: load[m])
        placed[name] = chosen
        load[chosen] += counts[name]
    return placed


def per_host(nodes: list[nodeinfo.NodeInfo], members: list[str],
             algorithm: str, counts: dict[str, int],
             before: bool) -> list[int]:
    part = partition.Partition('bench', partition.Scope(), None, 'static',
                               algorithm, 5, divide=partition.SHARDS)
    if not before:
        found = division.divide(nodes, {m: () for m in members}, members,
                                part, counts)
        return [len(found[m].owned) for m in members]
    # The same division with the old placement of the shards.
    ring = rings.load(algorithm, members, 5)
    assignment = (_before(ring, counts) if algorithm in sharding.WEIGHTED
                  else sharding.assign(ring, counts, False))
    unsharded = ring.assign([n.uuid for n in nodes if n.shard is None])
    load = collections.Counter(
        unsharded[n.uuid] if n.shard is None else assignment[n.shard]
        for n in nodes)
    return [load[m] for m in members]


def run(fleets: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    results = []
    for name, sharded, hosts, count, kind, unsharded in fleets:
        uuids = common.random_uuids(sharded + unsharded, seed=hosts + count)
        shard_of = shard_sizes(kind, uuids[:sharded], count)
        members = ['compute-%03d' % i for i in range(hosts)]
        for without in (0, unsharded):
            nodes = [nodeinfo.NodeInfo(uuid=u, shard=shard_of.get(u))
                     for u in uuids[:sharded + without]]
            counts = dict(collections.Counter(str(n.shard) for n in nodes))
            for algorithm in ('compatible', 'balanced'):
                row = {'fleet': name, 'nodes': len(nodes), 'hosts': hosts,
                       'shards': count, 'sizes': kind,
                       'unsharded': without, 'ring': algorithm,
                       'largest': max(c for s, c in counts.items()
                                      if s != sharding.UNSHARDED)}
                mean = len(nodes) / hosts
                row['floor'] = max(1.0, (row['largest'] + without / hosts) /
                                   mean)
                for when in ('now', 'before'):
                    loads = per_host(nodes, members, algorithm, counts,
                                     when == 'before')
                    assert sum(loads) == len(nodes), (name, when, loads)
                    row[when] = max(loads) / mean
                    row[when + '_loads'] = loads
                results.append(row)
                print('  %s %d x %d %s: %.3f' % (
                    name, len(nodes), hosts, algorithm, row['now']),
                    file=sys.stderr, flush=True)
    return results


def report(results: list[dict[str, Any]]) -> tuple[str, list[str]]:
    rows, verdicts = [], []
    for r in results:
        targeted = (r['ring'] in sharding.WEIGHTED and
                    r['shards'] >= SHARDS_PER_HOST * r['hosts'])
        verdict = ''
        if targeted:
            verdict = '<= %.2f %s' % (TARGET, 'met' if r['now'] <= TARGET
                                      else 'MISSED')
            verdicts.append('%s, %d nodes (%d without a shard) x %d hosts, '
                            '%s: max/mean %.3f %s' % (
                                r['fleet'], r['nodes'], r['unsharded'],
                                r['hosts'], r['ring'], r['now'], verdict))
        rows.append([r['fleet'], str(r['nodes']), str(r['unsharded']),
                     str(r['hosts']), str(r['shards']), str(r['largest']),
                     '%.3f' % r['floor'], r['ring'], '%.3f' % r['now'],
                     '%.3f' % r['before'], verdict or '-'])
    headers = ['fleet', 'nodes', 'no shard', 'hosts', 'shards', 'largest',
               'floor', 'ring', 'max/mean', 'before', 'target']
    return common.table(headers, rows), verdicts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='bench shards')
    parser.add_argument('--quick', action='store_true',
                        help="only the first fleet (issue 20.6's)")
    args = parser.parse_args(argv)
    print('Machine: %s' % common.machine())
    results = run(FLEETS[:1] if args.quick else FLEETS)
    text, verdicts = report(results)
    print('Nodes per host with divide = shards (max/mean: the largest '
          'host over the mean; "before": the placement before issue 20.6):')
    print(text)
    print()
    print('Targets (issue 20.6: balanced ring, at least %d shards per '
          'host, with and without nodes without a shard):'
          % SHARDS_PER_HOST)
    for v in verdicts:
        print('  ' + v)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
