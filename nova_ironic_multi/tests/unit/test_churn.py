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
"""A fleet under churn, as a hypothesis state machine.

Each simulated nova-compute host runs the real refresh
(:class:`inventory.Inventory`: :func:`partition_opts.resolve` on its own
configuration, the real membership plugins, the ring cache and plugins,
:func:`ownership.select`, the orphan rules). What is simulated is the world
they read: Ironic's nodes, nova's service records (disabled, forced down,
last heartbeat, whether the host has compute nodes), its instances and its
compute node rows, and nova's scheduler and resource tracker around them.

Hosts join, leave, die, come back, are disabled and forced down; nodes are
enrolled, deleted, put into maintenance, moved between conductor groups and
labelled with shards; shards are renamed, merged, removed and re-added;
the operator switches ``divide`` between ``nodes`` and ``shards`` and each
host applies it at its own SIGHUP; nova-compute hosts of another hypervisor
start in the same cell (without a compute node until they report one), die
and start again; instances are scheduled onto any compute
node row nova has (nova keeps the rows a host stops reporting unless Ironic
deleted the node, so the scheduler may pick one its host no longer
manages), reserved by that host later if the node is free and in its scope,
and deleted (locally by nova-api when their host is down, leaving an orphan
its host reaps later); each host refreshes at its own moments, and time
passes. Five ways to run a fleet are drawn: no partition and
``servicegroup`` or ``tooz`` membership, and conductor groups with
``peer_list`` and ``servicegroup``, ``static`` or ``tooz`` membership; each
in either divide mode. With tooz, the real plugin heartbeats and reads a
fake back end (tests/fixtures/fake_tooz.py) in fleet time (members
expire, readers drop expired members, never themselves), and its faults are
drawn too: a host's heartbeats held while its periods go on, and the back
end losing every group.

Invariants:

1. at every step, a node carrying an instance is managed (has its compute
   node, and is in a host's division) by no host but the instance's, except
   by a host that has not refreshed since the instance was placed;
2. once every live host has refreshed on one view of the world (repeated
   while a refresh changes what another host sees, and with tooz while a
   heartbeat still changes a group: a host that read its group before a
   peer joined it again sees that peer at its next beat), every host
   counts as its peers exactly the live, enabled hosts of its scope (not
   merely the same set as the others), every in-scope free node has
   exactly one manager, and its compute node is that host's;
3. between two such settled views, a node free in both keeps its manager
   unless the members, the partition or the nodes of a scope containing it
   changed (with ``divide = shards``: or the shard labels and counts).

The CI profile (``nova_ironic_multi.tests.profiles``) runs at least 10^4
steps per ring, and fails when a kind of step (a rule, a settled check, a
settled check in shard mode) was taken fewer than once per 5000 steps;
``--hypothesis-profile churn-deep`` runs 2 * 10^5.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
import contextlib
import dataclasses
import datetime
import logging
import types
from typing import Any
from unittest import mock
import uuid

from hypothesis import settings
from hypothesis import stateful
from hypothesis import strategies as st
from nova import exception as nova_exc
from nova import objects
from oslo_config import cfg
import pytest

from nova_ironic_multi.actions import followups
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import ownership
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import pages
from nova_ironic_multi.ironic import states
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import servicegroup
from nova_ironic_multi.membership import toozgroup
from nova_ironic_multi.period import inventory
from nova_ironic_multi.period import pipeline
from nova_ironic_multi.tests.fixtures import change_feed
from nova_ironic_multi.tests.fixtures import fake_tooz
from nova_ironic_multi.tests import profiles

#: Host names as operators write them: the ring must not care (1866380).
NAMES = ('host1', 'Host2', 'HOST3', 'host4', 'hOst5')
#: nova-compute hosts of another hypervisor (libvirt) in the same cell.
OTHERS = ('libvirt1', 'libvirt2')
#: Conductor groups with hosts; nodes may also sit in UNSERVED.
GROUPS = ('rack-a', 'rack-b')
UNSERVED = 'rack-c'
#: nova's service_down_time, in ticks; live hosts heartbeat every tick.
DOWN_TIME = 3
#: Modes: (partitioned by conductor group, membership plugin).
MODES = ((False, 'servicegroup'), (True, 'servicegroup'), (True, 'static'),
         (False, 'tooz'), (True, 'tooz'))
#: tooz_member_timeout, in ticks: a member that stops heartbeating for
#: longer drops out of its group.
TOOZ_TIMEOUT = 2
#: What the ring divides (``[ironic_multi] divide``).
DIVIDES = ('nodes', 'shards')
#: Shard names nodes may carry (None: no shard).
SHARD_NAMES = ('s1', 's2', 's3', 's4')
#: ``[ironic_multi] listing``.
LISTINGS = ('full', 'delta')
#: A settled view must be reached within this many rounds of refreshes.
MAX_ROUNDS = 4
#: Per machine, how often each rule ran (and each settled view was checked).
RULES: collections.defaultdict[str, collections.Counter[str]] = (
    collections.defaultdict(collections.Counter))
NODE_NS = uuid.UUID('8a0a1e0c-2f6b-4d0e-9c2e-7a1b5d3c9f00')
INSTANCE_NS = uuid.UUID('3f1c7e52-90d4-4b8a-a6e1-0c5d2b9e4f11')
SERVICE_NS = uuid.UUID('5b7d2a10-6c3e-4f8a-9d1b-2e4c6a8f0b13')


@dataclasses.dataclass
class Service:
    """A nova-compute service record, as the membership plugins read it."""

    host: str
    updated_at: int
    disabled: bool = False
    forced_down: bool = False

    @property
    def uuid(self) -> str:
        # One record per host name: a restart keeps it.
        return str(uuid.uuid5(SERVICE_NS, self.host))


#: The node fields whose change Ironic marks with ``updated_at``.
MARKED = ('group', 'instance', 'maintenance', 'shard')
#: ``[ironic_multi] delta_overlap``, in seconds, and the largest skew drawn
#: for the clock of any Ironic process (two differ by twice as much).
OVERLAP = 60
#: Seconds per tick (nova's period) in Ironic's clocks.
TICK = 60.0
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@dataclasses.dataclass
class Node:
    group: str
    instance: str | None = None
    maintenance: bool = False
    shard: str | None = None
    #: Ironic's database id, and ``updated_at`` (None until a change).
    id: int = 0
    updated_at: datetime.datetime | None = None
    #: Whose clock stamps the changes (set last: enrolling is no change).
    fleet: Fleet | None = dataclasses.field(default=None, repr=False,
                                            compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        fleet = getattr(self, 'fleet', None)
        if name in MARKED and fleet is not None:
            object.__setattr__(self, 'updated_at', fleet.written())


@dataclasses.dataclass
class Instance:
    host: str
    node: str
    #: The step at which its node was reserved for it.
    placed_at: int
    deleted: bool = False
    #: Scheduled to its host, which has not reserved the node yet.
    building: bool = False


@dataclasses.dataclass
class Host:
    """One nova-compute process and the driver's cache in it."""

    name: str
    group: str | None
    conf: cfg.ConfigOpts
    inventory: inventory.Inventory
    #: ``[ironic_multi] divide`` in the files this process last read.
    divide: str = 'nodes'
    #: The step of its last refresh (-1: none since it started).
    refreshed_at: int = -1
    #: listing = delta: the same period with listing = full, run right
    #: after this host's own on the same world, and its last snapshot.
    twin: pipeline.Pipeline | None = None
    twin_snapshot: Any = None
    #: How many of its periods read the change feed so far.
    fed: int = 0

    @property
    def owned(self) -> frozenset[str]:
        return frozenset(self.inventory.cached().nodes)


