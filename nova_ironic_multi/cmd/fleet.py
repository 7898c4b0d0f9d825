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
``[ironic]`` options in its configuration) and computes the division the
way every nova-compute service does, from outside.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from nova import context as nova_context
from nova import objects
from nova import servicegroup
from oslo_config import cfg

from nova_ironic_multi import ironic
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi import nodeinfo
from nova_ironic_multi import ownership
from nova_ironic_multi import partition
from nova_ironic_multi import rings
from nova_ironic_multi import sharding

OBSERVER = 'nova-ironic-multi-cli'


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
    with_instance: set[str] = dataclasses.field(default_factory=set)

    @property
    def state(self) -> str:
        if self.service_host is None:
            return 'unknown'
        if self.forced_down:
            return 'forced down'
        return 'up' if self.up else 'down'


@dataclasses.dataclass
class Fleet:
    partition: partition.Partition
    nodes: list[nodeinfo.NodeInfo]
    instance_hosts: dict[str, str]
    hosts: dict[str, Host]
    members: frozenset[str]
    ring: rings.Ring
    #: ``GET /v1/shards`` (shard name -> node count), when read.
    shard_counts: dict[str, int] | None = None

    def shard_assignment(self) -> dict[str, str]:
        """Shard name -> the member that lists it (``divide = shards``)."""
        return sharding.assign(
            self.ring, self.shard_counts or {},
            self.partition.ring_algorithm in sharding.WEIGHTED)

    def ring_select(self) -> ownership.RingSelect:
        """Rule 2's selection, as the services make it."""
        if not self.partition.by_shard:
            return self.ring.select
        return sharding.ring_select({n.uuid: n.shard for n in self.nodes},
                                    self.shard_assignment(),
                                    self.ring.select)

    @property
    def in_scope(self) -> list[nodeinfo.NodeInfo]:
        return [n for n in self.nodes
                if ownership.in_scope(n, self.partition.scope)]

    @property
    def free(self) -> list[str]:
        return [n.uuid for n in self.in_scope if n.instance_uuid is None]

    def node(self, node_uuid: str) -> nodeinfo.NodeInfo | None:
        return next((n for n in self.nodes if n.uuid == node_uuid), None)


def _cells(ctxt: Any) -> list[Any]:
    return [c for c in objects.CellMappingList.get_all(ctxt)
            if not c.is_cell0()]


def _services_and_instances(ctxt: Any, instance_uuids: list[str]
                            ) -> tuple[list[Any], set[str], dict[str, str]]:
    services: list[Any] = []
    ironic_hosts: set[str] = set()
    instance_hosts: dict[str, str] = {}
    for cell in _cells(ctxt):
        with nova_context.target_cell(ctxt, cell) as cctxt:
            services.extend(objects.ServiceList.get_by_binary(
                cctxt, 'nova-compute', include_disabled=True))
            ironic_hosts |= {
                cn.host for cn in objects.ComputeNodeList.get_all(cctxt)
                if cn.hypervisor_type == 'ironic'}
            if instance_uuids:
                found = objects.InstanceList.get_by_filters(
                    cctxt, {'uuid': instance_uuids}, expected_attrs=[])
                instance_hosts.update(
                    {i.uuid: (i.host or '').lower() for i in found})
    return services, ironic_hosts, instance_hosts


def gather(conf: cfg.ConfigOpts, shards: bool = False) -> Fleet:
    """Read Ironic and nova, and divide the nodes as the services would.

    :param shards: also read each node's shard and every shard's node
        count (Ironic API 1.82); always done with ``divide = shards``.

    :raises partition.InvalidPartition: the local partition options are
        invalid (the message names them).
    :raises loader.PluginNotFound: an unknown ring or membership plugin.
    :raises ironic.IronicError: Ironic cannot be listed.
    :raises membership.MembershipUnavailable: the peers cannot be read.
    """
    part = partition.resolve(conf, OBSERVER, observer=True)
    # Configuration mistakes first, before reaching for Ironic or nova.
    loader.plugin(loader.RINGS_NAMESPACE, part.ring_algorithm,
                  '[ironic_multi] ring_algorithm')
    loader.plugin(loader.MEMBERSHIP_NAMESPACE, part.membership_driver,
                  '[ironic_multi] membership_driver')
    client = ironic.Ironic(conf)
    shards = shards or part.by_shard
    nodes = client.list_nodes(part.scope, with_shard=shards)
    counts = client.shards() if shards else None
    ctxt = nova_context.get_admin_context()
    services, ironic_hosts, instance_hosts = _services_and_instances(
        ctxt, [n.instance_uuid for n in nodes if n.instance_uuid])
    api = servicegroup.API()
    hosts: dict[str, Host] = {}
    for svc in services:
        name = svc.host.lower()
        relevant = (name in (part.peers or ()) or
                    svc.host in ironic_hosts)
        if not relevant:
            continue
        up = bool(api.service_is_up(svc))
        hosts[name] = Host(name, svc.host, up, bool(svc.disabled),
                           bool(svc.forced_down))
    # The members as every service sees them: the same plugin, looking.
    plugin = membership.load(part.membership_driver, conf, OBSERVER,
                             observer=True)
    try:
        live = set(plugin.observe(part))
    finally:
        plugin.stop()
    for name in set(instance_hosts.values()) | live:
        hosts.setdefault(name, Host(name, None, None, False, False))
    for name in live:
        hosts[name].member = True
    members = frozenset(live)
    ring = rings.load(part.ring_algorithm, members, part.partition_exponent)
    fleet = Fleet(part, nodes, instance_hosts, hosts, members, ring, counts)
    _divide(fleet)
    return fleet


def _divide(fleet: Fleet) -> None:
    by_host: dict[str, set[str]] = collections.defaultdict(set)
    for instance, owner in fleet.instance_hosts.items():
        by_host[owner].add(instance)
    for name, host in fleet.hosts.items():
        if host.member:
            division = ownership.select(fleet.nodes, by_host[name],
                                        fleet.ring_select(), name,
                                        fleet.partition.scope)
            host.managed = set(division.owned)
        host.with_instance = {
            n.uuid for n in fleet.in_scope
            if n.instance_uuid and
            fleet.instance_hosts.get(n.instance_uuid) == name}
