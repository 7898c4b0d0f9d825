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
"""``takeover``: hand a dead host's instances to a live peer.

A node with an instance stays with the instance's host, so when that host
is gone for good its instances cannot be managed (stopped, deleted,
rebuilt) until they change hosts. This moves, for every Ironic compute node
of the source host that carries instances, the compute node and its
instances to the destination in one database transaction, so a failure
never leaves an instance on a host that does not manage its node. Free
nodes are not moved: the ring gives them to the live peers by itself.

It refuses unless the source service is forced down (the operator's word
that it is fenced: two services must never manage one node), unless the
destination is up and enabled, and unless the destination serves the
nodes' conductor group and shard (a service never manages a node outside
its scope, so the instances would stay unmanaged). It is a dry run unless
``--execute``; nodes already moved are skipped, so it can be run again
after a failure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
import dataclasses
from typing import Any, TextIO

from nova import context as nova_context
from nova.db.main import api as db
from nova import exception
from nova import objects
from nova import servicegroup
from oslo_config import cfg

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import output
from nova_ironic_multi import ironic
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import servicegroup as sg_membership
from nova_ironic_multi import nodeinfo
from nova_ironic_multi import ownership
from nova_ironic_multi import partition


class Refused(Exception):
    """The takeover would be unsafe; the message says why and what to do."""


@dataclasses.dataclass
class Move:
    node: str
    compute_node_id: int
    instances: list[tuple[str, str]]   # (uuid, name)


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
                 moving: Sequence[nodeinfo.NodeInfo]) -> str | None:
        """Why ``dest`` would not manage ``moving``, or None."""
        mine = set(dest_nodes)
        if not mine:
            return None
        for node in moving:
            group = (node.conductor_group or '').lower()
            checks = [(partition.Scope(conductor_group=group),
                       'its [ironic_multi] partition_key (or [ironic] '
                       'conductor_group) is not %r' % group)]
            if node.shard is not None:
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


def _service(ctxt: Any, host: str) -> Any:
    try:
        return objects.Service.get_by_compute_host(ctxt, host)
    except exception.ComputeHostNotFound:
        raise Refused('There is no nova-compute service on host %r.'
                      % host) from None


def plan(ctxt: Any, source: str) -> list[Move]:
    """The compute nodes of ``source`` with instances, and the instances."""
    moves = []
    for cn in objects.ComputeNodeList.get_all_by_host(ctxt, source):
        if cn.hypervisor_type != 'ironic':
            continue
        instances = objects.InstanceList.get_by_host_and_node(
            ctxt, source, cn.hypervisor_hostname, expected_attrs=[])
        if instances:
            moves.append(Move(cn.hypervisor_hostname, cn.id,
                              [(i.uuid, i.display_name) for i in instances]))
    return moves


def check(ctxt: Any, source: str, dest: str) -> tuple[Any, Any]:
    """The two services, once the takeover is known to be safe."""
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
    if not fleet_mod.takeover_ok(servicegroup.API().service_is_up(dst),
                                 dst.disabled, dst.forced_down):
        raise Refused('Refusing: the destination nova-compute on %s is not '
                      'up and enabled.' % dest)
    try:
        why = sg_membership.not_this_driver(ctxt, dst)
    except marker.MarkerError as e:
        raise Refused('Refusing: cannot tell whether %s runs this driver: '
                      '%s' % (dest, e)) from e
    if why is not None:
        raise Refused(
            'Refusing: the destination nova-compute on %s does not run '
            'this driver (%s). Its instances would be served by another '
            'hypervisor: a delete would remove the server in nova and '
            'leave the node deployed. Choose a host that runs '
            'nova-ironic-multi.' % (dest, why))
    return src, dst


def ironic_nodes(ctxt: Any, host: str) -> set[str]:
    """The Ironic nodes nova records for ``host``."""
    return {cn.hypervisor_hostname
            for cn in objects.ComputeNodeList.get_all_by_host(ctxt, host)
            if cn.hypervisor_type == 'ironic'}


def check_scope(scopes: Scopes, ctxt: Any, dst: Any,
                moves: Sequence[Move]) -> None:
    """Refuse if the destination does not serve the nodes' scope."""
    if not moves:
        return
    why = scopes.mismatch(dst.host, ironic_nodes(ctxt, dst.host),
                          scopes.nodes(m.node for m in moves))
    if why:
        raise Refused('Refusing: %s. Choose a destination that serves '
                      'the conductor group and shard of these nodes.' % why)


def _move_one(ctxt: Any, move: Move, dst: Any) -> None:
    # One transaction: the compute node and its instances move together.
    # (The cell's own context manager, so nova's calls below join it.)
    with db.get_context_manager(ctxt).writer.using(ctxt):
        db.compute_node_update(ctxt, move.compute_node_id,
                               {'host': dst.host, 'service_id': dst.id})
        for instance_uuid, _ in move.instances:
            db.instance_update(ctxt, instance_uuid, {'host': dst.host})


def run(source: str, dest: str, execute: bool, out: TextIO,
        fmt: str, conf: cfg.ConfigOpts | None = None) -> int:
    ctxt = nova_context.get_admin_context()
    try:
        mapping = objects.HostMapping.get_by_host(ctxt, source)
    except exception.HostMappingNotFound as e:
        raise Refused('Host %r is not mapped to any cell: check the name '
                      '(nova-manage cell_v2 list_hosts).' % source) from e
    with nova_context.target_cell(ctxt, mapping.cell_mapping) as cctxt:
        src, dst = check(cctxt, source, dest)
        moves = plan(cctxt, src.host)
        check_scope(Scopes(ironic.Ironic(conf or cfg.CONF)), cctxt, dst,
                    moves)
        data: dict[str, Any] = {
            'from': src.host, 'to': dst.host, 'execute': execute,
            'nodes': [{'node': m.node,
                       'instances': [u for u, _ in m.instances]}
                      for m in moves]}
        if not execute:
            rows = [[m.node, ', '.join('%s (%s)' % (u, n)
                                       for u, n in m.instances)]
                    for m in moves]
            text = '\n'.join([
                'Dry run: %d node(s) with instances would move from %s to '
                '%s.' % (len(moves), src.host, dst.host),
                output.table(['NODE', 'INSTANCES'], rows) if rows else '',
                'Run again with --execute to move them.'])
            output.emit(out, fmt, data, text)
            return 0
        done = []
        for i, move in enumerate(moves, 1):
            try:
                _move_one(cctxt, move, dst)
            except Exception as e:
                out.write('[%d/%d] node %s: FAILED, nothing of it moved: %s\n'
                          'Run the same command again to continue.\n'
                          % (i, len(moves), move.node, e))
                return 1
            done.append(move.node)
            if fmt != 'json':
                out.write('[%d/%d] node %s: moved with %d instance(s) to '
                          '%s\n' % (i, len(moves), move.node,
                                    len(move.instances), dst.host))
        data['moved'] = done
        output.emit(out, fmt, data,
                    'Moved %d node(s) from %s to %s; %s manages them from '
                    'its next resource-tracker period.'
                    % (len(done), src.host, dst.host, dst.host))
        return 0
