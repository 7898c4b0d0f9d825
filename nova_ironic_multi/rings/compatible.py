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
"""The ``compatible`` ring: nova's in-tree mapping, computed faster.

nova's in-tree Ironic driver builds ``tooz.hashring.HashRing(members,
partitions=2**5)`` and gives a node to the member returned for the node
UUID's UTF-8 bytes. This ring reproduces that mapping exactly, for any
exponent: each member is placed ``2**exponent`` times at the md5 of its
name repeated 2, 3, ... times (tooz's incremental digest), and a node goes
to the first position strictly after the md5 of its UUID, wrapping around.
Keeping the same exponent, a fleet can move hosts from the in-tree driver
one at a time without any node changing hands.

The lookup is vectorised: positions are kept as sorted 64-bit halves and
nodes are placed with one ``searchsorted``; the rare node whose high half
equals a position's is placed exactly with 128-bit integers.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
import hashlib

import numpy as np
import numpy.typing as npt

from nova_ironic_multi.rings import base
from nova_ironic_multi.rings import keys


class CompatibleRing(base.IndexedRing):

    name = 'compatible'

    def __init__(self, members: Iterable[str],
                 partition_exponent: int) -> None:
        super().__init__(members, partition_exponent)
        replicas = 2 ** partition_exponent
        ring: dict[int, int] = {}
        for index, member in enumerate(self.members):
            data = member.encode('utf-8')
            digest = hashlib.md5(data, usedforsecurity=False)
            for _ in range(replicas):
                digest.update(data)
                ring[int.from_bytes(digest.digest(), 'big')] = index
        self._positions = sorted(ring)
        self._owner = np.array([ring[p] for p in self._positions],
                               dtype=np.int32)
        self._hi = np.array([p >> 64 for p in self._positions],
                            dtype=np.uint64)

    def _slots(self, node_uuids: Sequence[str]) -> npt.NDArray[np.intp]:
        """Index into the sorted positions of each node's position."""
        hi, _ = keys.md5_halves(node_uuids)
        count = len(self._positions)
        slots = np.searchsorted(self._hi, hi, side='left')
        ties = np.flatnonzero(
            (slots < count) & (self._hi[np.minimum(slots, count - 1)] == hi))
        for i in ties.tolist():
            slots[i] = bisect.bisect(
                self._positions, keys.md5_int(node_uuids[i].encode('utf-8')))
        slots[slots >= count] = 0
        return slots

    def _indices(self, node_uuids: Sequence[str]) -> npt.NDArray[np.int32]:
        return self._owner[self._slots(node_uuids)]

    def owners(self, node_uuid: str, n: int) -> list[str]:
        if not self.members:
            return []
        slot = bisect.bisect(self._positions,
                             keys.md5_int(node_uuid.encode('utf-8')))
        return self._walk(self._owner, slot, n)
