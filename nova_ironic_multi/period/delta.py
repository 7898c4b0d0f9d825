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
"""``listing = delta``: the period's listings, kept and brought up to date.

Each listing a period asks for (its filters: the scope, shard names,
``sharded``, the extra fields) is kept after its first full read. At the
start of every period (:meth:`DeltaListing.begin`) the host reads the nodes
Ironic changed since the last period, newest first, across every node with
no filter (a change that moves a node out of a listing must be seen too),
and applies each to every kept listing: it joins the listings whose filters
it now matches, leaves the others. The same filters Ironic applies are
applied here, so a kept listing holds what a full listing would return.

How far to read: Ironic has no ``updated_since`` filter and does not serve
``updated_at`` among a listing's ``fields``. So each page of the change
feed (``sort_key=updated_at``, descending) is followed by one read of its
last node's ``updated_at``: once that is older than the last period's start
(Ironic's clock, from the ``Date`` of its first answer then) minus
``delta_overlap``, every newer change came before it. A node never changed
since it was enrolled has no ``updated_at``; such nodes sort last on MySQL
and sqlite and first on PostgreSQL, so a page ending on one is read as the
end of the changes only when the page's first node has a time (nulls sort
last); otherwise the feed cannot say and a full listing runs.

What the feed cannot see, and what covers it:

* deleted nodes, and nodes enrolled and never changed since (no
  ``updated_at``): the UUIDs of every kept listing are listed every
  ``delta_check_periods`` periods; a node gone leaves, a new one makes its
  listing read in full again;
* writes Ironic does not mark (traits written straight into its
  database): a full listing every ``delta_resync_periods`` periods;
* anything else the feed gets wrong: a full listing when a probed node
  vanished, when a node's time is ahead of Ironic's answer by more than the
  overlap (clocks that disagree), when Ironic's clock went back, and after
  any failed read (nothing half-applied is kept).

And when the changes reach half the nodes the host keeps before the page
reaches the last period's time, a full listing costs Ironic less: the host
lists in full, and for the next 1, 2, 4, up to :data:`MAX_BACKOFF` periods
(doubling while the feed stays that busy) without reading it.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import datetime
from typing import Any, NamedTuple

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

#: Nodes per page of the change feed: a twentieth of the nodes the host
#: keeps, within these bounds (a page costs Ironic as many nodes' work).
PAGE = 200
MIN_PAGE = 20
#: At most this many periods in a row list in full without reading the
#: feed, once it was too busy to pay.
MAX_BACKOFF = 8
#: A node's time may pass the answer's by this much before the clocks
#: count as disagreeing (on top of ``delta_overlap``).
SLACK = datetime.timedelta(seconds=2)
DELTA = 'delta'


class Query(NamedTuple):
    """A listing's filters, as :meth:`ironic.Ironic.list_nodes` takes them."""

    scope: partition.Scope
    shards: tuple[str, ...] | None
    sharded: bool | None
    with_shard: bool
    with_group: bool

    @property
    def by_shard(self) -> bool:
        return (self.shards is not None or self.sharded is not None or
                self.with_shard)

    def matches(self, node: nodeinfo.NodeInfo) -> bool:
        """Whether Ironic's filters for this listing keep ``node``."""
        if not self.scope.contains(node.conductor_group, node.shard):
            return False
        if self.scope.shard is None and self.shards is not None:
            if node.shard not in self.shards:
                return False
        if self.sharded is not None and (node.shard is not None) != (
                self.sharded):
            return False
        return True

    def fields(self) -> tuple[str, ...]:
        """The fields this listing asks Ironic for."""
        fields = nodeinfo.listing_fields(self.scope)
        if self.with_group:
            fields.append('conductor_group')
        if self.by_shard:
            fields.append(nodeinfo.SHARD_FIELD)
        return tuple(set(fields))

    @staticmethod
    def project(node: nodeinfo.NodeInfo,
                fields: tuple[str, ...]) -> nodeinfo.NodeInfo:
        """The node as a listing of ``fields`` shows it."""
        return nodeinfo.NodeInfo(**{f: getattr(node, f) for f in fields})


@dataclasses.dataclass
class _Kept:
    nodes: dict[str, nodeinfo.NodeInfo]
    used: bool = True


class Untrusted(Exception):
    """The change feed cannot say what changed: list in full instead."""


