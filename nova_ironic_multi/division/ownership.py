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
"""Which nodes this service manages: the three rules, as a pure function.

1. Keep every node whose instance this host owns.
2. Keep every free node the ring gives this host.
3. Never keep a node whose instance another host owns.

And before all three: never a node outside the scope in force (conductor
group, shard), checked on each node whatever the server was asked.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
import dataclasses
from typing import Protocol

from nova_ironic_multi.division import partition


class NodeLike(Protocol):
    """The node attributes ownership reads (python-ironicclient nodes)."""

    @property
    def uuid(self) -> str: ...

    @property
    def instance_uuid(self) -> str | None: ...

    @property
    def conductor_group(self) -> str | None: ...

    @property
    def shard(self) -> str | None: ...


#: ``(in_scope_node_uuids, host) -> the nodes the ring gives host``.
RingSelect = Callable[[Sequence[str], str], list[str]]


@dataclasses.dataclass(frozen=True)
class Division:
    """The outcome of :func:`select` for one host."""

    #: Node UUIDs this host manages.
    owned: frozenset[str]
    #: How many of them carry one of this host's instances.
    with_instance: int
    #: In-scope nodes carrying another host's instance (rule 3).
    foreign: int
    #: Nodes Ironic returned that are outside the scope.
    out_of_scope: int
    #: In-scope free nodes, whoever manages them.
    free: int
    #: In-scope nodes the ring gives this host, free or not.
    share: frozenset[str] = frozenset()


def in_scope(node: NodeLike, scope: partition.Scope) -> bool:
    return scope.contains(getattr(node, 'conductor_group', None),
                          getattr(node, 'shard', None))


def select(nodes: Iterable[NodeLike], my_instances: Collection[str],
           ring_select: RingSelect, me: str,
           scope: partition.Scope) -> Division:
    """Apply the three rules for host ``me``.

    :param nodes: every node listed from Ironic this period.
    :param my_instances: UUIDs of the instances nova says ``me`` owns; read
        after the node listing (nova bug 1841481).
    :param ring_select: the ring's selection for a host among all the
        in-scope nodes (rule 2 keeps the free ones).
    :param me: this host's (lower-cased) name, as the ring knows it.
    :param scope: the conductor group / shard in force.
    """
    owned: set[str] = set()
    in_scope_nodes: list[str] = []
    taken: set[str] = set()
    foreign = out = 0
    for node in nodes:
        if not in_scope(node, scope):
            out += 1
            continue
        in_scope_nodes.append(node.uuid)
        instance = node.instance_uuid
        if instance is None:
            continue
        taken.add(node.uuid)
        if instance in my_instances:
            owned.add(node.uuid)
        else:
            foreign += 1
    with_instance = len(owned)
    # The ring divides every in-scope node, free or not: a boot or a delete
    # then changes no other node's manager (a ring that sees only the free
    # nodes, like the balanced one, would move other nodes on every boot).
    # Rules 1 and 3 have already settled the nodes that carry instances.
    share = frozenset(ring_select(in_scope_nodes, me))
    owned.update(share - taken)
    free = len(in_scope_nodes) - len(taken)
    return Division(owned=frozenset(owned), with_instance=with_instance,
                    foreign=foreign, out_of_scope=out, free=free,
                    share=share)
