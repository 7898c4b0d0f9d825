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
"""What the operator command reads: Ironic's nodes and nova's services.

The command runs where ``nova-manage`` runs (with nova's databases and the
``[ironic]`` options in its configuration) and computes the division with
the function every nova-compute service calls (:func:`division.divide`),
from outside.
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable
import dataclasses
import functools
from typing import Any

from nova import context as nova_context
from nova import objects
from nova import servicegroup
from oslo_config import cfg

from nova_ironic_multi.cmd import settings_check
from nova_ironic_multi.cmd import takeover_records
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi import division as division_mod
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.hosts import zones as zones_mod
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import servicegroup as sg_membership
from nova_ironic_multi import rings

OBSERVER = 'nova-ironic-multi-cli'
#: nova's hypervisor type of an Ironic compute node.
IRONIC = 'ironic'
AZ_KEY = zones_mod.AZ_KEY


@dataclasses.dataclass
class Host:
    """One nova-compute service as the division sees it."""

    name: str                 # lower-cased, as in the ring
    service_host: str | None  # as nova spells it; None: no service record
    up: bool | None
    disabled: bool
    forced_down: bool
    member: bool = False
    managed: set[str] = dataclasses.field(default_factory=set)
    #: In-scope nodes carrying one of its (live) instances.
    with_instance: set[str] = dataclasses.field(default_factory=set)
    #: In-scope nodes carrying an instance nova deleted while it was down.
    orphaned: set[str] = dataclasses.field(default_factory=set)
    #: The Ironic compute nodes nova records for it (node UUIDs).
    reported: set[str] = dataclasses.field(default_factory=set)
    #: Its availability zone, as nova gives it (None: not read).
    zone: str | None = None
    #: Why its service does not run this driver, or None (it does, or it
    #: was not read).
    foreign: str | None = None
    #: The cell of its service (None: not read).
    cell: str | None = None
    #: The nodes it divides, as it published them (None: not published,
    #: or not knowable): a host moved to another conductor group keeps no
    #: node of this scope, its instances' included.
    scope: partition.Scope | None = None

    @property
    def state(self) -> str:
        if self.service_host is None:
            return 'unknown'
        if self.forced_down:
            return 'forced down'
        return 'up' if self.up else 'down'

    @property
    def running(self) -> bool:
        """Whether its driver divides nodes now.

        A running host that is not a member (disabled, or not in its own
        ``peer_list``) claims no free node but keeps the nodes of its
        instances (rule 1), as the driver does.
        """
        return self.member or bool(self.up)

    @property
    def can_take_over(self) -> bool:
        """Whether ``takeover`` accepts it as a destination (up, enabled)."""
        return (self.service_host is not None and
                takeover_ok(self.up, self.disabled, self.forced_down))

    @property
    def to_move(self) -> set[str]:
        """The nodes ``takeover --from`` this host moves.

        Those nova records for it (its compute nodes) that carry one of
        its live instances or one of its orphans, as ``takeover.plan``
        finds them.
        """
        return (self.with_instance | self.orphaned) & self.reported


def takeover_ok(up: bool | None, disabled: bool, forced_down: bool) -> bool:
    """The destination rule of ``takeover``: up, enabled, not forced down."""
    return bool(up) and not disabled and not forced_down


#: Host (as nova spells it) -> its availability zone (one query).
zones = zones_mod.of


def record(svc: Any, up: bool | None, reported: Iterable[str],
           other_types: Collection[str],
           marked: frozenset[str] | marker.MarkerError,
           zone: str | None, cell: str | None = None) -> Host:
    """A nova-compute service as the division and ``takeover`` see it.

    :param reported: its Ironic compute nodes (node UUIDs).
    :param other_types: the other hypervisor types of its compute nodes.
    :param marked: the services that published this driver's marker, or
        why placement could not say (then it is not known to run it).
    """
    if isinstance(marked, marker.MarkerError):
        foreign: str | None = ('placement cannot say whether it published '
                               'the marker of this driver: %s' % marked)
    else:
        foreign = sg_membership.foreign(
            svc.uuid, svc.uuid in marked,
            ','.join(sorted(other_types)) or None)
    return Host(svc.host.lower(), svc.host, up, bool(svc.disabled),
                bool(svc.forced_down), reported=set(reported), zone=zone,
                foreign=foreign, cell=cell)


@dataclasses.dataclass
class Fleet:
    partition: partition.Partition
    nodes: list[nodeinfo.NodeInfo]
    #: Live instance UUID -> its (lower-cased) host.
    instance_hosts: dict[str, str]
    hosts: dict[str, Host]
    members: frozenset[str]
    ring: rings.Ring
    #: Deleted instance UUID -> the host it had (its orphan's keeper).
    deleted_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    client: ironic.Ironic | None = None
    #: ``GET /v1/shards`` (shard name -> node count), when read.
    shard_counts: dict[str, int] | None = None
    #: The rings built for this view (one per member set asked about).
    ring_cache: rings.RingCache = dataclasses.field(
        default_factory=rings.RingCache)
    #: Where one Ironic scope is served from more than one cell
    #: (:func:`cell_conflicts`).
    cell_conflicts: list[str] = dataclasses.field(default_factory=list)
    #: The latest automatic takeovers, newest first
    #: (:mod:`cmd.takeover_records`).
    takeovers: list[Any] = dataclasses.field(default_factory=list)
    #: How this command's partition options differ from the running
    #: hosts' (:mod:`cmd.settings_check`), and why that could not be told.
    settings_differ: list[str] = dataclasses.field(default_factory=list)
    settings_unread: str | None = None

    @property
    def unknown(self) -> list[nodeinfo.NodeInfo]:
        """In-scope nodes whose instance nova has never heard of."""
        return [n for n in self.in_scope if n.instance_uuid and
                n.instance_uuid not in self.instance_hosts and
                n.instance_uuid not in self.deleted_hosts]

    def manager(self, node_uuid: str) -> str | None:
        """The host that manages a node now, as the services decide."""
        return next((name for name, h in sorted(self.hosts.items())
                     if node_uuid in h.managed), None)

    def ring_owner(self, node_uuid: str) -> str | None:
        """The member rule 2 gives a node (whoever manages it)."""
        return self._ring_owners.get(node_uuid)

    @functools.cached_property
    def _ring_owners(self) -> dict[str, str]:
        return self.placement()

    def placement(self, members: frozenset[str] | set[str] | None = None
                  ) -> dict[str, str]:
        """In-scope node -> the member rule 2 gives it.

        As the services compute it, with these members (default: the live
        ones now).
        """
        return division_mod.placement(
            self.nodes, self.members if members is None else members,
            self.partition, self.shard_counts, self.ring_cache)

    def shard_assignment(self, members: frozenset[str] | set[str] | None
                         = None) -> dict[str, str]:
        """Shard name -> the member that lists it (``divide = shards``)."""
        return division_mod.shard_assignment(
            self.partition, self.members if members is None else members,
            self.shard_counts, self.ring_cache)

    @property
    def in_scope(self) -> list[nodeinfo.NodeInfo]:
        return [n for n in self.nodes
                if ownership.in_scope(n, self.partition.scope)]

    @property
    def free(self) -> list[str]:
        return [n.uuid for n in self.in_scope if n.instance_uuid is None]

    def node(self, node_uuid: str) -> nodeinfo.NodeInfo | None:
        return next((n for n in self.nodes if n.uuid == node_uuid), None)


def every_cell(ctxt: Any) -> list[tuple[str, Any]]:
    """Every cell but cell0, as (name, a context targeted at it).

    The command's own context reaches ``[database] connection``, which is
    cell0 or a superconductor's database in common layouts: nothing of
    the computes is there.
    """
    found = []
    for cell in objects.CellMappingList.get_all(ctxt):
        if cell.is_cell0():
            continue
        with nova_context.target_cell(ctxt, cell) as cctxt:
            found.append((cell.name or cell.uuid, cctxt))
    return found


@dataclasses.dataclass
class _NovaView:
    services: list[Any] = dataclasses.field(default_factory=list)
    #: Host (as nova spells it) -> its Ironic compute nodes.
    ironic_hosts: dict[str, set[str]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(set))
    #: Host (as nova spells it) -> its compute nodes' other hypervisors.
    other_types: dict[str, set[str]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(set))
    instance_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    deleted_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Lower-cased host -> the cell of its nova-compute service.
    host_cells: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Node UUID -> cell -> the hosts whose compute nodes it has there.
    node_cells: dict[str, dict[str, set[str]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(
            lambda: collections.defaultdict(set)))


def _read_nova(cells: list[tuple[str, Any]],
               instance_uuids: list[str]) -> _NovaView:
    view = _NovaView()
    for cell, cctxt in cells:
        for svc in objects.ServiceList.get_by_binary(
                cctxt, 'nova-compute', include_disabled=True):
            view.services.append(svc)
            view.host_cells[svc.host.lower()] = cell
        for cn in objects.ComputeNodeList.get_all(cctxt):
            if cn.hypervisor_type == IRONIC:
                view.ironic_hosts[cn.host].add(cn.hypervisor_hostname)
                view.node_cells[cn.hypervisor_hostname][cell].add(
                    cn.host.lower())
            else:
                view.other_types[cn.host].add(cn.hypervisor_type)
        if instance_uuids:
            # Deleted ones too: their nodes are orphans, kept by the host
            # the instance had (orphans.py).
            found = objects.InstanceList.get_by_filters(
                cctxt.elevated(read_deleted='yes'),
                {'uuid': instance_uuids}, expected_attrs=[])
            for i in found:
                hosts = (view.deleted_hosts if i.deleted
                         else view.instance_hosts)
                hosts[i.uuid] = (i.host or '').lower()
    return view


def _where(by_cell: dict[str, set[str]]) -> str:
    return ' and '.join('%s (%s)' % (cell, ', '.join(sorted(hosts)))
                        for cell, hosts in sorted(by_cell.items()))


def cell_conflicts(nodes: list[nodeinfo.NodeInfo], scope: partition.Scope,
                   members: frozenset[str] | set[str],
                   view: _NovaView) -> list[str]:
    """What breaks the rule that one Ironic scope belongs to one cell.

    A compute sees only its own cell, so the computes of two cells that
    serve the same nodes divide them apart and claim each free node twice.
    Reported: a node with compute nodes in two cells; a conductor group
    whose nodes have compute nodes in two cells; and, when this command's
    scope is narrower than the whole fleet, live members in two cells.
    """
    found = []
    groups: dict[str | None, dict[str, set[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(set))
    for node in nodes:
        by_cell = view.node_cells.get(node.uuid)
        if not by_cell:
            continue
        if len(by_cell) > 1:
            found.append('node %s has compute nodes in cells %s'
                         % (node.uuid, _where(by_cell)))
        for cell, hosts in by_cell.items():
            groups[node.conductor_group][cell] |= hosts
    for group, by_cell in sorted(groups.items(), key=lambda g: str(g[0])):
        if len(by_cell) > 1:
            found.append('%s is served from cells %s' % (
                'conductor group %r' % group if group is not None
                else 'the fleet', _where(by_cell)))
    if scope != partition.Scope():
        by_cell = collections.defaultdict(set)
        for member in members:
            if member in view.host_cells:
                by_cell[view.host_cells[member]].add(member)
        if len(by_cell) > 1:
            found.append('the live members of %s are in cells %s'
                         % (scope.describe(), _where(by_cell)))
    return found


def gather(conf: cfg.ConfigOpts, shards: bool = False) -> Fleet:
    """Read Ironic and nova, and divide the nodes as the services would.

    :param shards: also read each node's shard and every shard's node
        count (Ironic API 1.82); always done with ``divide = shards``.

    :raises partition.InvalidPartition: the local partition options are
        invalid (the message names them).
    :raises loader.PluginError: an unknown ring or membership plugin.
    :raises ironic.IronicError: Ironic cannot be listed.
    :raises membership.MembershipUnavailable: the peers cannot be read.
    """
    part = partition_opts.resolve(conf, OBSERVER, observer=True)
    # Configuration mistakes first, before reaching for Ironic or nova.
    loader.plugin(loader.RINGS_NAMESPACE, part.ring_algorithm,
                  '[ironic_multi] ring_algorithm')
    loader.plugin(loader.MEMBERSHIP_NAMESPACE, part.membership_driver,
                  '[ironic_multi] membership_driver')
    client = ironic.Ironic(conf)
    shards = shards or part.by_shard
    # With each node's conductor group: one scope, one cell.
    nodes = client.list_nodes(part.scope, with_shard=shards, with_group=True)
    counts = client.shards() if shards else None
    ctxt = nova_context.get_admin_context()
    cells = every_cell(ctxt)
    nova = _read_nova(cells,
                      [n.instance_uuid for n in nodes if n.instance_uuid])
    # The members as every service sees them: the same plugin, looking,
    # in every cell.
    plugin = membership.load(part.membership_driver, conf, OBSERVER,
                             observer=True)
    plugin.cells = [cctxt for _, cctxt in cells]
    try:
        live = set(plugin.observe(part))
    finally:
        plugin.stop()
    conflicts = cell_conflicts(nodes, part.scope, live, nova)
    serving = {cell for n in nodes if ownership.in_scope(n, part.scope)
               for cell in nova.node_cells.get(n.uuid, ())}
    if len(serving) == 1:
        # A compute counts the peers of its own cell only: the cell that
        # has this scope's compute nodes.
        live = {m for m in live if nova.host_cells.get(m) in serving}
    api = servicegroup.API()
    # A member may have no compute node yet (an empty share).
    relevant = [svc for svc in nova.services
                if svc.host.lower() in (part.peers or ()) or
                svc.host.lower() in live or svc.host in nova.ironic_hosts]
    try:
        marked: frozenset[str] | marker.MarkerError = marker.read()
    except marker.MarkerError as e:
        marked = e
    zone = zones(ctxt, [svc.host for svc in relevant])
    hosts: dict[str, Host] = {}
    for svc in relevant:
        hosts[svc.host.lower()] = record(
            svc, bool(api.service_is_up(svc)),
            nova.ironic_hosts.get(svc.host, ()),
            nova.other_types.get(svc.host, ()), marked, zone[svc.host],
            nova.host_cells.get(svc.host.lower()))
    for name in (set(nova.instance_hosts.values()) |
                 set(nova.deleted_hosts.values()) | live) - {''}:
        hosts.setdefault(name, Host(name, None, None, False, False))
    for name in live:
        hosts[name].member = True
    members = frozenset(live)
    cache = rings.RingCache()
    ring = cache.get(part.ring_algorithm, members, part.partition_exponent)
    fleet = Fleet(part, nodes, nova.instance_hosts, hosts, members, ring,
                  deleted_hosts=nova.deleted_hosts, client=client,
                  shard_counts=counts, ring_cache=cache,
                  cell_conflicts=conflicts,
                  takeovers=takeover_records.recent(cells))
    fleet.settings_differ, fleet.settings_unread, by_host = (
        settings_check.check(part, nova.services, api.service_is_up))
    for name, settings in by_host.items():
        if name in hosts:
            hosts[name].scope = settings_check.scope_of(settings)
    divide(fleet)
    return fleet


def divide(fleet: Fleet) -> None:
    """Each host's nodes, by the rules and inputs the driver uses.

    A running host keeps the nodes of its instances and of its deleted
    instances (orphans), whether or not it is a ring member; a deleted
    instance with no host is the orphan of its node's ring owner; only
    members get free nodes from the ring. A host that is not running manages
    nothing: the nodes of its instances wait for it or for a takeover.
    """
    live: dict[str, set[str]] = collections.defaultdict(set)
    deleted: dict[str, set[str]] = collections.defaultdict(set)
    for instance, owner in fleet.instance_hosts.items():
        live[owner].add(instance)
    for instance, owner in fleet.deleted_hosts.items():
        deleted[owner].add(instance)
    # Deleted with no host: the orphans of their node's ring owner
    # (period.orphans.adopted).
    homeless = deleted.pop('', set())
    for node in fleet.in_scope:
        keeper = fleet.ring_owner(node.uuid)
        if node.instance_uuid in homeless and keeper is not None:
            deleted[keeper].add(node.instance_uuid)
    for name, host in fleet.hosts.items():
        host.with_instance = {n.uuid for n in fleet.in_scope
                              if n.instance_uuid in live[name]}
        host.orphaned = {n.uuid for n in fleet.in_scope
                         if n.instance_uuid in deleted[name]}
        host.managed = set()
    # What each running host's period computes (inventory.Inventory).
    divisions = division_mod.divide(
        fleet.nodes, {name: live[name] | deleted[name]
                      for name, host in fleet.hosts.items() if host.running},
        fleet.members, fleet.partition, fleet.shard_counts,
        fleet.ring_cache)
    by_uuid = {n.uuid: n for n in fleet.in_scope}
    for name, division in divisions.items():
        scope = fleet.hosts[name].scope
        # A host manages only nodes of the scope it divides (published).
        fleet.hosts[name].managed = {
            n for n in division.owned if scope is None or (
                n in by_uuid and scope.contains(by_uuid[n].conductor_group,
                                                by_uuid[n].shard))}