class Busy(Untrusted):
    """So much changed that a full listing costs Ironic less."""


@dataclasses.dataclass
class Stats:
    """What the delta listing did, for tests, benches and the logs."""

    #: Periods that read the change feed, and the nodes it returned.
    refreshes: int = 0
    changed: int = 0
    #: Full listings of every kept listing, by reason.
    resyncs: dict[str, int] = dataclasses.field(default_factory=dict)
    #: UUID checks run.
    checks: int = 0


class DeltaListing:
    """:meth:`ironic.Ironic.list_nodes` that reads only what changed.

    With ``listing = full`` every call goes straight to Ironic. Used by the
    period's thread only.
    """

    def __init__(self, client: ironic.Ironic) -> None:
        self._ironic = client
        self._kept: dict[Query, _Kept] = {}
        #: Ironic's clock at the start of the last period's reads.
        self._clock: datetime.datetime | None = None
        self._periods = 0
        self._since_check = 0
        #: After a feed too busy to pay: periods left to list in full
        #: without reading it, and the last such wait (doubled each time).
        self._skip = 0
        self._backoff = 0
        self.stats = Stats()

    @property
    def kept(self) -> int:
        """How many listings are kept."""
        return len(self._kept)

    def _resync(self, reason: str, why: str) -> None:
        """List in full this period, from Ironic's clock now."""
        if self._kept:
            log = LOG.warning if reason == 'anomaly' else LOG.info
            log('Listing the nodes in full this period (listing = delta): '
                '%s', why)
        self.stats.resyncs[reason] = self.stats.resyncs.get(reason, 0) + 1
        metrics.LISTING_RESYNCS.labels(reason).inc()
        self._kept.clear()
        self._periods = self._since_check = 0
        # (One node's worth of a request, for its Date.)
        self._clock = self._now(self._ironic.changed_nodes(1).clock)

    def forget(self) -> None:
        """Drop every kept listing (the next period lists in full)."""
        self._kept.clear()
        self._clock = None

    def begin(self, conf: cfg.ConfigOpts) -> None:
        """Start a period: bring the kept listings up to date.

        :raises ironic.IronicError: a read failed; nothing is kept (the
            next period lists in full).
        """
        opts = conf.ironic_multi
        if opts.listing != DELTA:
            self.forget()
            return
        self._kept = {q: k for q, k in self._kept.items() if k.used}
        for kept in self._kept.values():
            kept.used = False
        self._periods += 1
        self._since_check += 1
        try:
            if not self._kept or self._clock is None:
                self._resync('start', 'nothing kept yet')
                return
            if self._periods >= opts.delta_resync_periods:
                self._resync('scheduled', 'every %d periods ([ironic_multi] '
                             'delta_resync_periods)'
                             % opts.delta_resync_periods)
                return
            if self._skip:
                self._skip -= 1
                self._resync('busy', 'the change feed was too busy to pay '
                             'lately; reading it again in %d period(s)'
                             % (self._skip + 1))
                return
            try:
                self._refresh(datetime.timedelta(seconds=opts.delta_overlap))
            except Busy as e:
                self._backoff = min(max(1, 2 * self._backoff), MAX_BACKOFF)
                self._skip = self._backoff
                self._resync('busy', str(e))
                return
            except Untrusted as e:
                self._resync('anomaly', str(e))
                return
            self._backoff = 0
            if self._since_check >= opts.delta_check_periods:
                self._check()
        except ironic.IronicError:
            self.forget()
            raise

    @staticmethod
    def _now(clock: datetime.datetime | None) -> datetime.datetime:
        if clock is None:
            # (An Ironic behind a proxy that strips Date: this host's
            # clock, which the overlap must then cover too.)
            return datetime.datetime.now(datetime.UTC)
        return clock

    def _refresh(self, overlap: datetime.timedelta) -> None:
        assert self._clock is not None
        since = self._clock - overlap
        kept = {u for k in self._kept.values() for u in k.nodes}
        size = max(min(MIN_PAGE, PAGE), min(PAGE, len(kept) // 20))
        page = self._ironic.changed_nodes(size)
        clock = self._now(page.clock)
        if clock < since:
            raise Untrusted('Ironic\'s clock went back from %s to %s' %
                            (self._clock.isoformat(), clock.isoformat()))
        changed: dict[str, nodeinfo.NodeInfo] = {}
        first = page.nodes[0].uuid if page.nodes else None
        while True:
            for node in page.nodes:
                changed.setdefault(node.uuid, node)
            if not page.more:
                # Every node was read: the kept listings are rebuilt.
                self._apply(changed, whole=True)
                break
            last = page.nodes[-1].uuid
            at = self._probe(last)
            answered = self._now(page.clock)
            # (Date has whole seconds, and the node may have changed
            # between the page and the probe.)
            if at is not None and at > answered + overlap + SLACK:
                raise Untrusted(
                    'node %s changed at %s, after Ironic\'s answer at %s '
                    'by more than [ironic_multi] delta_overlap (%d s): '
                    'Ironic\'s clocks disagree' % (
                        last, at.isoformat(), answered.isoformat(),
                        overlap.total_seconds()))
            if at is None:
                assert first is not None
                if self._probe(first) is None:
                    raise Untrusted(
                        'nodes never changed since enrolled sort first '
                        'and fill the page')
                # Never-changed nodes sort last: every change came first.
                self._apply(changed, whole=False)
                break
            if at < since:
                self._apply(changed, whole=False)
                break
            if len(changed) >= len(kept) // 2:
                raise Busy('%d nodes changed since the last period, half '
                           'as many as this host keeps or more: a full '
                           'listing costs Ironic less' % len(changed))
            page = self._ironic.changed_nodes(size, marker=last)
        self._clock = clock
        self.stats.refreshes += 1
        self.stats.changed += len(changed)
        LOG.debug('Read %(n)d changed nodes since %(since)s',
                  {'n': len(changed), 'since': since.isoformat()})

    def _probe(self, node_uuid: str) -> datetime.datetime | None:
        try:
            return self._ironic.updated_at(node_uuid)
        except ironic.NodeNotFound:
            raise Untrusted('node %s of the change feed vanished before its '
                            'time could be read' % node_uuid) from None

    def _apply(self, changed: dict[str, nodeinfo.NodeInfo],
               whole: bool) -> None:
        for query, kept in self._kept.items():
            fields = query.fields()
            if whole:
                kept.nodes = {u: query.project(n, fields)
                              for u, n in changed.items() if query.matches(n)}
                continue
            for u, node in changed.items():
                if query.matches(node):
                    kept.nodes[u] = query.project(node, fields)
                else:
                    kept.nodes.pop(u, None)

    def _check(self) -> None:
        """Catch deleted and never-changed new nodes (UUIDs only)."""
        self._since_check = 0
        self.stats.checks += 1
        for query in list(self._kept):
            kept = self._kept[query]
            there = self._ironic.node_uuids(query.scope, shards=query.shards,
                                            sharded=query.sharded)
            gone = set(kept.nodes) - there
            for u in gone:
                del kept.nodes[u]
            if there - set(kept.nodes):
                # Enrolled and never changed since: read this one in full.
                del self._kept[query]
            if gone or query not in self._kept:
                LOG.info('Nodes deleted or enrolled without a change Ironic '
                         'marks: %(gone)d gone%(new)s',
                         {'gone': len(gone),
                          'new': '' if query in self._kept else
                          ', new ones (listed in full)'})

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False,
                   with_group: bool = False) -> list[nodeinfo.NodeInfo]:
        """As :meth:`ironic.Ironic.list_nodes`; kept with ``delta``."""
        # (Only the filters given, as Ironic's callers ask.)
        asked: dict[str, Any] = {}
        if shards is not None:
            asked['shards'] = shards
        if sharded is not None:
            asked['sharded'] = sharded
        if with_shard:
            asked['with_shard'] = True
        if with_group:
            asked['with_group'] = True
        if self._clock is None:
            return self._ironic.list_nodes(scope, **asked)
        query = Query(scope, tuple(sorted(set(shards)))
                      if shards is not None else None, sharded,
                      with_shard, with_group)
        kept = self._kept.get(query)
        if kept is None:
            nodes = self._ironic.list_nodes(scope, **asked)
            kept = self._kept[query] = _Kept({n.uuid: n for n in nodes})
        kept.used = True
        return list(kept.nodes.values())

    def __getattr__(self, name: str) -> Any:
        # Every other read (a node, the node of an instance) goes to Ironic.
        return getattr(self._ironic, name)
