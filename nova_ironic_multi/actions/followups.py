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
"""What an action leaves for the periods to finish, and what it needs of the
node cache.

An action on a node sometimes cannot finish now: a delete leaves volume
targets on a node Ironic is still cleaning, a spawn gives up a deploy it
could not undo, a spawn with ``divide = shards`` reserves a node in a
shard another host lists. It puts the work on the :class:`Followups` queue
it was given; the period's jobs (:mod:`nova_ironic_multi.period`) take it
at the start of their next run. Actions never import the period: the driver
hands both sides the same queue.
"""

from __future__ import annotations

import dataclasses
import queue
from typing import Protocol, Union

from nova_ironic_multi.division import partition
from nova_ironic_multi.ironic import nodeinfo


@dataclasses.dataclass(frozen=True)
class TargetsLeft:
    """A delete left volume targets on a node Ironic still holds."""
    node_uuid: str


@dataclasses.dataclass(frozen=True)
class AbandonedDeploy:
    """Spawn gave up a deploy on a node it could not undo at once."""
    node_uuid: str
    instance_uuid: str


@dataclasses.dataclass(frozen=True)
class Reserved:
    """This host reserved a node for an instance (the spawn path)."""
    instance_uuid: str


Followup = Union[TargetsLeft, AbandonedDeploy, Reserved]


class Followups:
    """A queue of follow-ups, safe to put into from any thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Followup] = queue.SimpleQueue()

    def put(self, item: Followup) -> None:
        self._queue.put(item)

    def take(self) -> list[Followup]:
        """Everything put so far, oldest first, and nothing twice."""
        taken = []
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken


class NodeCache(Protocol):
    """What an action reads and writes of the period's node cache."""

    def current_partition(self) -> partition.Partition:
        """The partition in force (the scope a deploy must stay in)."""

    def update(self, node: nodeinfo.NodeInfo) -> None:
        """A fresh read of a node after this host changed it."""
