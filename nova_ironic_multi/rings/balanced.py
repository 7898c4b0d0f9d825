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
"""The ``balanced`` ring: consistent hashing with bounded loads.

Each member is placed ``64 * 2**exponent`` times on a 64-bit circle (at
:func:`keys.spread` of the BLAKE2b of its name) and each node at its
:func:`keys.node_keys` key; a node prefers the member of the first point
after it, then the members of the following points. So far this is plain
consistent hashing, whose shares vary by several percent because both the
arcs and the number of nodes falling on them are random.

To even the shares out, no member takes more than a capacity of
``floor(mean * (1 + slack))`` nodes (never below an even share), ``mean``
being nodes / members. Nodes are placed in rounds: every unplaced node
asks the member of its current point; a member with room for all its askers
takes them all, a member with less room keeps the askers closest
(clockwise) to their point and the rest move on to the next point whose
member still has room. Which nodes a member
keeps depends only on the keys, never on input order, so every service
computes the same division.

``slack`` (see :func:`slack`) is 1.9 % when members hold many nodes each
and a membership change moves many per member; it grows when members hold
few, or when a join or leave takes only a node or two from each member:
there a tight cap would make most members pass a node on at every
membership change, multiplying the nodes that move.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import math

import numpy as np
import numpy.typing as npt

from nova_ironic_multi.rings import base
from nova_ironic_multi.rings import keys

#: Points per member are ``2 ** (partition_exponent + POINTS_SHIFT)``.
POINTS_SHIFT = 6


def slack(nodes: int, members: int) -> float:
    """The fraction above the mean share a member may hold.

    A member's uncapped share varies by about ``1 / sqrt(mean)`` (the
    Poisson noise of the nodes falling on its arcs). The cap sits ``z`` of
    those above the mean, with ``z`` from 0.6 when a join or leave moves ten
    or more nodes per member (``mean / members``) up to 2.6 when it moves a
    hundredth of one: there, most capped members would otherwise pass a
    node on, or take one back, at every membership change. Never below
    1.9 %, so rounding to whole nodes cannot break the balance target, and
    never above 25 %: in a small fleet a share is a handful of nodes, and a
    wide cap would leave it as uneven as plain consistent hashing.
    """
    if members <= 1 or nodes <= members:
        return 0.0
    mean = nodes / members
    per_change = mean / members
    z = min(2.6, max(0.6, 1.4 - math.log10(per_change)))
    return min(0.25, max(0.019, z / math.sqrt(mean)))


def capacity(nodes: int, members: int) -> int:
    """The most nodes one member may hold: ``floor(mean * (1 + slack))``.

    Never below an even share rounded up. Rounding down, not up, matters:
    with ``ceil`` an even share that is a whole number (10^4 nodes on 1000
    members) would raise every member's cap by one on the next leave, and
    each capped member would pass on or take back a node.
    """
    if not members:
        return 0
    mean = nodes / members
    return max(math.ceil(mean),
               math.floor(mean * (1 + slack(nodes, members))))


class BalancedRing(base.IndexedRing):

    name = 'balanced'

    def __init__(self, members: Iterable[str],
                 partition_exponent: int) -> None:
        super().__init__(members, partition_exponent)
        per = 2 ** (partition_exponent + POINTS_SHIFT)
        count = len(self.members)
        raw = keys.spread([keys.blake64(m) for m in self.members], per)
        owner = np.repeat(np.arange(count, dtype=np.int32), per)
        # Ties between members' points (2^-64 each) go to the member that
        # sorts first, on every host alike.
        order = np.lexsort((owner, raw))
        self._points: keys.U64 = raw[order]
        self._owner: npt.NDArray[np.int32] = owner[order]
        # A jump table on the top bits of a key: the first point of each
        # bucket, so finding a key's successor is one look-up and a step or
        # two instead of a binary search with a cache miss per level.
        self._shift = np.uint64(64 - max(1, int(len(raw)).bit_length()))
        starts = (np.arange(2 ** (64 - int(self._shift)), dtype=np.uint64)
                  << self._shift)
        self._jump = np.searchsorted(self._points, starts,
                                     side='left').astype(np.int64)

    def _first_points(self, node_keys: keys.U64) -> npt.NDArray[np.int64]:
        """Index of the first point strictly after each key (wrapping)."""
        points, count = self._points, len(self._points)
        slots: npt.NDArray[np.int64] = self._jump[node_keys >> self._shift]
        todo = np.flatnonzero(slots < count)
        while todo.size:
            behind = points[slots[todo]] <= node_keys[todo]
            todo = todo[behind]
            slots[todo] += 1
            todo = todo[slots[todo] < count]
        slots[slots >= count] = 0
        return slots

    def _indices(self, node_uuids: Sequence[str]) -> npt.NDArray[np.int32]:
        return self._place(*keys.node_keys(node_uuids))

    def _place(self, primary: keys.U64,
               secondary: keys.U64) -> npt.NDArray[np.int32]:
        owner = self._owner
        n_points, n_members = len(self._points), len(self.members)
        cap = capacity(len(primary), n_members)
        slot = self._first_points(primary)
        placed = np.full(len(primary), -1, dtype=np.int32)
        load = np.zeros(n_members, dtype=np.int64)
        pending = np.arange(len(primary))
        while pending.size:
            asked = owner[slot[pending]]
            room = cap - load
            crowded = (np.bincount(asked, minlength=n_members) > room)[asked]
            # Members with room for every asker take them all.
            easy = pending[~crowded]
            placed[easy] = asked[~crowded]
            load += np.bincount(asked[~crowded], minlength=n_members)
            if not crowded.any():
                break
            # The others keep the askers closest to their point.
            contested, wanted = pending[crowded], asked[crowded]
            order = self._closest_first(contested, wanted, slot, primary,
                                        secondary)
            contested, wanted = contested[order], wanted[order]
            first = np.searchsorted(wanted, np.arange(n_members))
            rank = np.arange(len(wanted)) - first[wanted]
            keep = rank < room[wanted]
            placed[contested[keep]] = wanted[keep]
            load += np.bincount(wanted[keep], minlength=n_members)
            # The rest move to the next point whose member has room.
            pending = contested[~keep]
            full = load >= cap
            nxt = (slot[pending] + 1) % n_points
            blocked = full[owner[nxt]]
            while blocked.any():
                nxt[blocked] = (nxt[blocked] + 1) % n_points
                blocked = full[owner[nxt]]
            slot[pending] = nxt
        return placed

    def _closest_first(self, contested: npt.NDArray[np.intp],
                       wanted: npt.NDArray[np.int32],
                       slot: npt.NDArray[np.int64], primary: keys.U64,
                       secondary: keys.U64) -> npt.NDArray[np.intp]:
        """Order askers by member, then clockwise distance, then key."""
        with np.errstate(over='ignore'):
            distance = self._points[slot[contested]] - primary[contested]
        if len(self.members) <= 1 << 16:
            # One 64-bit sort key (member, top 48 bits of the distance) is
            # several times faster than a four-key lexsort; only an exact
            # tie needs the full order.
            packed = ((wanted.astype(np.uint64) << np.uint64(48)) |
                      (distance >> np.uint64(16)))
            order = np.argsort(packed, kind='stable')
            ranked = packed[order]
            if not (ranked[1:] == ranked[:-1]).any():
                return order
        return np.lexsort((secondary[contested], primary[contested],
                           distance, wanted))

    def owners(self, node_uuid: str, n: int) -> list[str]:
        if not self.members:
            return []
        primary, _ = keys.node_keys([node_uuid])
        return self._walk(self._owner, int(self._first_points(primary)[0]),
                          n)