class Fleet:
    """The world the hosts read: Ironic, nova's database, the clock."""

    def __init__(self) -> None:
        self.now = 0
        self.step = 0
        self.services: dict[str, Service] = {}
        self.nodes: dict[str, Node] = {}
        self.instances: dict[str, Instance] = {}
        #: compute_nodes rows: node -> host.
        self.compute_nodes: dict[str, str] = {}
        #: Hosts of another hypervisor that have their compute node row.
        self.other_rows: set[str] = set()
        #: Service UUIDs with this driver's marker in placement.
        self.marked: set[str] = set()
        self._infos: dict[tuple[str, str, str | None, bool, str | None],
                          nodeinfo.NodeInfo] = {}
        #: The change feed: the offsets of the clocks of Ironic's
        #: processes (API workers, conductors), in seconds; where nodes
        #: never changed sort (PostgreSQL: first).
        self.skews: tuple[float, ...] = (0.0,)
        self.nulls_first = False

    # Ironic's clocks --------------------------------------------------------

    def _clock(self, which: int) -> datetime.datetime:
        skew = self.skews[which % len(self.skews)]
        return EPOCH + datetime.timedelta(
            seconds=self.now * TICK + self.step * 0.001 + skew)

    def written(self) -> datetime.datetime:
        """The ``updated_at`` a change gets (one process's clock)."""
        return self._clock(self.step)

    def answered(self) -> datetime.datetime:
        """The ``Date`` of an answer (another process's clock)."""
        return self._clock(self.step + 1)

    # Ironic (the driver's client) -----------------------------------------

    @contextlib.contextmanager
    def fail_fast(self) -> Iterator[None]:
        yield

    def info(self, u: str) -> nodeinfo.NodeInfo:
        """The node as Ironic's API gives it (shared between equal reads)."""
        n = self.nodes[u]
        key = (u, n.group, n.instance, n.maintenance, n.shard)
        info = self._infos.get(key)
        if info is None:
            info = self._infos[key] = nodeinfo.NodeInfo(
                uuid=u, instance_uuid=n.instance,
                maintenance=n.maintenance, conductor_group=n.group,
                shard=n.shard,
                power_state=states.POWER_ON if n.instance else
                states.POWER_OFF,
                provision_state=states.ACTIVE if n.instance else
                states.AVAILABLE, resource_class='baremetal')
        return info

    def list_nodes(self, scope: Any, shards: list[str] | None = None,
                   sharded: bool | None = None, with_shard: bool = False,
                   **kwargs: Any) -> list[nodeinfo.NodeInfo]:
        # Ironic's filters: conductor group, shard names, sharded=false.
        return [self.info(u) for u, n in self.nodes.items()
                if scope.contains(n.group, n.shard) and
                (shards is None or n.shard in shards) and
                (sharded is None or (n.shard is not None) == sharded)]

    def _rows(self) -> list[change_feed.Row]:
        return [change_feed.Row(u, n.id, n.updated_at)
                for u, n in self.nodes.items()]

    def changed_nodes(self, limit: int,
                      marker: str | None = None) -> pages.Changed:
        rows, more = change_feed.page(self._rows(), limit, marker,
                                      self.nulls_first)
        return pages.Changed([self.info(r.uuid) for r in rows], more,
                             self.answered())

    def updated_at(self, node_uuid: str) -> datetime.datetime | None:
        if node_uuid not in self.nodes:
            raise ironic.NodeNotFound('node %s not found' % node_uuid)
        return self.nodes[node_uuid].updated_at

    def node_uuids(self, scope: Any, shards: list[str] | None = None,
                   sharded: bool | None = None) -> set[str]:
        return {n.uuid for n in self.list_nodes(scope, shards, sharded)}

    def shards(self, **kwargs: Any) -> dict[str, int]:
        # GET /v1/shards counts every node, whatever its conductor group.
        counts = collections.Counter(
            n.shard if n.shard is not None else ironic.UNSHARDED
            for n in self.nodes.values())
        return dict(counts)

    def require_shards(self, why: str) -> None:
        pass            # (Ironic 39 has API 1.82)

    def get_node(self, node_uuid: str, **kwargs: Any) -> nodeinfo.NodeInfo:
        if node_uuid not in self.nodes:
            raise ironic.NodeNotFound('node %s not found' % node_uuid)
        return self.info(node_uuid)

    def node_for_instance(self, instance_uuid: str,
                          **kwargs: Any) -> nodeinfo.NodeInfo | None:
        for u, n in self.nodes.items():
            if n.instance == instance_uuid:
                return self.info(u)
        return None

    def volume_targets(self, node_uuid: str,
                       once: bool = False) -> list[Any]:
        return []       # (no server of this fleet boots from a volume)

    # nova's objects ---------------------------------------------------------

    def uuids_by_host(self, ctxt: Any, host: str) -> list[str]:
        return [u for u, i in self.instances.items()
                if i.host == host and not i.deleted]

    def instances_by_filters(self, ctxt: Any, filters: dict[str, Any],
                             expected_attrs: Any = None) -> list[Any]:
        # Settled instances: no action under way (vm_state, task_state).
        return [mock.Mock(uuid=u, host=self.instances[u].host,
                          deleted=self.instances[u].deleted,
                          vm_state='active', task_state=None)
                for u in filters['uuid'] if u in self.instances]

    def ironic_computes(self, ctxt: Any, hv_type: str) -> list[Service]:
        # Enabled services with a compute node of hypervisor type ironic.
        hosts = set(self.compute_nodes.values())
        return [s for s in self.services.values()
                if not s.disabled and s.host in hosts]

    # placement (the membership markers) -------------------------------------

    def markers(self) -> frozenset[str]:
        return frozenset(self.marked)

    def publish(self, host: str, service_uuid: str) -> None:
        self.marked.add(service_uuid)

    def all_services(self, ctxt: Any, binary: str,
                     include_disabled: bool = False) -> list[Service]:
        return list(self.services.values())

    def service(self, ctxt: Any, host: str, binary: str) -> Service | None:
        return self.services.get(host)

    def compute_nodes_of(self, ctxt: Any, host: str) -> list[Any]:
        rows = [types.SimpleNamespace(hypervisor_type='ironic')
                for owner in self.compute_nodes.values() if owner == host]
        if host in self.other_rows:
            rows.append(types.SimpleNamespace(hypervisor_type='QEMU'))
        if not rows:
            raise nova_exc.ComputeHostNotFound(host=host)
        return rows

    def service_is_up(self, svc: Service) -> bool:
        # As nova's database servicegroup driver decides.
        return not svc.forced_down and self.now - svc.updated_at <= DOWN_TIME

    def usable(self, host: str) -> bool:
        """The scheduler would send a build there (ComputeFilter)."""
        svc = self.services.get(host)
        return (svc is not None and not svc.disabled and
                self.service_is_up(svc))


