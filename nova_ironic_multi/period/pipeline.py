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
"""One period's pipeline: list, instances, peers, divide, take over.

1. resolve the partition from the configuration (:mod:`.in_force`);
2. list the nodes in scope from Ironic (one paginated listing; with
   ``divide = shards``, this host's shards, the nodes without a shard and
   the nodes of its instances: see :mod:`period.listing`);
3. read this host's instances from nova, *after* the listing, so a node
   deployed meanwhile is not mistaken for another host's (nova bug 1841481);
4. ask the membership plugin who the live peers are;
5. let the ring and the three ownership rules pick this host's nodes;
6. with ``takeover = fenced``, take over the instances of forced down
   hosts on the nodes the ring gives this host (see :mod:`hosts.takeover`).

The drain's hand-over plan (:meth:`Pipeline.handover`) runs steps 1 to 5
over the peers that may take instances, without this host.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import time
import types
from typing import NamedTuple

from nova import context as nova_context
from nova import exception as nova_exc
from nova import objects
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi import division as division_mod
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.division import sharding
from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi import metrics
from nova_ironic_multi.period import delta
from nova_ironic_multi.period import in_force
from nova_ironic_multi.period import listing
from nova_ironic_multi.period import orphans
from nova_ironic_multi.period import snapshot
from nova_ironic_multi import rings

LOG = logging.getLogger(__name__)


class NotReady(Exception):
    """The division cannot be computed now; keep what nova has."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        #: What did not answer or cannot work (``metrics.REASONS``):
        #: ironic, nova, membership or configuration.
        self.kind = kind


@contextlib.contextmanager
def _peers_or_not_ready() -> Iterator[None]:
    """Turn a failure to learn the peers (or the ring) into NotReady."""
    try:
        yield
    except membership.MembershipUnavailable as e:
        raise NotReady('cannot determine the peers: %s' % e,
                       'membership') from e
    except (nova_exc.NovaException,
            oslo_messaging.MessagingException) as e:
        # (On a compute host nova's objects go through the conductor.)
        raise NotReady('cannot determine the peers: %s' % e, 'nova') from e
    except loader.PluginError as e:
        LOG.error('%s', e)
        raise NotReady(str(e), 'configuration') from e


class Computed(NamedTuple):
    """A period's snapshot and what it took."""

    snapshot: snapshot.Snapshot
    #: Nodes listed (in scope or not).
    listed: int
    list_seconds: float
    rest_seconds: float


