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
"""The interface every ring plugin implements.

A ring plugin is a class registered in the ``nova_ironic_multi.rings`` entry
point namespace. It is built as ``Ring(members, partition_exponent)`` and must
be a pure function of those two arguments and of the node set it is asked
about: every nova-compute service computes the division on its own, and two
services that see the same members and nodes must compute the same answer,
whatever order they received them in. No shared state, no history, no
Python ``hash()`` (it is salted per process).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt


class Ring(abc.ABC):
    """Maps node UUIDs to the member (host name) that manages them."""

    #: The name the plugin is registered under.
    name: str = ''

    def __init__(self, members: Iterable[str],
                 partition_exponent: int) -> None:
        if partition_exponent < 0:
            raise ValueError('partition_exponent must be >= 0, got %r'
                             % partition_exponent)
        #: The members, sorted and without duplicates.
        self.members: tuple[str, ...] = tuple(sorted(set(members)))
        self.partition_exponent = partition_exponent

    @abc.abstractmethod
    def assign(self, node_uuids: Sequence[str]) -> dict[str, str]:
        """Map every node of a node set to its manager.

        :param node_uuids: the whole set of nodes to divide, as UUID strings.
            Rings may use the whole set (for example to cap each member's
            share), so callers pass every node they want divided at once.
        :returns: ``{node_uuid: member}``; empty when there are no members.
        """

    def select(self, node_uuids: Sequence[str], member: str) -> list[str]:
        """The nodes of ``node_uuids`` that ``assign`` gives to ``member``.

        What a service asks every period. The default filters
        :meth:`assign`; rings may answer faster without building the whole
        mapping.
        """
        return [u for u, m in self.assign(node_uuids).items() if m == member]

    @abc.abstractmethod
    def owners(self, node_uuid: str, n: int) -> list[str]:
        """The ordered members that would manage ``node_uuid``.

        The first is the member the ring prefers; the next ones take over,
        in order, when the ones before them leave. At most ``n`` distinct
        members are returned.
        """

    def __repr__(self) -> str:
        return '<%s %s 2^%d members=%d>' % (
            type(self).__name__, self.name, self.partition_exponent,
            len(self.members))


class IndexedRing(Ring):
    """A ring that places nodes as indices into :attr:`members`, vectorised.

    Subclasses implement :meth:`_indices`; mapping and selection come from
    it without per-node Python work.
    """

    @abc.abstractmethod
    def _indices(self, node_uuids: Sequence[str]) -> npt.NDArray[np.int32]:
        """The index in :attr:`members` of each node's manager."""

    def assign(self, node_uuids: Sequence[str]) -> dict[str, str]:
        if not self.members or not len(node_uuids):
            return {}
        names = np.array(self.members, dtype=object)
        return dict(zip(node_uuids,
                        names[self._indices(node_uuids)].tolist(),
                        strict=True))

    def select(self, node_uuids: Sequence[str], member: str) -> list[str]:
        if member not in self.members or not len(node_uuids):
            return []
        mine = np.flatnonzero(
            self._indices(node_uuids) == self.members.index(member))
        return [node_uuids[i] for i in mine.tolist()]

    def _walk(self, owner: npt.NDArray[np.int32], slot: int,
              n: int) -> list[str]:
        """Up to ``n`` distinct members of ``owner`` (member indices per
        ring slot), clockwise from ``slot``: the answer of :meth:`owners`.
        """
        want = min(n, len(self.members))
        found: list[str] = []
        for step in range(len(owner) if want > 0 else 0):
            member = self.members[owner[(slot + step) % len(owner)]]
            if member not in found:
                found.append(member)
                if len(found) >= want:
                    break
        return found