class ServiceGroupAPI:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def service_is_up(self, svc: Service) -> bool:
        return self.fleet.service_is_up(svc)


#: The fleet of the running state machine (the patched nova calls read it).
CURRENT: list[Fleet] = []


def _current() -> Fleet:
    return CURRENT[-1]


@contextlib.contextmanager
def simulated_nova() -> Iterator[None]:
    """nova's objects and servicegroup API answer from the current fleet."""
    patches: list[contextlib.AbstractContextManager[Any]] = [
        mock.patch.object(objects.InstanceList, 'get_uuids_by_host',
                          lambda *a: _current().uuids_by_host(*a)),
        mock.patch.object(objects.InstanceList, 'get_by_filters',
                          lambda *a, **k: _current().instances_by_filters(
                              *a, **k)),
        mock.patch.object(objects.ServiceList, 'get_all_computes_by_hv_type',
                          lambda *a: _current().ironic_computes(*a)),
        mock.patch.object(marker, 'read', lambda: _current().markers()),
        mock.patch.object(marker, 'publish',
                          lambda *a: _current().publish(*a)),
        mock.patch.object(objects.ServiceList, 'get_by_binary',
                          lambda *a, **k: _current().all_services(*a, **k)),
        mock.patch.object(objects.Service, 'get_by_host_and_binary',
                          lambda *a: _current().service(*a)),
        mock.patch.object(objects.ComputeNodeList, 'get_all_by_host',
                          lambda *a: _current().compute_nodes_of(*a)),
        mock.patch.object(servicegroup.servicegroup, 'API',
                          lambda: ServiceGroupAPI(_current())),
        # tooz: no background thread (the machine heartbeats each host at
        # moments it draws), no waiting for a first reading, fleet time.
        mock.patch.object(toozgroup.ToozMembership, 'start',
                          lambda self: None),
        mock.patch.object(toozgroup, 'FIRST_READING_WAIT', 0.0),
        mock.patch.object(toozgroup, 'time', types.SimpleNamespace(
            monotonic=lambda: float(_current().now),
            sleep=lambda seconds: None)),
    ]
    quiet = logging.getLogger('nova_ironic_multi')
    level = quiet.level
    # Every membership change is logged at INFO or WARNING; thousands of
    # them cost more than the refreshes.
    quiet.setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        try:
            yield
        finally:
            quiet.setLevel(level)


