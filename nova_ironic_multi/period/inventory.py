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

A refresh runs the period's pipeline (:mod:`.pipeline`: list, instances,
peers, divide, take over), swaps in the snapshot it makes, then runs the
side jobs (:mod:`.jobs`: volume targets left on free nodes, the deploys
spawn gave up on, the recovery of actions cut short, the unclaimed-build
sweep, claims left by moves), once the new division is in force.

The snapshot is immutable and swapped in whole: readers never lock and
never see half a refresh. Only one refresh runs at a time; a caller that
waited for another's refresh uses its result. Fresh reads of single nodes
(after this host changed one) are kept over an older listing.
"""

from __future__ import annotations

from collections.abc import Callable
import threading
import time
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.actions import followups
from nova_ironic_multi.division import partition
from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.period import abandoned
from nova_ironic_multi.period import health
from nova_ironic_multi.period import in_force
from nova_ironic_multi.period import jobs
from nova_ironic_multi.period import leftovers
from nova_ironic_multi.period import pipeline
from nova_ironic_multi.period import snapshot as snapshot_mod
from nova_ironic_multi.period import unclaimed

LOG = logging.getLogger(__name__)

# The names callers use, from where they live.
NotReady = pipeline.NotReady
Snapshot = snapshot_mod.Snapshot
EMPTY = snapshot_mod.EMPTY


class Inventory:
    """The node cache of one service and the refresh that fills it."""

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 host: str,
                 later: followups.Followups | None = None) -> None:
        self._conf = conf
        self._ironic = client
        #: The partition in force and the membership plugin.
        self.in_force = in_force.InForce(conf, host)
        self._snapshot: snapshot_mod.Snapshot | None = None
        self._refreshes = 0
        self._refresh_lock = threading.Lock()
        self._update_lock = threading.Lock()
        #: Fresh reads of single nodes (update()), by node UUID, with the
        #: time they were read: newer than a listing that began earlier.
        self._fresh: dict[str, tuple[float, nodeinfo.NodeInfo]] = {}
        #: What actions on nodes leave for the periods (the driver gives
        #: its provisioner the same queue).
        self.followups = later if later is not None else followups.Followups()
        self._leftovers = leftovers.LeftoverTargets(client)
        self._abandoned = abandoned.AbandonedDeploys(client)
        self._recovery = recovery.Recovery(client)
        self._unclaimed = unclaimed.UnclaimedBuilds(conf)
        #: The state file ``nova-ironic-multi health`` reads, and metrics.
        self._report = health.Report(conf)
        self._pipeline = pipeline.Pipeline(conf, client, self.in_force,
                                           self._recovery)
        #: The side jobs, in the order a period runs them.
        self.jobs: tuple[jobs.Job, ...] = (
            jobs.RemoveLeftovers(self._leftovers),
            jobs.UndoAbandoned(self._abandoned),
            jobs.Recover(self._recovery),
            jobs.SweepUnclaimed(self._unclaimed),
            jobs.ReleaseClaims(),
            jobs.PublishTaskAges(),
            jobs.PublishSettings())

    @property
    def host(self) -> str:
        """This service's host name (nova's, once its manager starts)."""
        return self.in_force.host

    @host.setter
    def host(self, host: str) -> None:
        self.in_force.host = host

    # Configuration -------------------------------------------------------

    def current_partition(self) -> partition.Partition:
        """The partition in force (see :meth:`.in_force.InForce.partition`).

        :raises partition.InvalidPartition: the options are invalid and
            there has never been a good partition (start-up).
        """
        return self.in_force.partition()

    def reloaded(self) -> None:
        """The configuration files were re-read (SIGHUP): check them now."""
        self.in_force.reloaded()

    def start(self) -> partition.Partition:
        """Check the partition and start the membership plugin (init_host).

        :raises partition.InvalidPartition: the options are invalid.
        :raises loader.PluginError: an unknown plugin is configured.
        :raises membership.MembershipMisconfigured: the membership plugin
            cannot work with its configuration.
        """
        return self.in_force.start()

    def stop(self) -> None:
        self.in_force.stop()

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
                self._pipeline.lister.reserved(item.instance_uuid)

    # Refresh -------------------------------------------------------------

    def refresh(self) -> snapshot_mod.Snapshot:
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
            try:
                computed = self._pipeline.compute(self._snapshot)
            except pipeline.NotReady as e:
                self._report.not_ready(self.host, str(e), e.kind,
                                       time.monotonic() - begun)
                raise
            self._log_change(computed)
            snapshot = computed.snapshot
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
                old.nodes if old is not None else None, snapshot.nodes,
                snapshot.partition))
            self._report.succeeded(self._outcome(computed, snapshot, begun))
            return snapshot

    def _outcome(self, computed: pipeline.Computed,
                 snapshot: snapshot_mod.Snapshot,
                 begun: float) -> health.Outcome:
        assert snapshot.partition is not None
        assert snapshot.division is not None
        orphaned, unknown = self._pipeline.reported
        # A managed node is free or carries one of this host's instances
        # or orphans (rule 3 keeps no other).
        managed = len(snapshot.nodes)
        return health.Outcome(
            host=self.host, partition=snapshot.partition,
            members=snapshot.members, managed=managed,
            free=managed - snapshot.division.with_instance,
            with_instance=snapshot.division.with_instance - orphaned,
            orphaned=orphaned, share=len(snapshot.division.share),
            unknown=unknown,
            seconds=time.monotonic() - begun,
            listing_seconds=computed.list_seconds)

    def watch_builds(self, manager: Any) -> None:
        """Let the unclaimed-build sweep see what ``manager`` holds.

        See :class:`unclaimed.Held`.
        """
        self._unclaimed.held.guard(manager)

    def building_here(self, instance_uuid: str) -> bool:
        """Whether this process holds or runs the build of an instance."""
        return instance_uuid in self._unclaimed.held

    def handover(self, eligible: Callable[[frozenset[str]], frozenset[str]]
                 ) -> drain.Plan:
        """Where this host's instances go when it drains (:mod:`drain`).

        See :meth:`.pipeline.Pipeline.handover`.

        :raises NotReady: the plan cannot be made now.
        """
        return self._pipeline.handover(eligible)

    def _log_change(self, computed: pipeline.Computed) -> None:
        old, new = self._snapshot, computed.snapshot
        assert new.division is not None and new.partition is not None
        args = {
            'owned': len(new.nodes), 'inst': new.division.with_instance,
            'free': new.division.free, 'listed': computed.listed,
            'foreign': new.division.foreign,
            'out': new.division.out_of_scope,
            'members': ','.join(sorted(new.members)),
            'ring': (new.partition.ring if not new.partition.by_shard
                     else '%s by shard, listing %d shard(s)'
                     % (new.partition.ring, len(new.shards))),
            'list_s': computed.list_seconds,
            'rest_s': computed.rest_seconds,
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

    def current(self) -> snapshot_mod.Snapshot:
        """The last snapshot, refreshing once if there is none yet."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self.refresh()
        return snapshot

    def cached(self) -> snapshot_mod.Snapshot:
        """The last snapshot, never refreshing (empty before the first)."""
        return self._snapshot or snapshot_mod.EMPTY

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

    def _keep_fresh(self, snapshot: snapshot_mod.Snapshot,
                    begun: float) -> snapshot_mod.Snapshot:
        """``snapshot`` with the reads made since its listing ``begun``.

        Older reads are dropped: the listing has newer records of them.
        Called under the update lock.
        """
        self._fresh = {u: (t, n) for u, (t, n) in self._fresh.items()
                       if t >= begun}
        kept = [n for u, (_, n) in self._fresh.items() if u in snapshot.nodes]
        # One copy of the snapshot for all of them.
        return snapshot.with_node(*kept) if kept else snapshot
