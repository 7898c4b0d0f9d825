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
"""What ``takeover`` checks before it moves anything.

The source service must be forced down (the operator's word that it is
fenced), and the destination must be a host that would manage the nodes
(:func:`refusal`, the rule ``ring show`` names destinations by): up and
enabled, running this driver, in the source's availability zone, serving
the nodes' conductor group and, with ``divide = nodes``, their shard.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
import dataclasses
from typing import Any

from nova import exception
from nova import objects
from nova import servicegroup

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.hosts import zones
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.membership import marker


class Refused(Exception):
    """The takeover would be unsafe; the message says why and what to do."""


@dataclasses.dataclass
class Move:
    node: str
    compute_node_id: int
    instances: list[tuple[str, str]]   # (uuid, name)
    #: Deleted instances of the source still deployed on the node.
    orphans: list[str] = dataclasses.field(default_factory=list)
    #: The node as Ironic has it (None: Ironic no longer has it).
    info: nodeinfo.NodeInfo | None = None


def _describe(group: str | None, shard: str | None) -> str:
    text = 'conductor group %r' % (group or '')
    return text + (', shard %r' % shard if shard is not None else '')


class Scopes:
    """Whether a host serves the conductor group and shard of nodes.

    nova does not record a service's ``partition_key`` or ``shard``, but a
    service only ever manages nodes of its scope, so the nodes nova records
    for it say what it serves: a host that manages Ironic nodes, none of
    them in a node's conductor group (or shard), would never manage that
    node. (A host that manages no node at all cannot be told apart; it is
    accepted.) Each scope is listed from Ironic once.

    With ``divide = shards`` a service serves every shard (the ring moves
    shards between the peers; nova's ``[ironic] shard`` is not set), so
    only the conductor group counts.
    """

    def __init__(self, client: ironic.Ironic) -> None:
        self._client = client
        self._listed: dict[partition.Scope, frozenset[str]] = {}

    def nodes(self, node_uuids: Iterable[str]) -> list[nodeinfo.NodeInfo]:
        """The nodes Ironic still has, with their group and shard."""
        found = []
        for node_uuid in node_uuids:
            try:
                found.append(self._client.get_node(node_uuid))
            except ironic.NodeNotFound:
                continue
        return found

    def _in(self, scope: partition.Scope) -> frozenset[str]:
        if scope not in self._listed:
            self._listed[scope] = frozenset(
                n.uuid for n in self._client.list_nodes(scope)
                if ownership.in_scope(n, scope))
        return self._listed[scope]

    def mismatch(self, dest: str, dest_nodes: Collection[str],
                 moving: Sequence[nodeinfo.NodeInfo],
                 by_shard: bool = False) -> str | None:
        """Why ``dest`` would not manage ``moving``, or None.

        :param by_shard: ``divide = shards``: shards do not count.
        """
        mine = set(dest_nodes)
        if not mine:
            return None
        for node in moving:
            group = (node.conductor_group or '').lower()
            checks = [(partition.Scope(conductor_group=group),
                       'its [ironic_multi] partition_key (or [ironic] '
                       'conductor_group) is not %r' % group)]
            if node.shard is not None and not by_shard:
                checks.append((partition.Scope(conductor_group=group,
                                               shard=node.shard),
                               'its [ironic] shard is not %r' % node.shard))
            for scope, hint in checks:
                if mine & self._in(scope):
                    continue
                sample = self.nodes([sorted(mine)[0]])
                example = (' (node %s it manages is in %s)' % (
                    sample[0].uuid, _describe(sample[0].conductor_group,
                                              sample[0].shard))
                           if sample else '')
                return ('%s manages %d Ironic node(s), none in %s%s: %s, '
                        'so it would never manage node %s, which is in %s'
                        % (dest, len(mine), scope.describe(), example, hint,
                           node.uuid, _describe(node.conductor_group,
                                                node.shard)))
        return None


def refusal(source: fleet_mod.Host, dest: fleet_mod.Host,
            moving: Sequence[nodeinfo.NodeInfo], scopes: Scopes | None,
            by_shard: bool) -> str | None:
    """Why ``takeover`` refuses ``dest`` for ``source``'s nodes, or None.

    The one rule of the command and of the destinations ``ring show``
    names: the destination is up and enabled, runs this driver, is in the
    source's cell and availability zone, and serves the conductor group
    (and, with ``divide = nodes``, the shard) of every node that moves.

    :param moving: the nodes that would move, as Ironic has them.
    :param by_shard: ``divide = shards`` (nova's static shard scope unused).
    """
    name = dest.service_host or dest.name
    if dest.service_host is None:
        return 'there is no nova-compute service on host %r' % dest.name
    if dest.name == source.name:
        return '--from and --to are the same host'
    if not dest.can_take_over:
        return 'the destination nova-compute on %s is not up and enabled' % (
            name)
    if dest.foreign is not None:
        return ('the destination nova-compute on %s does not run this '
                'driver (%s). Its instances would be served by another '
                'hypervisor: a delete would remove the server in nova and '
                'leave the node deployed. Choose a host that runs '
                'nova-ironic-multi' % (name, dest.foreign))
    why = zones.refusal(source.service_host or source.name, source.cell,
                        source.zone, name, dest.cell, dest.zone)
    if why:
        return why
    if moving and scopes is not None:
        why = scopes.mismatch(name, dest.reported, moving, by_shard)
        if why:
            return ('%s. Choose a destination that serves the conductor '
                    'group%s of these nodes'
                    % (why, '' if by_shard else ' and shard'))
    return None


def _service(ctxt: Any, host: str) -> Any:
    try:
        return objects.Service.get_by_compute_host(ctxt, host)
    except exception.ComputeHostNotFound:
        raise Refused('There is no nova-compute service on host %r.'
                      % host) from None


def compute_nodes(ctxt: Any, host: str) -> list[Any]:
    try:
        return list(objects.ComputeNodeList.get_all_by_host(ctxt, host))
    except exception.ComputeHostNotFound:
        return []


def services(ctxt: Any, source: str, dest: str) -> tuple[Any, Any]:
    """The two services, once the source is known to be fenced."""
    if source.lower() == dest.lower():
        raise Refused('--from and --to are the same host.')
    src = _service(ctxt, source)
    dst = _service(ctxt, dest)
    if not src.forced_down:
        raise Refused(
            'Refusing: nova-compute on %s is not forced down. Make sure it '
            'is stopped for good, then fence it with "openstack compute '
            'service set --down %s nova-compute" and run this again.'
            % (source, source))
    return src, dst


def _host(ctxt: Any, svc: Any, up: bool | None,
          marked: frozenset[str], zones: dict[str, str]) -> fleet_mod.Host:
    nodes = compute_nodes(ctxt, svc.host)
    return fleet_mod.record(
        svc, up, {cn.hypervisor_hostname for cn in nodes
                  if cn.hypervisor_type == fleet_mod.IRONIC},
        {cn.hypervisor_type for cn in nodes
         if cn.hypervisor_type != fleet_mod.IRONIC},
        marked, zones[svc.host])


def check(ctxt: Any, src: Any, dst: Any, moves: Sequence[Move] = (),
          scopes: Scopes | None = None, by_shard: bool = False) -> None:
    """Refuse unless ``dst`` would manage the nodes of ``moves``.

    By :func:`refusal`, with the facts nova and placement give now.
    """
    try:
        marked = marker.read()
    except marker.MarkerError as e:
        raise Refused('Refusing: cannot tell whether %s runs this driver: '
                      '%s' % (dst.host, e)) from e
    found = zones.of(ctxt, [src.host, dst.host])
    source = _host(ctxt, src, None, marked, found)
    dest = _host(ctxt, dst, servicegroup.API().service_is_up(dst), marked,
                 found)
    why = refusal(source, dest, [m.info for m in moves if m.info], scopes,
                  by_shard)
    if why:
        raise Refused('Refusing: %s.' % why)
