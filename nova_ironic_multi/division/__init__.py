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
"""Each host's nodes from one view of the fleet: the division, pure.

A period (:class:`inventory.Inventory`) and the operator command
(``nova-ironic-multi ring ...``, ``shards plan``) both call :func:`divide`,
so what the command shows is what the services do: the same ring input
(every in-scope node, free or not), the same shard placement with
``divide = shards`` (:mod:`sharding`), the same three rules
(:mod:`ownership`). Only the inputs are gathered differently: a host reads
its own share from Ironic, the command reads the whole scope.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.division import sharding
from nova_ironic_multi import rings


def shard_assignment(part: partition.Partition, members: Iterable[str],
                     counts: Mapping[str, int] | None,
                     cache: rings.RingCache | None = None) -> dict[str, str]:
    """Shard name -> the member that lists it (``divide = shards``).

    :param counts: shard name -> node count, as ``GET /v1/shards`` says.
    :raises loader.PluginError: an unknown ring algorithm.
    """
    ring = (cache or rings.RingCache()).get(
        part.ring_algorithm, members, part.partition_exponent)
    return sharding.assign(ring, counts or {},
                           part.ring_algorithm in sharding.WEIGHTED)


def rule2(nodes: Iterable[ownership.NodeLike], members: Iterable[str],
          part: partition.Partition, counts: Mapping[str, int] | None,
          cache: rings.RingCache | None = None) -> ownership.RingSelect:
    """The ring's selection for a member (rule 2), as a period makes it.

    With ``divide = nodes`` the ring places every node; with ``shards`` a
    node goes with its shard and the nodes without one are placed node by
    node among themselves (:func:`sharding.ring_select`).

    :param nodes: every node the selection may be asked about (their
        shards are read here).
    """
    cache = cache or rings.RingCache()
    group = frozenset(members)

    def by_node(node_uuids: Sequence[str], me: str) -> list[str]:
        return cache.select(part.ring_algorithm, group,
                            part.partition_exponent, node_uuids, me)

    if not part.by_shard:
        return by_node
    return sharding.ring_select(
        {n.uuid: n.shard for n in nodes},
        shard_assignment(part, group, counts, cache), by_node)


def divide(nodes: Sequence[ownership.NodeLike],
           instances: Mapping[str, Collection[str]],
           members: Iterable[str], part: partition.Partition,
           counts: Mapping[str, int] | None = None,
           cache: rings.RingCache | None = None
           ) -> dict[str, ownership.Division]:
    """The division of each host of ``instances``.

    :param nodes: the nodes listed from Ironic (out-of-scope ones are
        counted, never kept).
    :param instances: host (lower-cased, as the ring knows it) -> the
        instances it keeps: its live ones and its orphans (the instances
        nova deleted while it was down). A host that is not a member
        keeps only the nodes of these (rules 1 and 3).
    :param members: the live peers, as the membership plugin says.
    :param part: the partition in force (scope, ring, ``divide``).
    :param counts: ``GET /v1/shards`` (shard -> node count); read only
        with ``divide = shards``.
    :param cache: rings already built (a service keeps one across periods).
    :raises loader.PluginError: an unknown ring algorithm.
    """
    cache = cache or rings.RingCache()
    select = rule2(nodes, members, part, counts, cache)
    return {host: ownership.select(nodes, mine, select, host, part.scope)
            for host, mine in instances.items()}


def share(nodes: Sequence[ownership.NodeLike], members: Iterable[str],
          part: partition.Partition, counts: Mapping[str, int] | None = None,
          cache: rings.RingCache | None = None) -> frozenset[str]:
    """The in-scope nodes the ring over ``members`` gives this host
    (``part.host``): rule 2's share, as :func:`divide` computes it.
    """
    select = rule2(nodes, frozenset(members), part, counts, cache)
    in_scope = [n.uuid for n in nodes if ownership.in_scope(n, part.scope)]
    return frozenset(select(in_scope, part.host))


def placement(nodes: Sequence[ownership.NodeLike], members: Iterable[str],
              part: partition.Partition,
              counts: Mapping[str, int] | None = None,
              cache: rings.RingCache | None = None) -> dict[str, str]:
    """In-scope node -> the member the ring gives it (rule 2's share).

    The manager of every free node; a node with an instance stays with its
    instance's host whatever this says.
    """
    group = sorted(frozenset(members))
    select = rule2(nodes, group, part, counts, cache)
    # What ownership.select hands the ring: the in-scope nodes, in order.
    in_scope = [n.uuid for n in nodes if ownership.in_scope(n, part.scope)]
    return {node: member for member in group
            for node in select(in_scope, member)}
