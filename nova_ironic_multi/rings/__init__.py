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
"""Ring plugins (namespace ``nova_ironic_multi.rings``) and their cache.

Building a ring costs one hash per member point; a period that sees the
same members reuses it, and a period that also sees the same nodes reuses
the last selection. Reads never take a lock: the cache is a dictionary that
is replaced, never mutated, and the memo is one tuple swapped atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import threading
from typing import NamedTuple

from oslo_log import log as logging

from nova_ironic_multi import loader
from nova_ironic_multi.rings import base

LOG = logging.getLogger(__name__)

Ring = base.Ring


class RingKey(NamedTuple):
    algorithm: str
    exponent: int
    members: frozenset[str]


def load(algorithm: str, members: Iterable[str], exponent: int) -> Ring:
    """Build a ring of the named plugin (no caching)."""
    cls = loader.plugin(loader.RINGS_NAMESPACE, algorithm,
                        '[ironic_multi] ring_algorithm')
    ring: Ring = cls(members, exponent)
    return ring


class RingCache:
    """Rings per (algorithm, exponent, member set), and the last selection.

    :param size: how many member sets to keep; a flapping member makes the
        ring alternate between two sets, so keep a few.
    """

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._rings: dict[RingKey, Ring] = {}
        self._write_lock = threading.Lock()
        self._memo: tuple[RingKey, str, tuple[str, ...], list[str]] | None = (
            None)

    def get(self, algorithm: str, members: Iterable[str],
            exponent: int) -> Ring:
        key = RingKey(algorithm, exponent, frozenset(members))
        ring = self._rings.get(key)
        if ring is not None:
            return ring
        with self._write_lock:
            ring = self._rings.get(key)
            if ring is None:
                ring = load(algorithm, key.members, exponent)
                rings = dict(self._rings)
                while len(rings) >= self._size:
                    rings.pop(next(iter(rings)))
                rings[key] = ring
                self._rings = rings
                LOG.debug('Built %(ring)r', {'ring': ring})
        return ring

    def select(self, algorithm: str, members: Iterable[str], exponent: int,
               node_uuids: Sequence[str], member: str) -> list[str]:
        """``get(...).select(node_uuids, member)``, memoised for one input."""
        ring = self.get(algorithm, members, exponent)
        key = RingKey(algorithm, exponent, frozenset(ring.members))
        nodes = tuple(node_uuids)
        memo = self._memo
        if (memo is not None and memo[0] == key and memo[1] == member and
                memo[2] == nodes):
            return memo[3]
        selected = ring.select(nodes, member)
        self._memo = (key, member, nodes, selected)
        return selected