class Churn(stateful.RuleBasedStateMachine):
    """The fleet; subclasses choose the ring."""

    RING = ''

    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet()
        CURRENT.append(self.fleet)
        self.hosts: dict[str, Host] = {}
        self.partitioned = False
        self.membership = 'servicegroup'
        #: ``divide`` in the files the operator last pushed; the hosts that
        #: have not had their SIGHUP yet.
        self.divide = 'nodes'
        self.pending: set[str] = set()
        self.listing = 'full'
        self.resync = 1000
        self.node_count = 0
        self.instance_count = 0
        self._group_of: dict[str, str | None] = {}
        self.last_settled: dict[str, tuple[Any, str]] | None = None
        #: membership_driver = tooz: the back end, each process's
        #: coordinator, and the hosts whose heartbeats are held (a long GC
        #: pause, a stopped process, a network blip).
        # (A member is alive for TOOZ_TIMEOUT whole ticks after its beat.)
        self.tooz = fake_tooz.Backend(lambda: float(self.fleet.now),
                                      TOOZ_TIMEOUT + 0.5)
        self.coordinators: dict[str, fake_tooz.Coordinator] = {}
        #: Hosts of another hypervisor whose nova-compute runs.
        self.others: set[str] = set()
        self.stalled: set[str] = set()
        #: Why the last refresh of a host failed (NotReady), if it did.
        self.not_ready: dict[str, str] = {}

    def teardown(self) -> None:
        CURRENT.remove(self.fleet)

    # Helpers --------------------------------------------------------------

    def _tick(self, rule: str) -> None:
        self.fleet.step += 1
        profiles.STEPS[self.RING] += 1
        RULES[self.RING][rule] += 1

    def _alive(self) -> list[str]:
        return sorted(self.hosts)

    def _peer_list(self, group: str) -> list[str]:
        return sorted(n for n, s in self.fleet.services.items()
                      if self._group_of.get(n) == group)

    def _configure(self, host: Host) -> None:
        conf = host.conf
        conf.set_override('ring_algorithm', self.RING, group='ironic_multi')
        conf.set_override('membership_driver', self.membership,
                          group='ironic_multi')
        conf.set_override('divide', host.divide, group='ironic_multi')
        conf.set_override('listing', self.listing, group='ironic_multi')
        # Deleted and never-changed nodes are caught at each period's UUID
        # check, so every period must divide as a full listing does
        # (test_delta.py shows what a longer check interval misses).
        conf.set_override('delta_check_periods', 1, group='ironic_multi')
        conf.set_override('delta_resync_periods', self.resync,
                          group='ironic_multi')
        conf.set_override('delta_overlap', OVERLAP, group='ironic_multi')
        if self.membership == 'tooz':
            conf.set_override('tooz_backend_url', 'redis://127.0.0.1:6379',
                              group='ironic_multi')
            conf.set_override('tooz_member_timeout', TOOZ_TIMEOUT,
                              group='ironic_multi')
        if host.group is not None:
            conf.set_override('partition_key', host.group,
                              group='ironic_multi')
            conf.set_override('peer_list', self._peer_list(host.group),
                              group='ironic_multi')

    def _reconfigure_group(self, group: str | None) -> None:
        # The operator's configuration management pushes the new peer_list
        # to every host of the group (with a SIGHUP).
        if group is None:
            return
        for h in self.hosts.values():
            if h.group == group:
                self._configure(h)

    def _start(self, name: str) -> None:
        conf = cfg.ConfigOpts()
        nim_conf.register_opts(conf)
        # No state file: the health probe is not what this machine checks.
        conf.set_override('state_file', '', group='ironic_multi')
        inv = inventory.Inventory(conf, self.fleet, name)  # type: ignore
        # A new process reads the files as they are now.
        host = Host(name, self._group_of.get(name), conf, inv,
                    divide=self.divide)
        self.pending.discard(name)
        self._configure(host)
        if self.listing == 'delta':
            # Its own options, but the host's partition and membership.
            full = cfg.ConfigOpts()
            nim_conf.register_opts(full)
            full.set_override('state_file', '', group='ironic_multi')
            host.twin = pipeline.Pipeline(full, self.fleet,  # type: ignore
                                          inv.in_force,
                                          recovery.Recovery(self.fleet))  # type: ignore
        self.hosts[name] = host
        self.fleet.services[name].updated_at = self.fleet.now
        self.coordinators[name] = self.tooz.coordinator(
            name.lower().encode())
        self.stalled.discard(name)

    def _beat(self, names: list[str]) -> None:
        """tooz: these hosts' heartbeats, then each one's reading.

        Every beat lands before any reading (they run concurrently on
        hosts whose clocks move together), as the plugin's thread does it.
        """
        if self.membership != 'tooz':
            return
        beating = [n for n in names if n not in self.stalled]
        for name in beating:
            self.coordinators[name].heartbeat()
        for name in beating:
            plugin = self.hosts[name].inventory.in_force.plugin
            if isinstance(plugin, toozgroup.ToozMembership):
                plugin._beat(self.coordinators[name])

    def _refresh(self, name: str) -> bool:
        """One resource-tracker period of ``name``; whether it changed."""
        host = self.hosts[name]
        before = host.owned
        members = host.inventory.cached().members
        rows = dict(self.fleet.compute_nodes)
        try:
            host.inventory.refresh()
        except inventory.NotReady as e:
            # nova skips the period: nothing changes in its records.
            self.not_ready[name] = str(e)
            RULES[self.RING]['period not ready'] += 1
            return False
        self.not_ready.pop(name, None)
        host.refreshed_at = self.fleet.step
        owned = host.owned
        if host.twin is not None:
            self._compare_with_full(host)
        for node in owned:
            # Created, or taken over from another host (a rebalance: the
            # resource tracker moves the row to the host reporting it).
            self.fleet.compute_nodes[node] = name
        for node, owner in list(self.fleet.compute_nodes.items()):
            if (owner == name and node not in owned and
                    node not in self.fleet.nodes):
                # nova deletes a row its host no longer reports only when
                # the driver says the node is deleted (Ironic's 404); any
                # other row stays, still this host's, and the scheduler
                # may still pick it.
                del self.fleet.compute_nodes[node]
        # Straight after a refresh the host's division is exact.
        for node in owned:
            inst = self.fleet.nodes[node].instance
            assert inst is None or self.fleet.instances[inst].host == name, (
                '%s manages %s, which carries %s of %s' % (
                    name, node, inst, self.fleet.instances[inst].host))
        return (before != owned or rows != self.fleet.compute_nodes or
                members != host.inventory.cached().members)

    def _compare_with_full(self, host: Host) -> None:
        """The same period listed in full divides exactly the same."""
        assert host.twin is not None
        try:
            computed = host.twin.compute(host.twin_snapshot)
        except pipeline.NotReady as e:
            raise AssertionError('%s: ready with listing = delta, not with '
                                 'full: %s' % (host.name, e)) from e
        host.twin_snapshot = computed.snapshot

        ours = host.inventory.cached().nodes
        assert set(ours) == set(computed.snapshot.nodes), (
            '%s manages %s with listing = delta, %s listed in full' % (
                host.name, sorted(ours), sorted(computed.snapshot.nodes)))
        assert {u: n.instance_uuid for u, n in ours.items()} == {
            u: n.instance_uuid for u, n in computed.snapshot.nodes.items()}
        assert {u: n.maintenance for u, n in ours.items()} == {
            u: n.maintenance for u, n in computed.snapshot.nodes.items()}
        RULES[self.RING]['delta periods compared'] += 1
        stats = host.inventory._pipeline.delta.stats
        if stats.refreshes > host.fed:
            RULES[self.RING]['delta periods read from the change feed'] += 1
        host.fed = stats.refreshes

    def _free_nodes(self) -> list[str]:
        return sorted(u for u, n in self.fleet.nodes.items()
                      if n.instance is None)

    # Set-up ---------------------------------------------------------------

    @stateful.initialize(
        mode=st.sampled_from(MODES),
        hosts=st.lists(st.sampled_from(NAMES), min_size=1,
                       max_size=len(NAMES), unique=True),
        groups=st.lists(st.sampled_from(GROUPS), min_size=len(NAMES),
                        max_size=len(NAMES)),
        nodes=st.integers(min_value=0, max_value=14),
        divide=st.sampled_from(DIVIDES),
        labels=st.lists(st.sampled_from(SHARD_NAMES + (None,)),
                        min_size=14, max_size=14),
        listing=st.sampled_from(LISTINGS),
        feed=st.tuples(st.booleans(),
                       st.sampled_from((0.0, 5.0, OVERLAP / 2)),
                       st.sampled_from((2, 5, 1000))))
    def start(self, mode: tuple[bool, str], hosts: list[str],
              groups: list[str], nodes: int, divide: str,
              labels: list[str | None], listing: str,
              feed: tuple[bool, float, int]) -> None:
        self.partitioned, self.membership = mode
        self.divide = divide
        # listing = delta: Ironic's clocks skewed by up to half the
        # overlap each way; never-changed nodes sorted first or last; a
        # full resync every 2, 5 or 1000 periods.
        self.listing = listing
        self.fleet.nulls_first, skew, self.resync = feed
        self.fleet.skews = (0.0, skew, -skew)
        for name, group in zip(hosts, groups, strict=False):
            self._join(name, group)
        for i in range(nodes):
            self._enroll(GROUPS[i % len(GROUPS)], labels[i])
        # Started in this order, each host has refreshed once.
        for name in hosts:
            self._refresh(name)

    # Hosts ----------------------------------------------------------------

    def _join(self, name: str, group: str) -> None:
        self._group_of[name] = group if self.partitioned else None
        self.fleet.services[name] = Service(name, self.fleet.now)
        self._start(name)
        self._reconfigure_group(self._group_of[name])

    @stateful.precondition(lambda self: len(self.fleet.services) < len(NAMES))
    @stateful.rule(data=st.data(), group=st.sampled_from(GROUPS))
    def join(self, data: st.DataObject, group: str) -> None:
        self._tick('join')
        self._join(data.draw(st.sampled_from(
            [n for n in NAMES if n not in self.fleet.services])), group)

    def _leavable(self) -> list[str]:
        # nova refuses to delete a service that still hosts instances; the
        # operator deletes (or reaps) them first.
        busy = {i.host for i in self.fleet.instances.values()}
        return sorted(set(self.fleet.services) - busy)

    @stateful.precondition(lambda self: bool(self._leavable()))
    @stateful.rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        self._tick('leave')
        name = data.draw(st.sampled_from(self._leavable()))
        self.hosts.pop(name, None)
        del self.fleet.services[name]
        # A clean stop leaves the tooz group.
        member = name.lower().encode()
        for members in self.tooz.groups.values():
            members.pop(member, None)
        self.tooz.expire(member)
        for node, owner in list(self.fleet.compute_nodes.items()):
            if owner == name:
                del self.fleet.compute_nodes[node]
        self.others.discard(name)
        self.fleet.other_rows.discard(name)
        self._reconfigure_group(self._group_of.pop(name, None))

    @stateful.precondition(lambda self: bool(self.hosts))
    @stateful.rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        self._tick('die')
        self.hosts.pop(data.draw(st.sampled_from(self._alive())))

    def _dead(self) -> list[str]:
        return sorted(set(self.fleet.services) - set(self.hosts) -
                      set(OTHERS))

    @stateful.precondition(lambda self: bool(self._dead()))
    @stateful.rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        dead = self._dead()
        if not dead:
            return
        self._tick('restart')
        # A new process: an empty cache, its compute nodes still in nova.
        self._start(data.draw(st.sampled_from(dead)))

    @stateful.precondition(lambda self: bool(self.fleet.services))
    @stateful.rule(data=st.data(),
                   what=st.sampled_from(('disabled', 'forced_down')))
    def toggle_service(self, data: st.DataObject, what: str) -> None:
        self._tick('toggle_service')
        svc = self.fleet.services[data.draw(
            st.sampled_from(sorted(self.fleet.services)))]
        setattr(svc, what, not getattr(svc, what))

    @stateful.rule(ticks=st.integers(min_value=1, max_value=DOWN_TIME + 1))
    def time_passes(self, ticks: int) -> None:
        self._tick('time_passes')
        self.fleet.now += ticks
        for name in set(self.hosts) | self.others:
            self.fleet.services[name].updated_at = self.fleet.now
        self._beat(self._alive())

    # Other hypervisors ------------------------------------------------------

    @stateful.precondition(lambda self: len(self.others) < len(OTHERS))
    @stateful.rule(data=st.data())
    def other_starts(self, data: st.DataObject) -> None:
        """A libvirt nova-compute starts (new, or crash-looping).

        It has no compute node until its first period, and never this
        driver's marker.
        """
        self._tick('other_starts')
        name = data.draw(st.sampled_from(sorted(set(OTHERS) - self.others)))
        svc = self.fleet.services.setdefault(name,
                                             Service(name, self.fleet.now))
        svc.updated_at = self.fleet.now
        self.others.add(name)

    @stateful.precondition(lambda self: bool(self.others -
                                             self.fleet.other_rows))
    @stateful.rule(data=st.data())
    def other_reports(self, data: st.DataObject) -> None:
        self._tick('other_reports')
        self.fleet.other_rows.add(data.draw(st.sampled_from(
            sorted(self.others - self.fleet.other_rows))))

    @stateful.precondition(lambda self: bool(self.others))
    @stateful.rule(data=st.data())
    def other_dies(self, data: st.DataObject) -> None:
        self._tick('other_dies')
        self.others.discard(data.draw(st.sampled_from(sorted(self.others))))

    # tooz -------------------------------------------------------------------

    @stateful.precondition(lambda self: self.membership == 'tooz' and
                           bool(self.hosts))
    @stateful.rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self._tick('heartbeat')
        self._beat([data.draw(st.sampled_from(self._alive()))])

    @stateful.precondition(lambda self: self.membership == 'tooz' and
                           bool(set(self.hosts) - self.stalled))
    @stateful.rule(data=st.data())
    def stall(self, data: st.DataObject) -> None:
        """A host's heartbeats are held; its periods go on."""
        self._tick('stall')
        self.stalled.add(data.draw(st.sampled_from(
            sorted(set(self.hosts) - self.stalled))))

    @stateful.precondition(lambda self: bool(self.stalled & set(self.hosts)))
    @stateful.rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self._tick('resume')
        name = data.draw(st.sampled_from(sorted(self.stalled &
                                                set(self.hosts))))
        self.stalled.discard(name)
        self._beat([name])

    @stateful.precondition(lambda self: self.membership == 'tooz')
    @stateful.rule()
    def lose_tooz_data(self) -> None:
        """The back end restarts without persistence: groups are gone."""
        self._tick('lose_tooz_data')
        self.tooz.flush()

    @stateful.precondition(lambda self: bool(self.hosts))
    @stateful.rule(data=st.data())
    def refresh(self, data: st.DataObject) -> None:
        self._tick('refresh')
        self._refresh(data.draw(st.sampled_from(self._alive())))

    # Nodes ----------------------------------------------------------------

    def _enroll(self, group: str, shard: str | None) -> None:
        self.node_count += 1
        node = str(uuid.uuid5(NODE_NS, str(self.node_count)))
        self.fleet.nodes[node] = Node(group, shard=shard,
                                      id=self.node_count, fleet=self.fleet)

    @stateful.precondition(lambda self: len(self.fleet.nodes) < 16)
    @stateful.rule(group=st.sampled_from(GROUPS + (UNSERVED,)),
                   shard=st.sampled_from(SHARD_NAMES + (None,)))
    def enroll(self, group: str, shard: str | None) -> None:
        self._tick('enroll')
        self._enroll(group, shard)

    @stateful.precondition(lambda self: bool(self._free_nodes()))
    @stateful.rule(data=st.data())
    def delete_node(self, data: st.DataObject) -> None:
        # Ironic refuses to delete a node with an instance.
        free = self._free_nodes()
        if not free:
            return
        self._tick('delete_node')
        del self.fleet.nodes[data.draw(st.sampled_from(free))]

    @stateful.precondition(lambda self: bool(self._free_nodes()))
    @stateful.rule(data=st.data(), group=st.sampled_from(GROUPS + (UNSERVED,)))
    def move_node(self, data: st.DataObject, group: str) -> None:
        free = self._free_nodes()
        if not free:
            return
        self._tick('move_node')
        self.fleet.nodes[data.draw(st.sampled_from(free))].group = group

    @stateful.precondition(lambda self: bool(self.fleet.nodes))
    @stateful.rule(data=st.data())
    def toggle_maintenance(self, data: st.DataObject) -> None:
        self._tick('toggle_maintenance')
        node = self.fleet.nodes[data.draw(
            st.sampled_from(sorted(self.fleet.nodes)))]
        node.maintenance = not node.maintenance

    # Shards -----------------------------------------------------------------

    def _shard_names(self) -> list[str]:
        return sorted({n.shard for n in self.fleet.nodes.values()
                       if n.shard is not None})

    @stateful.precondition(lambda self: bool(self.fleet.nodes))
    @stateful.rule(data=st.data(),
                   shard=st.sampled_from(SHARD_NAMES + (None,)))
    def label_node(self, data: st.DataObject, shard: str | None) -> None:
        """A node gains, changes or loses its shard.

        Any node, deployed or not: Ironic allows it.
        """
        self._tick('label_node')
        self.fleet.nodes[data.draw(
            st.sampled_from(sorted(self.fleet.nodes)))].shard = shard

    @stateful.precondition(lambda self: bool(self._shard_names()))
    @stateful.rule(data=st.data(), new=st.sampled_from(SHARD_NAMES + (None,)))
    def rename_shard(self, data: st.DataObject, new: str | None) -> None:
        """Every node of a shard moves to another name.

        An existing shard: they merge; None: the shard is removed and its
        nodes are left without one (re-added later by ``label_node``).
        """
        self._tick('rename_shard' if new is not None else 'remove_shard')
        old = data.draw(st.sampled_from(self._shard_names()))
        for node in self.fleet.nodes.values():
            if node.shard == old:
                node.shard = new

    def _apply(self, name: str) -> None:
        """``name`` gets its SIGHUP: the files the operator pushed apply."""
        host = self.hosts[name]
        host.divide = self.divide
        self._configure(host)
        host.inventory.reloaded()
        self.pending.discard(name)

    @stateful.precondition(lambda self: bool(self.hosts))
    @stateful.rule(data=st.data())
    def switch_divide(self, data: st.DataObject) -> None:
        """The operator switches ``divide`` on every host.

        Each host applies it at its own moment (some now, others later).
        """
        self._tick('switch_divide')
        self.divide = DIVIDES[1 - DIVIDES.index(self.divide)]
        self.pending = set(self.hosts)
        for name in data.draw(st.lists(st.sampled_from(self._alive()),
                                       unique=True)):
            self._apply(name)

    @stateful.precondition(lambda self: bool(self.pending & set(self.hosts)))
    @stateful.rule(data=st.data())
    def sighup(self, data: st.DataObject) -> None:
        self._tick('sighup')
        self._apply(data.draw(st.sampled_from(
            sorted(self.pending & set(self.hosts)))))

    # Instances ------------------------------------------------------------

    def _bootable(self) -> list[str]:
        # The scheduler picks a compute node whose host it would build on;
        # that host reserves the node in Ironic (free, not in maintenance).
        fleet = self.fleet
        return sorted(
            u for u, host in fleet.compute_nodes.items()
            if u in fleet.nodes and fleet.nodes[u].instance is None and
            not fleet.nodes[u].maintenance and host in self.hosts and
            fleet.usable(host))

    @stateful.precondition(lambda self: bool(self._bootable()))
    @stateful.rule(data=st.data())
    def boot(self, data: st.DataObject) -> None:
        self._tick('boot')
        self._boot(data)

    def _boot(self, data: st.DataObject) -> None:
        inst = self._schedule(data)
        self._reserve(inst)

    def _schedule(self, data: st.DataObject) -> str:
        """nova's scheduler and claim: the instance is its host's now."""
        fleet = self.fleet
        node = data.draw(st.sampled_from(self._bootable()))
        self.instance_count += 1
        inst = str(uuid.uuid5(INSTANCE_NS, str(self.instance_count)))
        fleet.instances[inst] = Instance(fleet.compute_nodes[node], node,
                                         fleet.step, building=True)
        return inst

    def _reserve(self, inst: str) -> None:
        """The host reserves the node in Ironic (Provisioner.reserve).

        Or the build fails and nova reschedules (here: the request ends).
        """
        fleet = self.fleet
        instance = fleet.instances[inst]
        host = self.hosts.get(instance.host)
        node = fleet.nodes.get(instance.node)
        # The row may be one its host no longer reports (nova keeps it):
        # the host reserves only a free node inside its scope.
        if (host is None or node is None or node.instance is not None or
                node.maintenance or not ownership.in_scope(
                    fleet.info(instance.node),
                    host.inventory.current_partition().scope)):
            RULES[self.RING]['build failed: node refused'] += 1
            del fleet.instances[inst]
            return
        node.instance = inst
        instance.building = False
        instance.placed_at = fleet.step
        # As Provisioner.reserve tells the inventory (divide = shards).
        host.inventory.followups.put(followups.Reserved(inst))
        if host.twin is not None:
            host.twin.lister.reserved(inst)

    @stateful.precondition(lambda self: bool(self._bootable()))
    @stateful.rule(data=st.data())
    def schedule(self, data: st.DataObject) -> None:
        """A build reaches its host, which reserves the node later.

        Periods may run in between and see the instance without a node.
        """
        self._tick('schedule')
        self._schedule(data)

    def _building(self) -> list[str]:
        return sorted(u for u, i in self.fleet.instances.items()
                      if i.building)

    @stateful.precondition(lambda self: bool(self._building()))
    @stateful.rule(data=st.data())
    def reserve(self, data: st.DataObject) -> None:
        self._tick('reserve')
        self._reserve(data.draw(st.sampled_from(self._building())))

    def _deletable(self) -> list[str]:
        # nova-api deletes through the instance's host when its service is
        # up (a dead host that is not yet down leaves it in deleting).
        fleet = self.fleet
        return [u for u, inst in sorted(fleet.instances.items())
                if not inst.deleted and not inst.building and (
                    inst.host in self.hosts or
                    not fleet.service_is_up(fleet.services[inst.host]))]

    @stateful.precondition(lambda self: bool(self._deletable()))
    @stateful.rule(data=st.data())
    def delete_instance(self, data: st.DataObject) -> None:
        self._tick('delete_instance')
        self._delete(data)

    def _delete(self, data: st.DataObject) -> None:
        fleet = self.fleet
        choices = self._deletable()
        u = data.draw(st.sampled_from(choices))
        inst = fleet.instances[u]
        if fleet.service_is_up(fleet.services[inst.host]):
            # The host tears the node down, then the instance is gone.
            fleet.nodes[inst.node].instance = None
            del fleet.instances[u]
        else:
            # nova-api deletes locally: the node keeps the instance (an
            # orphan) until its host's reaper finds it.
            inst.deleted = True

    @stateful.precondition(lambda self: bool(self.hosts))
    @stateful.rule(data=st.data())
    def reap(self, data: st.DataObject) -> None:
        # nova's _cleanup_running_deleted_instances on one host: the
        # deleted instances its driver lists are torn down.
        self._tick('reap')
        name = data.draw(st.sampled_from(self._alive()))
        listed = self.hosts[name].inventory.cached().by_instance
        for u, node in listed.items():
            inst = self.fleet.instances.get(u)
            if (inst is not None and inst.deleted and
                    self.fleet.nodes.get(node) is not None and
                    self.fleet.nodes[node].instance == u):
                self.fleet.nodes[node].instance = None
                del self.fleet.instances[u]

    # A settled view -------------------------------------------------------

    @stateful.rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        """Time passes; every live host refreshes until nothing changes.

        Beyond service_down_time, so dead hosts are down; in an order drawn.
        """
        self._tick('settle')
        self._settle(data)

    @stateful.rule(data=st.data(), boots=st.integers(0, 3),
                   deletes=st.integers(0, 3))
    def boot_and_delete_in_a_settled_fleet(self, data: st.DataObject,
                                           boots: int, deletes: int) -> None:
        """Only instances change between two settled views.

        Nothing may move but the nodes booted on or freed (invariant 3 at
        its sharpest).
        """
        self._tick('boot_and_delete_in_a_settled_fleet')
        self._settle(data)
        for _ in range(boots):
            if self._bootable():
                self._boot(data)
        for _ in range(deletes):
            if self._deletable():
                self._delete(data)
        self._settle(data)

    def _settle(self, data: st.DataObject) -> None:
        # The operator's roll-out of the files is complete.
        for name in sorted(self.pending & set(self.hosts)):
            self._apply(name)
        self.fleet.now += DOWN_TIME + 1
        for name in set(self.hosts) | self.others:
            self.fleet.services[name].updated_at = self.fleet.now
        # Held heartbeats resume: the fault is over (a resume, counted so).
        RULES[self.RING]['resume'] += len(self.stalled & set(self.hosts))
        self.stalled.clear()
        for _ in range(MAX_ROUNDS):
            order = data.draw(st.permutations(self._alive()))
            # (tooz: every host heartbeats once between two periods.)
            groups = self._tooz_groups()
            self._beat(order)
            # A host reads its group right after its own heartbeat: one
            # that beat before a peer (re)joined in this round holds a
            # reading without that peer until its next beat, however
            # quietly its period went. Not settled while beats still
            # change the groups.
            regrouped = self._tooz_groups() != groups
            changed = [self._refresh(name) for name in order]
            not_ready = {n: why for n, why in self.not_ready.items()
                         if n in self.hosts}
            if not any(changed) and not not_ready and not regrouped:
                break
        else:
            raise AssertionError(
                'no settled view after %d rounds of refreshes (not ready: '
                '%s)' % (MAX_ROUNDS, not_ready))
        self._check_settled()

    def _tooz_groups(self) -> dict[bytes, frozenset[bytes]]:
        """The members of every group in the tooz back end, as stored."""
        with self.tooz.lock:
            return {g: frozenset(m) for g, m in self.tooz.groups.items()}

    def _expected_members(self, name: str) -> frozenset[str]:
        """Who a settled ``name`` must count as its peers.

        Every live, enabled host that is not forced down, of its conductor
        group when partitioned (live hosts heartbeat; dead ones are down).
        """
        fleet = self.fleet
        group = self._group_of[name]
        return frozenset(
            h.lower() for h in self.hosts
            if not fleet.services[h].disabled and
            not fleet.services[h].forced_down and
            (not self.partitioned or self._group_of[h] == group))

    def _check_settled(self) -> None:
        fleet = self.fleet
        RULES[self.RING]['settled views checked'] += 1
        views = {name: h.inventory.cached() for name, h in self.hosts.items()}
        if self.divide == 'shards' and any(n.shard for n in
                                           fleet.nodes.values()):
            RULES[self.RING]['settled views checked (shards)'] += 1
        for name, snap in views.items():
            # Not only consistent: a plugin that dropped a live host on
            # every host alike would pass the checks below.
            assert snap.members == self._expected_members(name), (
                '%s counts %s as its peers; live, enabled hosts: %s' % (
                    name, sorted(snap.members),
                    sorted(self._expected_members(name))))
        managers: dict[str, list[str]] = collections.defaultdict(list)
        for name, snap in views.items():
            for node in snap.nodes:
                managers[node].append(name)
        keys: dict[str, Any] = {}
        # Shards are weighed by Ironic's counts, which span every conductor
        # group: a label changed anywhere may move a shard.
        counts = frozenset(fleet.shards().items())
        for node in self._free_nodes():
            group = fleet.nodes[node].group
            shard = fleet.nodes[node].shard
            # The members (as each sees them), the partition and the nodes
            # of every scope with this node (with their shards when shards
            # are divided), of the hosts that are members of their ring.
            scopes = []
            for name, snap in views.items():
                part = snap.partition
                assert part is not None
                if (name.lower() in snap.members and
                        part.scope.contains(group, shard)):
                    scopes.append((name.lower(), snap.members, part,
                                   counts if part.by_shard else None,
                                   frozenset(
                                       (u, n.shard if part.by_shard else '')
                                       for u, n in fleet.nodes.items()
                                       if part.scope.contains(n.group,
                                                              n.shard))))
            if scopes:
                assert len(managers[node]) == 1, (
                    'free node %s (%s) managed by %s; members %s' % (
                        node, group, managers[node],
                        {n: sorted(v.members) for n, v in views.items()}))
                assert fleet.compute_nodes.get(node) == managers[node][0]
            else:
                assert managers[node] == [], (node, managers[node])
            keys[node] = (frozenset(scopes), tuple(managers[node]))
        # Rule 1, orphans included: an instance's live host manages its
        # node while the node is in its scope (the reaper needs it listed).
        for u, inst in fleet.instances.items():
            its_node = fleet.nodes.get(inst.node)
            host = views.get(inst.host)
            if (its_node is not None and its_node.instance == u and
                    host is not None and host.partition is not None and
                    host.partition.scope.contains(its_node.group,
                                                  its_node.shard)):
                assert managers[inst.node] == [inst.host], (
                    'node %s of instance %s (%s) managed by %s' % (
                        inst.node, u, inst.host, managers[inst.node]))
        # Invariant 3: no free node moves unless its scope's members or
        # nodes changed.
        if self.last_settled is not None:
            for node, (scopes, owner) in keys.items():
                old = self.last_settled.get(node)
                if old is not None and old[0] == scopes:
                    assert old[1] == owner, (
                        'free node %s moved from %s to %s with the same '
                        'members and nodes' % (node, old[1], owner))
        self.last_settled = keys

    # Every step -------------------------------------------------------------

    @stateful.invariant()
    def instance_nodes_stay_with_their_host(self) -> None:
        fleet = self.fleet
        for u, inst in fleet.instances.items():
            node = fleet.nodes.get(inst.node)
            if node is None or node.instance != u:
                continue
            row = fleet.compute_nodes.get(inst.node)
            own = self.hosts.get(inst.host)
            # A rebalance between nova's claim and the reservation in Ironic
            # may have moved the row; the instance's host takes it back at
            # its first period after the reservation (rule 1).
            assert row in (None, inst.host) or (
                own is None or own.refreshed_at < inst.placed_at), (
                'compute node of %s (instance %s of %s) is %s\'s' % (
                    inst.node, u, inst.host, row))
            for name, host in self.hosts.items():
                if name != inst.host and inst.node in host.owned:
                    # Only a host that has not looked since the boot.
                    assert host.refreshed_at < inst.placed_at, (
                        '%s manages %s, which carries %s of %s' % (
                            name, inst.node, u, inst.host))


