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
"""The nodes this service manages, refreshed once per resource-tracker run.

One refresh is the whole flow of a period:

1. resolve the partition from the configuration (mutable options are read
   now; an invalid value keeps the last good partition);
2. list the nodes in scope from Ironic (one paginated listing; with
   ``divide = shards``, this host's shards, the nodes without a shard and
   the nodes of its instances: see :mod:`period.listing`);
3. read this host's instances from nova, *after* the listing, so a node
   deployed meanwhile is not mistaken for another host's (nova bug 1841481);
4. ask the membership plugin who the live peers are;
5. let the ring and the three ownership rules pick this host's nodes;
6. with ``takeover = fenced``, take over the instances of forced down
   hosts on the nodes the ring gives this host (see :mod:`hosts.takeover`);
7. remove volume targets left on free nodes once Ironic is done with them
   (a few nodes per period: see :mod:`leftovers`), undo the deploys
   spawn gave up on but could not undo (see :mod:`abandoned`), and
   recover the instances taken over (or handed over by a draining peer)
   in the middle of an action (see :mod:`hosts.recovery`), once the new
   division
   is in force.

The result is an immutable snapshot, swapped in whole: readers never lock
and never see half a refresh. Only one refresh runs at a time; a caller
that waited for another's refresh uses its result.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import dataclasses
import threading
import time
import types
from typing import Any, NamedTuple

from nova import context as nova_context
from nova import exception as nova_exc
from nova import objects
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.actions import followups
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.conf import reading
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
from nova_ironic_multi.period import abandoned
from nova_ironic_multi.period import jobs
from nova_ironic_multi.period import leftovers
from nova_ironic_multi.period import listing
from nova_ironic_multi.period import orphans
from nova_ironic_multi.period import unclaimed
from nova_ironic_multi import rings

LOG = logging.getLogger(__name__)


class NotReady(Exception):
    """The division cannot be computed now; keep what nova has."""


@contextlib.contextmanager
def _peers_or_not_ready() -> Iterator[None]:
    """Turn a failure to learn the peers (or the ring) into NotReady."""
    try:
        yield
    except (membership.MembershipUnavailable, nova_exc.NovaException,
            oslo_messaging.MessagingException) as e:
        # (On a compute host nova's objects go through the conductor.)
        raise NotReady('cannot determine the peers: %s' % e) from e
    except loader.PluginError as e:
        LOG.error('%s', e)
        raise NotReady(str(e)) from e


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
                                   by_instance=_index(nodes))


def _index(nodes: Mapping[str, nodeinfo.NodeInfo]) -> Mapping[str, str]:
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


class Inventory:
    """The node cache of one service and the refresh that fills it."""

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 host: str,
                 later: followups.Followups | None = None) -> None:
        self._conf = conf
        self._ironic = client
        self.host = host
        self._rings = rings.RingCache()
        self._membership: membership.Membership | None = None
        self._good: partition.Partition | None = None
        self._snapshot: Snapshot | None = None
        self._refreshes = 0
        self._refresh_lock = threading.Lock()
        self._update_lock = threading.Lock()
        #: Fresh reads of single nodes (update()), by node UUID, with the
        #: time they were read: newer than a listing that began earlier.
        self._fresh: dict[str, tuple[float, nodeinfo.NodeInfo]] = {}
        self._orphans = orphans.Orphans()
        self._lister = listing.ShardListing(client)
        #: What actions on nodes leave for the periods (the driver gives
        #: its provisioner the same queue).
        self.followups = later if later is not None else followups.Followups()
        self._leftovers = leftovers.LeftoverTargets(client)
        self._abandoned = abandoned.AbandonedDeploys(client)
        self._takeover = takeover.Takeover(conf)
        self._recovery = recovery.Recovery(client)
        self._unclaimed = unclaimed.UnclaimedBuilds(conf)
        #: The side jobs, in the order a period runs them.
        self.jobs: tuple[jobs.Job, ...] = (
            jobs.RemoveLeftovers(self._leftovers),
            jobs.UndoAbandoned(self._abandoned),
            jobs.Recover(self._recovery),
            jobs.SweepUnclaimed(self._unclaimed),
            jobs.ReleaseClaims())
        #: This host's instances as of the last period (None: none yet).
        self._known: frozenset[str] | None = None
        #: Nodes last logged as orphans, and as carrying unknown instances.
        self._orphaned: frozenset[str] = frozenset()
        self._unknown: frozenset[str] = frozenset()

    # Configuration -------------------------------------------------------

    def current_partition(self) -> partition.Partition:
        """The partition in force: the options now, or the last good ones.

        :raises partition.InvalidPartition: the options are invalid and
            there has never been a good partition (start-up).
        """
        # Other readers of the options read oslo.config's cache: drop what
        # a read under way during the last reload left there.
        reading.settle(self._conf)
        try:
            part = partition_opts.resolve(self._conf, self.host)
        except (partition.InvalidPartition, cfg.Error, ValueError) as e:
            error: Exception | None = e
        else:
            error = None
        if error is not None:
            if self._good is None:
                raise partition.InvalidPartition(str(error)) from error
            # Outside the except block, so the log line is the message alone.
            LOG.error('Invalid partition options, still using the last '
                      'good ones (%(good)s): %(error)s',
                      {'good': self._good.summary(), 'error': error})
            return self._good
        if self._good is not None and part != self._good:
            LOG.info('Partition changed from %(old)s to %(new)s',
                     {'old': self._good.summary(), 'new': part.summary()})
        self._good = part
        return part

    def reloaded(self) -> None:
        """The configuration files were re-read (SIGHUP): check them now.

        The next refresh applies a valid partition; an invalid one is
        logged here, naming the option, and the last good one stays.
        """
        try:
            self.current_partition()
        except partition.InvalidPartition as e:
            LOG.error('Reload rejected: %s', e)

    def _take_followups(self) -> None:
        """Hand what actions left so far to the period's jobs.

        Called as a period begins and again before its side jobs run, so a
        sweep sees what an action left while the period listed. Each job
        keeps what it is given until it is done with it, so a period that
        is NotReady loses nothing. A reservation reaches the shard listing
        before the next period's reads (``divide = shards``: the node may
        lie in a shard another host lists).
        """
        for item in self.followups.take():
            if isinstance(item, followups.TargetsLeft):
                self._leftovers.note(item.node_uuid)
            elif isinstance(item, followups.AbandonedDeploy):
                self._abandoned.note(item.node_uuid, item.instance_uuid)
            else:
                self._lister.reserved(item.instance_uuid)

    def membership(self, part: partition.Partition) -> membership.Membership:
        """The started membership plugin of ``part``.

        A plugin is started once, when it is loaded; one that another
        replaces is stopped first.

        :raises loader.PluginError: no one plugin has that name.
        :raises membership.MembershipMisconfigured: it cannot start.
        """
        plugin = self._membership
        if plugin is None or plugin.name != part.membership_driver:
            if plugin is not None:
                self._membership = None
                plugin.stop()
            plugin = membership.load(part.membership_driver, self._conf,
                                     self.host)
            plugin.start()
            self._membership = plugin
        return plugin

    def start(self) -> partition.Partition:
        """Check the partition and start the membership plugin (init_host).

        :raises partition.InvalidPartition: the options are invalid.
        :raises loader.PluginError: an unknown plugin is configured.
        :raises membership.MembershipMisconfigured: the membership plugin
            cannot work with its configuration.
        """
        part = self.current_partition()
        loader.plugin(loader.RINGS_NAMESPACE, part.ring_algorithm,
                      '[ironic_multi] ring_algorithm')
        self.membership(part)
        return part

    def stop(self) -> None:
        plugin, self._membership = self._membership, None
        if plugin is not None:
            plugin.stop()

    def _listed(self, part: partition.Partition, ok: bool) -> None:
        """Tell the membership plugin whether this period listed Ironic."""
        try:
            plugin = self.membership(part)
        except (membership.MembershipUnavailable, loader.PluginError):
            return   # the period says why when it asks for the peers
        plugin.listed(ok)

    # Refresh -------------------------------------------------------------

    def refresh(self) -> Snapshot:
        """Compute the division now (or wait for the one under way).

        Every Ironic request of a refresh is asked once
        (:meth:`ironic.Ironic.fail_fast`): an outage is reported in the
        period it happens, and the next period is the retry.

        :raises NotReady: Ironic, nova or the membership back end cannot
            answer, or the configuration cannot be enforced.
        """
        seen = self._refreshes
        with self._refresh_lock, self._ironic.fail_fast():
            if self._refreshes != seen and self._snapshot is not None:
                return self._snapshot
            begun = time.monotonic()
            self._take_followups()
            snapshot = self._compute()
            # Under the update lock: an update() reading the old snapshot
            # must not write it back over this one.
            with self._update_lock:
                snapshot = self._keep_fresh(snapshot, begun)
                old, self._snapshot = self._snapshot, snapshot
            self._refreshes += 1
            # Each bounded, never retried, and never failing the period:
            # the division stands. What actions left during this period is
            # theirs too, as if they had been told at once.
            self._take_followups()
            jobs.run(self.jobs, jobs.Period(
                self.host, self._refreshes,
                old.nodes if old is not None else None, snapshot.nodes))
            return snapshot

    def _compute(self) -> Snapshot:
        try:
            part = self.current_partition()
        except partition.InvalidPartition as e:
            raise NotReady(str(e)) from e
        started = time.monotonic()
        shards: Shards | None = None
        try:
            if part.by_shard:
                self._ironic.require_shards('[ironic_multi] divide = shards')
                # The peers first: they decide which shards to list.
                shards = self._shards(part)
                listed = self._lister.share(part.scope, shards.mine,
                                            self._previous(part),
                                            unsharded=shards.unsharded)
                nodes = list(listed.nodes.values())
            else:
                # Its memory is of no use to the next shard period, which
                # lists the whole scope; nor is it kept growing here.
                self._lister.forget()
                nodes = self._ironic.list_nodes(part.scope)
        except ironic.VersionNotSupported as e:
            LOG.error('Cannot enforce the partition (%(scope)s): %(error)s',
                      {'scope': part.scope.describe(), 'error': e})
            self._listed(part, False)
            raise NotReady(str(e)) from e
        except ironic.IronicError as e:
            self._listed(part, False)
            raise NotReady('cannot list Ironic nodes: %s' % e) from e
        self._listed(part, True)
        listed_at = time.monotonic()
        ctxt = nova_context.get_admin_context()
        with _peers_or_not_ready():
            # After the listing, never before (nova bug 1841481).
            mine = set(objects.InstanceList.get_uuids_by_host(ctxt,
                                                              self.host))
            if shards is not None:
                try:
                    self._lister.complete(part.scope, listed, mine)
                except ironic.IronicError as e:
                    raise NotReady('cannot read the nodes of this host\'s '
                                   'instances: %s' % e) from e
                nodes = list(listed.nodes.values())
            on_nodes = {n.instance_uuid for n in nodes
                        if n.instance_uuid is not None and
                        ownership.in_scope(n, part.scope)}
            members = (shards.members if shards is not None else
                       self.membership(part).live_peers(part))
            found = self._orphans.find(self.host, on_nodes, mine, members)
        try:
            # The division the operator command computes too. An orphan
            # stays with the host of its deleted instance, so nova's reaper
            # there sees it (rule 1 for the instance it had).
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
                mine |= moved.live
                # Nodes listed for the takeover alone (divide = shards)
                # whose instances are this host's now.
                nodes = nodes + [n for n in extra.values()
                                 if n.instance_uuid in moved.live or
                                 n.instance_uuid in moved.orphans]
                self._recovery.note(moved.inflight)
                self._orphans.forget(moved.orphans)
                found = orphans.Found(found.orphans | moved.orphans,
                                      found.unknown)
                division = self._divide(part, nodes, mine, found, members,
                                        shards)
        except loader.PluginError as e:
            LOG.error('%s', e)
            raise NotReady(str(e)) from e
        self._handed_over(ctxt, mine)
        owned = {n.uuid: n for n in nodes if n.uuid in division.owned}
        self._report(nodes, found, division)
        snapshot = Snapshot(types.MappingProxyType(owned), _index(owned),
                            part, members, division,
                            shards.mine if shards is not None else ())
        self._log_change(snapshot, len(nodes), listed_at - started,
                         time.monotonic() - listed_at)
        return snapshot

    def _share_among(self, part: partition.Partition,
                     nodes: list[nodeinfo.NodeInfo], shards: Shards | None,
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

    def watch_builds(self, manager: Any) -> None:
        """Let the unclaimed-build sweep see what ``manager`` holds.

        See :class:`unclaimed.Held`.
        """
        self._unclaimed.held.guard(manager)

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
        try:
            part = self.current_partition()
        except partition.InvalidPartition as e:
            raise NotReady(str(e)) from e
        with self._ironic.fail_fast():
            try:
                counts = self._ironic.shards() if part.by_shard else None
                nodes = self._ironic.list_nodes(part.scope,
                                                with_shard=part.by_shard)
            except ironic.IronicError as e:
                raise NotReady('cannot list Ironic nodes: %s' % e) from e
        in_scope = [n for n in nodes if ownership.in_scope(n, part.scope)]
        ctxt = nova_context.get_admin_context()
        with _peers_or_not_ready():
            # After the listing, never before (nova bug 1841481).
            mine = set(objects.InstanceList.get_uuids_by_host(ctxt,
                                                              self.host))
            members = eligible(self.membership(part).live_peers(part) -
                               {part.host})
            found = orphans.Orphans().find(
                self.host, {n.instance_uuid for n in in_scope
                            if n.instance_uuid is not None}, mine, members)
        keep = mine | found.orphans
        try:
            destinations = (division_mod.placement(
                in_scope, members, part, counts, self._rings)
                if members else {})
        except loader.PluginError as e:
            raise NotReady(str(e)) from e
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
                shards: Shards | None) -> ownership.Division:
        return division_mod.divide(
            nodes, {part.host: mine | found.orphans}, members, part,
            shards.counts if shards is not None else None,
            self._rings)[part.host]

    def _shards(self, part: partition.Partition) -> Shards:
        """The live peers and this host's shards (divide = shards).

        :raises NotReady: the peers or the ring cannot be had.
        :raises ironic.IronicError: Ironic cannot count the shards.
        """
        counts = self._ironic.shards()
        with _peers_or_not_ready():
            members = self.membership(part).live_peers(part)
            assignment = division_mod.shard_assignment(part, members,
                                                       counts, self._rings)
        return Shards(members, assignment,
                      tuple(sharding.mine(assignment, part.host)),
                      unsharded=ironic.UNSHARDED in counts,
                      counts=types.MappingProxyType(dict(counts)))

    def _previous(self, part: partition.Partition
                  ) -> Mapping[str, nodeinfo.NodeInfo] | None:
        """Last period's nodes, if they were divided the same way."""
        old = self._snapshot
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
                            '%(inst)s, which nova deleted while this host '
                            'was down: this host keeps the node and lists '
                            'the instance, so that nova\'s periodic task '
                            'for running deleted instances ([DEFAULT] '
                            'running_deleted_instance_action) acts on it.',
                            {'node': node.uuid, 'inst': node.instance_uuid})
            elif node.uuid in unknown - self._unknown:
                LOG.warning('Ironic node %(node)s carries instance '
                            '%(inst)s, which nova has never heard of: no '
                            'host manages the node and nothing is deployed '
                            'over it. If that instance is not wanted, '
                            'undeploy the node in Ironic.',
                            {'node': node.uuid, 'inst': node.instance_uuid})
        self._orphaned, self._unknown = orphaned, unknown

    def _log_change(self, new: Snapshot, listed: int, list_seconds: float,
                    rest_seconds: float) -> None:
        old = self._snapshot
        assert new.division is not None and new.partition is not None
        args = {
            'owned': len(new.nodes), 'inst': new.division.with_instance,
            'free': new.division.free, 'listed': listed,
            'foreign': new.division.foreign,
            'out': new.division.out_of_scope,
            'members': ','.join(sorted(new.members)),
            'ring': (new.partition.ring if not new.partition.by_shard
                     else '%s by shard, listing %d shard(s)'
                     % (new.partition.ring, len(new.shards))),
            'list_s': list_seconds, 'rest_s': rest_seconds,
        }
        changed = (old is None or old.members != new.members or
                   old.shards != new.shards or
                   old.nodes.keys() != new.nodes.keys())
        log = LOG.info if changed else LOG.debug
        log('Managing %(owned)d Ironic nodes (%(inst)d with this host\'s '
            'instances) of %(listed)d listed: %(free)d free in scope, '
            '%(foreign)d with other hosts\' instances, %(out)d out of '
            'scope; peers %(members)s, ring %(ring)s; listing took '
            '%(list_s).2fs, division %(rest_s).3fs', args)

    # Reading the cache ----------------------------------------------------

    def current(self) -> Snapshot:
        """The last snapshot, refreshing once if there is none yet."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self.refresh()
        return snapshot

    def cached(self) -> Snapshot:
        """The last snapshot, never refreshing (empty before the first)."""
        return self._snapshot or EMPTY

    def update(self, node: nodeinfo.NodeInfo) -> None:
        """Record a fresh read of a managed node (after a state change).

        A period whose listing began before this read keeps it too: nova's
        power sync reads the cache, and a listing older than this host's
        own power change would make it undo the change ("Instance is not
        stopped. Calling the stop API", or "Instance shutdown by itself").
        """
        with self._update_lock:
            self._fresh[node.uuid] = (time.monotonic(), node)
            snapshot = self._snapshot
            if snapshot is not None and node.uuid in snapshot.nodes:
                self._snapshot = snapshot.with_node(node)

    def _keep_fresh(self, snapshot: Snapshot, begun: float) -> Snapshot:
        """``snapshot`` with the reads made since its listing ``begun``.

        Older reads are dropped: the listing has newer records of them.
        Called under the update lock.
        """
        self._fresh = {u: (t, n) for u, (t, n) in self._fresh.items()
                       if t >= begun}
        kept = [n for u, (_, n) in self._fresh.items() if u in snapshot.nodes]
        # One copy of the snapshot for all of them.
        return snapshot.with_node(*kept) if kept else snapshot
