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
"""Which shards each member lists, and which nodes that gives it: pure.

With ``[ironic_multi] divide = shards`` the ring divides Ironic shard names
(as ``GET /v1/shards`` returns them, the same on every host) instead of node
UUIDs. The ``compatible`` ring places each shard name as it would place a
node; the ``balanced`` ring's members take shards weighed by their node
counts, so a member holding one large shard takes few others. Nodes without
a shard are still divided node by node, among the nodes without a shard:
they are no shard, and the weighing counts each member's share of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import math

from nova_ironic_multi.rings import base
from nova_ironic_multi.rings import keys

#: How far above an even share of nodes a member may go before the
#: weighted placement passes a shard on to its next preferred member.
WEIGHT_SLACK = 0.05
#: The ring algorithms whose shard placement is weighed by node counts.
WEIGHTED = frozenset({'balanced'})
#: The name ``GET /v1/shards`` counts the nodes without a shard under
#: (Ironic writes ``str(None)``; :data:`ironic.UNSHARDED`).
UNSHARDED = 'None'


def assign(ring: base.Ring, counts: Mapping[str, int],
           weighted: bool) -> dict[str, str]:
    """``{shard name: member}`` for every shard of ``counts``.

    :param counts: shard name -> node count (``GET /v1/shards``).
    :param weighted: place by node counts (see :func:`_weighted`) instead
        of one shard per key, as the ring places nodes.
    """
    if not ring.members or not counts:
        return {}
    names = sorted(counts)
    if not weighted:
        return ring.assign(names)
    return _weighted(ring, counts)


def _weighted(ring: base.Ring, counts: Mapping[str, int]) -> dict[str, str]:
    """Bounded loads by node count, largest shards first.

    The nodes without a shard (counted under :data:`UNSHARDED`) are not a
    shard: the node ring divides them evenly among the members, so each
    member starts with ``unsharded / members`` of them, and the name gets
    no weight (it is still placed, like any name, for the nodes a shard
    really called ``None`` would hold). Then each shard, from the largest
    (ties by name), goes to the first member of its ring order
    (:meth:`base.Ring.owners`) whose node count stays at most
    ``ceil(mean * (1 + WEIGHT_SLACK))``, ``mean`` counting every node;
    when none has room (a shard larger than the cap), to the least loaded
    member, earliest in its order. A pure function of the counts and the
    members, in whole numbers (counted in ``1 / members`` of a node), so
    every host computes the same placement.
    """
    members = len(ring.members)

    def weight(name: str) -> int:
        return 0 if name == UNSHARDED else max(0, counts[name])

    unsharded = max(0, counts.get(UNSHARDED, 0))
    total = unsharded + sum(weight(name) for name in counts)
    cap = math.ceil(total / members * (1 + WEIGHT_SLACK)) * members
    load = dict.fromkeys(ring.members, unsharded)
    placed: dict[str, str] = {}
    for name in sorted(counts, key=lambda s: (-weight(s), s)):
        scaled = weight(name) * members
        order = ring.owners(name, members)
        fits = [m for m in order if load[m] + scaled <= cap]
        chosen = fits[0] if fits else min(order, key=lambda m: load[m])
        placed[name] = chosen
        load[chosen] += scaled
    return placed


def mine(assignment: Mapping[str, str], me: str) -> list[str]:
    """The shard names ``assignment`` gives ``me``, sorted."""
    return sorted(s for s, m in assignment.items() if m == me)


#: The names :func:`label` gives: ``shard-0`` ... ``shard-<count - 1>``.
LABEL = 'shard-%d'
_JUMP_MULTIPLIER = 2862933555777941757
_U64 = (1 << 64) - 1


def label(node_uuid: str, count: int) -> str:
    """The shard a node is labelled with among ``count`` shards.

    Lamping and Veach's jump consistent hash of the node's 64-bit key
    (:func:`keys.node_keys`): every node gets the same label on every run,
    and going from ``count`` to ``count + 1`` shards relabels only about
    ``1 / (count + 1)`` of the nodes.
    """
    if count < 1:
        raise ValueError('count must be at least 1, got %r' % count)
    key = int(keys.node_keys([node_uuid])[0][0])
    bucket, jump = -1, 0
    while jump < count:
        bucket = jump
        key = (key * _JUMP_MULTIPLIER + 1) & _U64
        jump = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return LABEL % bucket


#: ``(unsharded node uuids, member) -> that member's nodes among them``.
NodeSelect = Callable[[Sequence[str], str], list[str]]


def ring_select(shard_of: Mapping[str, str | None],
                assignment: Mapping[str, str],
                select_unsharded: NodeSelect) -> Callable[
                    [Sequence[str], str], list[str]]:
    """A rule-2 selection (:data:`ownership.RingSelect`) for shard mode.

    A node with a shard belongs to the shard's member; the nodes without a
    shard are divided among themselves by ``select_unsharded`` (the node
    ring), exactly as ``divide = nodes`` divides every node. A node whose
    shard is not in ``assignment`` (labelled after the shards were read)
    is nobody's share this period.

    :param shard_of: node UUID -> its shard (None: no shard), for every
        node the selection may be asked about.
    """
    def select(node_uuids: Sequence[str], me: str) -> list[str]:
        unsharded = [u for u in node_uuids if shard_of.get(u) is None]
        chosen = [u for u in node_uuids
                  if (shard := shard_of.get(u)) is not None and
                  assignment.get(shard) == me]
        if unsharded:
            chosen.extend(select_unsharded(unsharded, me))
        return chosen
    return select