class CompatibleChurn(Churn):
    RING = 'compatible'


class BalancedChurn(Churn):
    RING = 'balanced'


@pytest.mark.parametrize('machine', [CompatibleChurn, BalancedChurn],
                         ids=['compatible', 'balanced'])
def test_churn(machine: type[Churn]) -> None:
    current = settings()
    target = current.max_examples * current.stateful_step_count
    start = profiles.STEPS[machine.RING]
    with simulated_nova():
        # Examples may end before stateful_step_count: run more, as many as
        # the steps still missing need, until they have all been taken.
        while (missing := target - (profiles.STEPS[machine.RING] -
                                    start)) > 0:
            examples = -(-missing // current.stateful_step_count) + 1
            stateful.run_state_machine_as_test(
                machine, settings=settings(current, max_examples=examples))
    steps = profiles.STEPS[machine.RING] - start
    ran = RULES[machine.RING]
    print('%s: %d steps; %s' % (machine.RING, steps, dict(sorted(
        ran.items()))))
    # Every kind of step was taken, and often enough to mean something:
    # a precondition that never holds would silently leave a rule out.
    rules = {name for name, value in vars(Churn).items()
             if getattr(value, stateful.RULE_MARKER, None) is not None}
    rules |= {'remove_shard', 'settled views checked',
              'settled views checked (shards)', 'delta periods compared',
              'delta periods read from the change feed'}
    # (A period is not ready when a tooz reading is stale: not a rule.)
    rare = {r: ran[r] for r in rules if ran[r] < max(1, steps // 5000)}
    assert not rare, 'steps rarely or never taken: %s' % rare