class Pipeline:
    """The steps of a period, and of a drain's hand-over plan."""

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 settings: in_force.InForce,
                 recoveries: recovery.Recovery) -> None:
        self._ironic = client
        self._in_force = settings
        self._rings = rings.RingCache()
        self._orphans = orphans.Orphans()
        self._conf = conf
        #: The listings, kept between periods with listing = delta.
        self.delta = delta.DeltaListing(client)
        self.lister = listing.ShardListing(client, self.delta)
        self._takeover = takeover.Takeover(conf)
        self._recovery = recoveries
        #: This host's instances as of the last period (None: none yet).
        self._known: frozenset[str] | None = None
        #: Nodes last logged as orphans, and as carrying unknown instances.
        self._orphaned: frozenset[str] = frozenset()
        self._unknown: frozenset[str] = frozenset()

    @property
    def host(self) -> str:
        return self._in_force.host

    @property
    def reported(self) -> tuple[int, int]:
        """The last period's managed orphan nodes, and nodes of this host's
        share with an instance nova has never heard of.
        """
        return len(self._orphaned), len(self._unknown)

    def _partition(self) -> partition.Partition:
        """The first step of both: the partition in force.

        :raises NotReady: the options are invalid and none ever was good.
        """
        try:
            return self._in_force.partition()
        except partition.InvalidPartition as e:
            raise NotReady(str(e), 'configuration') from e

    def _instances(self, ctxt: nova_context.RequestContext) -> set[str]:
        """This host's instances: read after the listing, never before.

        (Else a node deployed meanwhile looks like another host's: nova
        bug 1841481.) Within :func:`_peers_or_not_ready`.
        """
        return set(objects.InstanceList.get_uuids_by_host(ctxt, self.host))

    def compute(self, previous: snapshot.Snapshot | None) -> Computed:
        """This period's snapshot, and what it took.

        :param previous: the last period's snapshot, if any.
        :raises NotReady: Ironic, nova or the membership back end cannot
            answer, or the configuration cannot be enforced.
        """
        part = self._partition()
        started = time.monotonic()
        shards: snapshot.Shards | None = None
        try:
            self.delta.begin(self._conf)
            if part.by_shard:
                self._ironic.require_shards('[ironic_multi] divide = shards')
                # The peers first: they decide which shards to list.
                shards = self._shards(part)
                listed = self.lister.share(part.scope, shards.mine,
                                            self._previous(part, previous),
                                            unsharded=shards.unsharded)
                nodes = list(listed.nodes.values())
            else:
                # Its memory is of no use to the next shard period, which
                # lists the whole scope; nor is it kept growing here.
                self.lister.forget()
                nodes = self.delta.list_nodes(part.scope)
        except ironic.VersionNotSupported as e:
            LOG.error('Cannot enforce the partition (%(scope)s): %(error)s',
                      {'scope': part.scope.describe(), 'error': e})
            self._in_force.listed(part, False)
            raise NotReady(str(e), 'ironic') from e
        except ironic.IronicError as e:
            self._in_force.listed(part, False)
            raise NotReady('cannot list Ironic nodes: %s' % e,
                               'ironic') from e
        self._in_force.listed(part, True)
        listed_at = time.monotonic()
        ctxt = nova_context.get_admin_context()
        with _peers_or_not_ready():
            mine = self._instances(ctxt)
            if shards is not None:
                try:
                    self.lister.complete(part.scope, listed, mine)
                except ironic.IronicError as e:
                    raise NotReady('cannot read the nodes of this host\'s '
                                   'instances: %s' % e, 'ironic') from e
                nodes = list(listed.nodes.values())
            on_nodes = {n.instance_uuid for n in nodes
                        if n.instance_uuid is not None and
                        ownership.in_scope(n, part.scope)}
            members = (shards.members if shards is not None else
                       self._in_force.membership(part).live_peers(part))
            found = self._orphans.find(self.host, on_nodes, mine, members)
        try:
            # The division the operator command computes too. An orphan
            # stays with the host of its deleted instance, so nova's reaper
            # there sees it (rule 1 for the instance it had).
            division = self._divide(part, nodes, mine, found, members,
                                    shards)
            # A deleted instance nova left with no host is the orphan of the
            # host whose ring share holds its node.
            homeless = orphans.adopted(found, nodes, division.share)
            if homeless:
                found = found.adopting(homeless)
                division = self._divide(part, nodes, mine, found, members,
                                        shards)
            # Fenced hosts' nodes the ring gives this host (takeover =
            # fenced): their instances become this host's now, so this
            # period's division holds the nodes and nova moves their rows.
            extra: dict[str, nodeinfo.NodeInfo] = {}
            try:
                moved = self._takeover.run(
                    self.host, nodes, division, mine, members,
                    lambda group: self._share_among(part, nodes, shards,
                                                    group, extra))
            except Exception:
                # A side job: the division stands without it.
                LOG.exception('Taking over the instances of fenced hosts '
                              'failed; the next period tries again')
                moved = takeover.NOTHING
            if moved:
                metrics.TAKEOVERS.inc(len(moved.live | moved.orphans))
                mine |= moved.live
                # Nodes listed for the takeover alone (divide = shards)
                # whose instances are this host's now.
                nodes = nodes + [n for n in extra.values()
                                 if n.instance_uuid in moved.live or
                                 n.instance_uuid in moved.orphans]
                self._recovery.note(moved.inflight)
                self._orphans.forget(moved.orphans)
                found = found.adopting(moved.orphans)
                division = self._divide(part, nodes, mine, found, members,
                                        shards)
        except loader.PluginError as e:
            LOG.error('%s', e)
            raise NotReady(str(e), 'configuration') from e
        self._handed_over(ctxt, mine)
        owned = {n.uuid: n for n in nodes if n.uuid in division.owned}
        self._report(nodes, found, division)
        new = snapshot.Snapshot(
            types.MappingProxyType(owned), snapshot.index(owned), part,
            members, division, shards.mine if shards is not None else ())
        return Computed(new, len(nodes), listed_at - started,
                        time.monotonic() - listed_at)

    def _share_among(self, part: partition.Partition,
                     nodes: list[nodeinfo.NodeInfo],
                     shards: snapshot.Shards | None,
                     group: frozenset[str],
                     extra: dict[str, nodeinfo.NodeInfo]
                     ) -> list[nodeinfo.NodeInfo]:
        """The in-scope nodes the ring over ``group`` gives this host.

        For a fenced host's nodes when only some members may take its
        instances (:mod:`hosts.takeover`). With ``divide = shards`` the shards
        that ring gives this host beyond its own are listed too (into
        ``extra``); if Ironic cannot list them, they wait for the next
        period.
        """
        counts = shards.counts if shards is not None else None
        every = list(nodes)
        if shards is not None:
            wanted = set(sharding.mine(division_mod.shard_assignment(
                part, group, counts, self._rings), part.host))
            wanted -= set(shards.mine)
            if wanted:
                known = {n.uuid for n in nodes} | set(extra)
                try:
                    with self._ironic.fail_fast():
                        more = self._ironic.list_nodes(
                            part.scope, shards=sorted(wanted))
                except ironic.IronicError as e:
                    LOG.warning('Cannot list shards %(shards)s for the '
                                'takeover of a fenced host, the next period '
                                'tries again: %(err)s',
                                {'shards': ', '.join(sorted(wanted)),
                                 'err': e})
                    more = []
                extra.update((n.uuid, n) for n in more
                             if n.uuid not in known)
            every += list(extra.values())
        got = division_mod.share(every, group, part, counts, self._rings)
        return [n for n in every if n.uuid in got]

    def _handed_over(self, ctxt: nova_context.RequestContext,
                     mine: set[str]) -> None:
        """Recover the instances a draining peer handed over in flight.

        Only those new since the last period are looked at (none in the
        first: nova's start recovers what it finds then).
        """
        known, self._known = self._known, frozenset(mine)
        if known is None:
            return
        new = mine - known
        if not new:
            return
        try:
            self._recovery.note(recovery.handed_over(ctxt, self.host, new))
        except (nova_exc.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot tell whether the instances new on this host '
                        'were handed over in flight, the next period looks '
                        'again: %s', e)
            self._known = frozenset(mine - new)

    def handover(self, eligible: Callable[[frozenset[str]], frozenset[str]]
                 ) -> drain.Plan:
        """Where this host's instances go when it drains (:mod:`drain`).

        The ring of a period, with the same input (every node in scope and,
        with ``divide = shards``, the same shard counts), over the live
        peers without this host that ``eligible`` keeps. Every request is
        asked once: the service is stopping.

        :param eligible: members -> the ones that may take instances.
        :raises NotReady: Ironic, nova or the membership back end cannot
            answer, or the configuration cannot be enforced.
        """
        part = self._partition()
        with self._ironic.fail_fast():
            try:
                counts = self._ironic.shards() if part.by_shard else None
                nodes = self._ironic.list_nodes(part.scope,
                                                with_shard=part.by_shard)
            except ironic.IronicError as e:
                raise NotReady('cannot list Ironic nodes: %s' % e,
                               'ironic') from e
        in_scope = [n for n in nodes if ownership.in_scope(n, part.scope)]
        ctxt = nova_context.get_admin_context()
        with _peers_or_not_ready():
            mine = self._instances(ctxt)
            peers = self._in_force.membership(part).live_peers(part)
            members = eligible(peers - {part.host})
            found = orphans.Orphans().find(
                self.host, {n.instance_uuid for n in in_scope
                            if n.instance_uuid is not None}, mine, members)
        keep = mine | found.orphans
        try:
            destinations = (division_mod.placement(
                in_scope, members, part, counts, self._rings)
                if members else {})
        except loader.PluginError as e:
            raise NotReady(str(e), 'configuration') from e
        return drain.Plan(
            members=members,
            instances=types.MappingProxyType(
                {n.instance_uuid: n.uuid for n in in_scope
                 if n.instance_uuid is not None and
                 n.instance_uuid in keep}),
            destinations=types.MappingProxyType(destinations))

    def _divide(self, part: partition.Partition,
                nodes: list[nodeinfo.NodeInfo], mine: set[str],
                found: orphans.Found, members: frozenset[str],
                shards: snapshot.Shards | None) -> ownership.Division:
        return division_mod.divide(
            nodes, {part.host: mine | found.orphans}, members, part,
            shards.counts if shards is not None else None,
            self._rings)[part.host]

    def _shards(self, part: partition.Partition) -> snapshot.Shards:
        """The live peers and this host's shards (divide = shards).

        :raises NotReady: the peers or the ring cannot be had.
        :raises ironic.IronicError: Ironic cannot count the shards.
        """
        counts = self._ironic.shards()
        with _peers_or_not_ready():
            members = self._in_force.membership(part).live_peers(part)
            assignment = division_mod.shard_assignment(part, members,
                                                       counts, self._rings)
        return snapshot.Shards(members, assignment,
                      tuple(sharding.mine(assignment, part.host)),
                      unsharded=ironic.UNSHARDED in counts,
                      counts=types.MappingProxyType(dict(counts)))

    @staticmethod
    def _previous(part: partition.Partition,
                  old: snapshot.Snapshot | None
                  ) -> Mapping[str, nodeinfo.NodeInfo] | None:
        """Last period's nodes, if they were divided the same way."""
        if (old is None or old.partition is None or
                not old.partition.by_shard or
                old.partition.scope != part.scope):
            return None
        return old.nodes

    def _report(self, nodes: list[nodeinfo.NodeInfo], found: orphans.Found,
                division: ownership.Division) -> None:
        """Log orphans and unknown instances when they first appear."""
        orphaned = frozenset(n.uuid for n in nodes
                             if n.instance_uuid in found.orphans and
                             n.uuid in division.owned)
        unknown = frozenset(n.uuid for n in nodes
                            if n.instance_uuid in found.unknown and
                            n.uuid in division.share)
        for node in nodes:
            if node.uuid in orphaned - self._orphaned:
                LOG.warning('Ironic node %(node)s still carries instance '
                            '%(inst)s, which nova deleted %(how)s: this '
                            'host keeps the node and lists the instance, '
                            'so that nova\'s periodic task for running '
                            'deleted instances ([DEFAULT] '
                            'running_deleted_instance_action) acts on it.',
                            {'node': node.uuid, 'inst': node.instance_uuid,
                             'how': ('with no host (the ring gives the '
                                     'node to this host)'
                                     if node.instance_uuid in found.homeless
                                     else 'while this host was down')})
            elif node.uuid in unknown - self._unknown:
                LOG.warning('Ironic node %(node)s carries instance '
                            '%(inst)s, which nova has never heard of: no '
                            'host manages the node and nothing is deployed '
                            'over it. If that instance is not wanted, '
                            'undeploy the node in Ironic.',
                            {'node': node.uuid, 'inst': node.instance_uuid})
        self._orphaned, self._unknown = orphaned, unknown
