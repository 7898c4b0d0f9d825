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
"""Nodes whose instance is not a live instance of the host that holds it.

Rule 3 leaves a node whose instance belongs to another host alone. Two kinds
of such nodes are not really another host's:

* an *orphan*: nova-api deleted the instance while its compute was down
  (a local delete). The node stays deployed with the deleted instance's
  UUID. nova's reaper (``running_deleted_instance_action``) tears it down,
  but only on a host whose driver lists that instance: so the deleted
  instance's own host keeps the node, as it kept it while the instance
  lived, and lists the instance. A deleted instance nova left with no host
  (a build that failed after its server was handed over, when nova clears
  the host before the delete) is *homeless*: the host whose ring share
  holds its node keeps it as an orphan (:func:`adopted`);
* an *unknown* instance: nova has never heard of it (a node deployed by
  hand, or by another cloud). Nobody may deploy over it; the host the ring
  gives the node to reports it.

Finding them takes one query of nova per period, for the instance UUIDs on
nodes that are not this host's live instances. UUIDs known to be a live
peer's are remembered and not asked again while they stay on their nodes
and their host stays a member: an instance only changes hosts when its host
leaves the ring (fenced and taken over, or drained as it stops), and
another host's orphan may then become this host's. So the instances of a
host that is not a member are asked about every period.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Iterable
import dataclasses
from typing import Any

from nova import context as nova_context
from nova import objects

from nova_ironic_multi.division import ownership


@dataclasses.dataclass(frozen=True)
class Found:
    #: Deleted instances whose host was this host.
    orphans: frozenset[str]
    #: Instance UUIDs nova has no record of, deleted or not.
    unknown: frozenset[str]
    #: Deleted instances nova left with no host: the orphans of the host
    #: whose ring share holds their node (:func:`adopted`).
    homeless: frozenset[str] = frozenset()

    def adopting(self, instances: Collection[str]) -> Found:
        """These as orphans too (homeless ones this host keeps)."""
        if not instances:
            return self
        return dataclasses.replace(
            self, orphans=self.orphans | frozenset(instances))


NONE = Found(frozenset(), frozenset())


def adopted(found: Found, nodes: Iterable[ownership.NodeLike],
            share: Collection[str]) -> frozenset[str]:
    """The homeless instances on the nodes of ``share`` (rule 2's share).

    Every host computes the same ring, so exactly one live member keeps
    each homeless instance's node, and its driver lists the instance for
    nova's reaper.
    """
    if not found.homeless:
        return frozenset()
    return frozenset(n.instance_uuid for n in nodes
                     if n.instance_uuid in found.homeless and
                     n.uuid in share)


class Orphans:
    """Classifies the instances on nodes that are not this host's."""

    def __init__(self) -> None:
        #: Instance UUID -> its (lower-cased) host, for the instances known
        #: not to be this host's.
        self._others: dict[str, str] = {}

    def forget(self, instance_uuids: Collection[str]) -> None:
        """Ask about these again (they were taken over from their host)."""
        for uuid in instance_uuids:
            self._others.pop(uuid, None)

    def find(self, host: str, on_nodes: Collection[str],
             mine: Collection[str], members: Collection[str]) -> Found:
        """Which of ``on_nodes`` are ``host``'s orphans, or unknown to nova.

        :param on_nodes: the instance UUIDs of every in-scope node.
        :param mine: the live instances nova says ``host`` owns.
        :param members: the live peers (lower-cased): the instances of any
            other host are asked about again.
        :raises nova.exception.NovaException: nova cannot answer.
        """
        others = set(on_nodes) - set(mine)
        kept = {uuid: owner for uuid, owner in self._others.items()
                if uuid in others and owner in members}
        ask = others - set(kept)
        if not ask:
            self._others = kept
            return NONE
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        found: Any = objects.InstanceList.get_by_filters(
            ctxt, {'uuid': sorted(ask)}, expected_attrs=[])
        me = host.lower()
        orphans: set[str] = set()
        homeless: set[str] = set()
        known: set[str] = set()
        for inst in found:
            known.add(inst.uuid)
            owner = (inst.host or '').lower()
            # Both asked again every period: the reaper ends them.
            if inst.deleted and owner == me:
                orphans.add(inst.uuid)
            elif inst.deleted and not owner:
                homeless.add(inst.uuid)
            else:
                kept[inst.uuid] = owner
        self._others = kept
        return Found(frozenset(orphans), frozenset(ask - known),
                     frozenset(homeless))
