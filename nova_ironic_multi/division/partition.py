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
"""Which nodes and which peers this service considers: the partition.

Values only: :func:`nova_ironic_multi.conf.partition_opts.resolve` makes
one from the options every time it is needed (``partition_key`` and
``peer_list`` are mutable), and raises :class:`InvalidPartition` naming the
options and the fix when they contradict each other.
"""

from __future__ import annotations

import dataclasses
from typing import Any

OURS = 'ironic_multi'
NOVA = 'ironic'
NODES = 'nodes'
SHARDS = 'shards'


class InvalidPartition(ValueError):
    """The partition options are contradictory or incomplete."""


@dataclasses.dataclass(frozen=True)
class Scope:
    """The nodes this service may ever manage.

    ``conductor_group`` None means every group; the empty string means
    Ironic's default group. ``shard`` None means every shard.
    """

    conductor_group: str | None = None
    shard: str | None = None

    def contains(self, conductor_group: str | None,
                 shard: str | None) -> bool:
        """Whether a node with these attributes is in scope.

        Checked on every node Ironic returns: the server-side filter is a
        request, not a guarantee (older APIs ignore unknown filters, and
        Ironic's own ``next`` links have dropped them).
        """
        if self.conductor_group is not None:
            if (conductor_group or '').lower() != self.conductor_group:
                return False
        if self.shard is not None and shard != self.shard:
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.conductor_group is not None:
            parts.append('conductor group %r' % self.conductor_group)
        if self.shard is not None:
            parts.append('shard %r' % self.shard)
        return ', '.join(parts) or 'all nodes'


@dataclasses.dataclass(frozen=True)
class Partition:
    """The resolved partition of one service.

    ``peers`` None means the membership driver alone decides who the peers
    are; otherwise only these (lower-cased) hosts may be peers.
    """

    host: str
    scope: Scope
    peers: frozenset[str] | None
    membership_driver: str
    ring_algorithm: str
    partition_exponent: int
    #: The option ``peers`` came from, as operators write it.
    peers_option: str = '[%s] peer_list' % OURS
    #: What the ring divides: ``nodes`` or ``shards``.
    divide: str = 'nodes'

    @property
    def by_shard(self) -> bool:
        return self.divide == SHARDS

    @property
    def ring(self) -> str:
        """The ring as logged: ``algorithm/2^exponent``."""
        return '%s/2^%d' % (self.ring_algorithm, self.partition_exponent)

    def summary(self) -> dict[str, Any]:
        return {
            'scope': self.scope.describe(),
            'peers': sorted(self.peers) if self.peers is not None else None,
            'membership': self.membership_driver,
            'ring': self.ring,
            'divide': self.divide,
        }
