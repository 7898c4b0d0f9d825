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
"""What a period found: the snapshot of the nodes this host manages."""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import types
from typing import NamedTuple

from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.ironic import nodeinfo


@dataclasses.dataclass(frozen=True)
class Snapshot:
    nodes: Mapping[str, nodeinfo.NodeInfo]
    by_instance: Mapping[str, str]
    partition: partition.Partition | None
    members: frozenset[str]
    division: ownership.Division | None
    #: The shards this host listed (``divide = shards``), sorted.
    shards: tuple[str, ...] = ()

    def node_for_instance(self,
                          instance_uuid: str) -> nodeinfo.NodeInfo | None:
        node_uuid = self.by_instance.get(instance_uuid)
        return self.nodes.get(node_uuid) if node_uuid else None

    def with_node(self, *fresh: nodeinfo.NodeInfo) -> Snapshot:
        """A copy where each node replaces the cached record of its UUID."""
        nodes = dict(self.nodes)
        nodes.update((node.uuid, node) for node in fresh)
        return dataclasses.replace(self, nodes=types.MappingProxyType(nodes),
                                   by_instance=index(nodes))


def index(nodes: Mapping[str, nodeinfo.NodeInfo]) -> Mapping[str, str]:
    return types.MappingProxyType({
        n.instance_uuid: n.uuid for n in nodes.values()
        if n.instance_uuid is not None})


EMPTY = Snapshot(types.MappingProxyType({}), types.MappingProxyType({}),
                 None, frozenset(), None)


class Shards(NamedTuple):
    """How the ring divided the shards this period."""

    members: frozenset[str]
    #: Shard name -> the member that lists it.
    assignment: Mapping[str, str]
    #: This host's shards, sorted.
    mine: tuple[str, ...]
    #: Whether Ironic counted nodes without a shard (anywhere).
    unsharded: bool
    #: ``GET /v1/shards``: shard name -> node count.
    counts: Mapping[str, int] = types.MappingProxyType({})
