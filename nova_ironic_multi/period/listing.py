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
"""What one host lists from Ironic when the ring divides shards.

A period lists, with explicit markers and every filter on every page:

* the nodes of the shards the ring gives this host (``shard=a,b,c``);
* the nodes without a shard (``sharded=false``), which every host lists
  and the node ring divides, as ``divide = nodes`` divides every node
  (when Ironic counts none, nothing is asked);
* the nodes that carried an instance when this host last managed them and
  that the two listings above no longer return (after a rebalance they sit
  in shards another host now lists): read one by one when few, else by
  listing their shards;

and, after nova has said which instances are this host's (never before:
nova bug 1841481), the nodes of those instances still unseen, and of the
instances this host reserved a node for since the last period that nova no
longer lists as its own (deleted meanwhile: their nodes may be this host's
orphans): one by one when few, else the whole scope.

An instance found without a node (building, or failed before it got one)
is not asked about again while the share stays the same, except when this
host reserves a node for it: the spawn path says so (:meth:`reserved`), and
the next period that starts after that looks for its node again. So a node
reserved after a period, in a shard another host lists, is still found by
the host of its instance (the other host never keeps it: rule 3).

The first period after a start, or after the scope or mode changed, lists
the whole scope once: this host has no memory yet of where its instances
and orphans are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
import dataclasses
import threading
from typing import Protocol

from oslo_log import log as logging

from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo

LOG = logging.getLogger(__name__)

#: Up to this many nodes are read one by one; more are listed.
FETCH_LIMIT = 20


@dataclasses.dataclass
class Listed:
    """The nodes gathered so far in a period, by UUID, in listing order."""

    nodes: dict[str, nodeinfo.NodeInfo]
    #: Whether the whole scope was listed (nothing more to look for).
    whole: bool

    def add(self, found: Iterable[nodeinfo.NodeInfo]) -> None:
        for node in found:
            self.nodes.setdefault(node.uuid, node)

    def instances(self) -> set[str]:
        return {n.instance_uuid for n in self.nodes.values()
                if n.instance_uuid is not None}


class Lister(Protocol):
    """What lists nodes: :class:`ironic.Ironic`, or the delta listing."""

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False,
                   with_group: bool = False) -> list[nodeinfo.NodeInfo]: ...


class ShardListing:
    """The shard-mode listing of one host, with what it remembers."""

    def __init__(self, client: ironic.Ironic,
                 lister: Lister | None = None) -> None:
        self._ironic = client
        #: The listings (kept and brought up to date with listing = delta).
        self._lister: Lister = lister if lister is not None else client
        #: This host's instances known to have no node, while the share
        #: that was searched stays the same.
        self._nodeless: set[str] = set()
        self._share: tuple[object, ...] | None = None
        #: Instances the spawn path reserved a node for since the last
        #: period started (any thread adds; under ``_lock``).
        self._reserved: set[str] = set()
        self._lock = threading.Lock()
        #: Of those, the ones this period looks for again.
        self._recheck: set[str] = set()

    def reserved(self, instance_uuid: str) -> None:
        """This host reserved a node for an instance: look for it again.

        Taken by the next period that *starts* afterwards, so that period's
        reads all follow the reservation.
        """
        with self._lock:
            self._reserved.add(instance_uuid)

    def forget(self) -> None:
        """Drop every memory (the host stopped dividing shards)."""
        with self._lock:
            self._reserved.clear()
        self._recheck.clear()
        self._nodeless.clear()
        self._share = None

    def share(self, scope: partition.Scope, shards: Collection[str],
              previous: Mapping[str, nodeinfo.NodeInfo] | None,
              unsharded: bool = True) -> Listed:
        """List this host's shards, the unsharded nodes and its old nodes.

        :param shards: the shard names the ring gives this host.
        :param previous: the nodes this host managed last period, or None
            when it has no usable memory (the whole scope is then listed).
        :param unsharded: whether Ironic counted nodes without a shard
            (``GET /v1/shards``); when it did not, they are not listed. A
            node enrolled without one since is listed next period, as a
            node labelled with a shard since the count is.
        :raises ironic.IronicError: a listing failed.
        """
        with self._lock:
            # (Kept until a complete() uses them: a failed period does not
            # lose them.)
            self._recheck |= self._reserved
            self._reserved.clear()
        share = (scope, frozenset(shards))
        if share != self._share:
            # Another share: an instance without a node may since have
            # been placed on a node that is no longer listed here.
            self._nodeless.clear()
            self._share = share
        if previous is None:
            LOG.info('Listing every node in scope once (%s) to find where '
                     'this host\'s instances are', scope.describe())
            return Listed({n.uuid: n for n in self._lister.list_nodes(
                scope, with_shard=True)}, whole=True)
        listed = Listed({}, whole=False)
        if shards:
            listed.add(self._lister.list_nodes(scope, shards=list(shards)))
        if unsharded:
            listed.add(self._lister.list_nodes(scope, sharded=False))
        gone = [n for u, n in previous.items()
                if n.instance_uuid is not None and u not in listed.nodes]
        if len(gone) <= FETCH_LIMIT:
            for node in gone:
                try:
                    listed.add([self._ironic.get_node(node.uuid)])
                except ironic.NodeNotFound:
                    pass
        else:
            listed.add(self._lister.list_nodes(
                scope, shards=sorted({n.shard for n in gone
                                      if n.shard is not None})))
        return listed

    def complete(self, scope: partition.Scope, listed: Listed,
                 mine: Collection[str]) -> None:
        """Add the nodes of this host's instances that are still unseen.

        :param mine: this host's instances, read after the listings.
        :raises ironic.IronicError: a read failed.
        """
        # Instances this host reserved a node for that are no longer its
        # live instances: deleted meanwhile, perhaps by nova-api alone while
        # this host was down or fenced. If the node still carries one, it is
        # this host's orphan, which only its reaper tears down: found here,
        # it is kept, and read again every period while it stays deployed.
        gone = self._recheck - set(mine)
        self._nodeless &= set(mine)
        self._nodeless -= self._recheck
        self._recheck.clear()
        if listed.whole:
            self._nodeless |= set(mine) - listed.instances()
            return
        missing = sorted((set(mine) | gone) - listed.instances() -
                         self._nodeless)
        if not missing:
            return
        if len(missing) > FETCH_LIMIT:
            LOG.info('%(n)d of this host\'s instances are on nodes outside '
                     'its shards; listing every node in scope',
                     {'n': len(missing)})
            listed.add(self._lister.list_nodes(scope, with_shard=True))
            listed.whole = True
            self._nodeless |= (set(missing) & set(mine)) - listed.instances()
            return
        for instance in missing:
            node = self._ironic.node_for_instance(instance)
            if node is None:
                if instance not in gone:
                    # Building, or failed before a node was reserved.
                    self._nodeless.add(instance)
            else:
                listed.add([node])
