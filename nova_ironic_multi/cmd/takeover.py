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
of the source host that carries instances or orphans (instances nova
deleted while the host was down, their node still deployed for them), its
instances and orphans to the destination the way the automatic takeover
does (:func:`nova_ironic_multi.hosts.takeover.move`: a fresh read, a claim on
the
task state, then the host, through nova's objects, so nova's API is refused
meanwhile and ``instance.update`` is notified), then the compute node row.
An instance a peer moved since the plan is left where it is. The
destination manages the node from the moment the instance is its own (a
node with an instance stays with the instance's host), recovers an
instance moved in the middle of an action (its ``manual-takeover`` instance
action), and its reaper tears the orphans' nodes down. Free nodes are not
moved: the ring gives them to the live peers by itself.

It refuses unless the source service is forced down (the operator's word
that it is fenced: two services must never manage one node), and unless
the destination would manage the nodes (:func:`refusal`, the very rule
``ring show`` names destinations by): up and enabled, running this driver,
in the source's availability zone (the instances' zone must not change),
serving the nodes' conductor group, and, with ``divide = nodes``, their
shard. It is a dry run unless ``--execute``; nodes already moved are
skipped, so it can be run again after a failure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TextIO

from nova import context as nova_context
from nova import exception
from nova import objects
from nova import servicegroup
from oslo_config import cfg

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import output
from nova_ironic_multi.cmd import takeover_checks as checks
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo


# The checks, from where they live (callers name them here too).
Refused = checks.Refused
Move = checks.Move
Scopes = checks.Scopes
refusal = checks.refusal
services = checks.services
check = checks.check


def plan(ctxt: Any, source: str, client: ironic.Ironic) -> list[Move]:
    """The compute nodes of ``source`` with instances or orphans, and them.

    An orphan is an instance nova deleted while ``source`` was down (its
    host still ``source``) whose node Ironic still has deployed for it:
    ``source`` kept the node for its reaper, and nobody else tears it down.
    """
    found = []
    for cn in checks.compute_nodes(ctxt, source):
        if cn.hypervisor_type != fleet_mod.IRONIC:
            continue
        instances = objects.InstanceList.get_by_host_and_node(
            ctxt, source, cn.hypervisor_hostname, expected_attrs=[])
        try:
            info: nodeinfo.NodeInfo | None = client.get_node(
                cn.hypervisor_hostname)
        except ironic.NodeNotFound:
            info = None
        found.append(Move(cn.hypervisor_hostname, cn.id,
                          [(i.uuid, i.display_name) for i in instances],
                          info=info))
    # The instances Ironic has on those nodes that nova does not list as
    # live there: one query, deleted ones included.
    others = {m.info.instance_uuid: m for m in found
              if m.info is not None and m.info.instance_uuid and
              m.info.instance_uuid not in {u for u, _ in m.instances}}
    if others:
        for inst in objects.InstanceList.get_by_filters(
                ctxt.elevated(read_deleted='yes'), {'uuid': sorted(others)},
                expected_attrs=[]):
            move = others[inst.uuid]
            if (inst.deleted and
                    (inst.host or '').lower() == source.lower() and
                    inst.node in (None, move.node)):
                move.orphans.append(inst.uuid)
    return [m for m in found if m.instances or m.orphans]


@dataclasses.dataclass
class Outcome:
    """What moving one node's instances did."""

    #: Instances (and orphans) now on the destination.
    moved: list[str] = dataclasses.field(default_factory=list)
    #: Instance -> the host it is on now, another than the source: moved
    #: since the plan (by a peer's takeover, say), left alone.
    elsewhere: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Whether the compute node row now names the destination.
    node_moved: bool = False


def members(ctxt: Any) -> frozenset[str]:
    """The nova-compute hosts up and not forced down, lower-cased: a claim
    one of them holds is its move under way (:func:`takeover.move`).
    """
    group = servicegroup.API()
    return frozenset(
        svc.host.lower()
        for svc in objects.ServiceList.get_by_binary(
            ctxt, takeover.BINARY, include_disabled=True)
        if not svc.forced_down and group.service_is_up(svc))


def _move_one(ctxt: Any, move: Move, source: str, dst: Any,
              live: frozenset[str]) -> Outcome:
    """Move the instances and orphans of one node to ``dst``, then its
    compute node row.

    Each instance as the automatic takeover moves it (:func:`takeover.move`:
    a fresh read, a claim on its task state, then its host), so a move
    another host made since the plan is never overwritten, nova's API is
    refused meanwhile, and ``instance.update`` is notified as nova's own
    writes do. Each gets a :data:`takeover.MANUAL_ACTION` instance action
    (``openstack server event list``); one in the middle of an action gets
    it before the move, so that its new host finds it and recovers it
    (:func:`recovery.handed_over`). The compute node row follows once every
    instance of the node is the destination's (the destination's resource
    tracker would move it at its next period anyway).

    :raises nova.exception.InstanceUpdateConflict: nova's API or a peer
        changed an instance meanwhile.
    :raises nova.exception.NovaException:
    """
    done = Outcome()
    deleted = ctxt.elevated(read_deleted='yes')
    lowered = frozenset([source.lower()])
    for uuid in [u for u, _ in move.instances] + list(move.orphans):
        inst = objects.Instance.get_by_uuid(deleted, uuid, expected_attrs=[])
        if (inst.host or '').lower() != source.lower():
            done.elsewhere[uuid] = inst.host or '-'
            continue
        # (A claim an earlier run left holds the task state it found.)
        held = takeover.parse_claim(inst.task_state)
        state = held[1] if held is not None else inst.task_state
        in_flight = (not inst.deleted and
                     recovery.needs_recovery(inst.vm_state, state))
        if in_flight:
            takeover.record(uuid, source, dst.host, takeover.MANUAL_ACTION,
                           ctxt)
        if not takeover.move(inst, dst.host, lowered, live):
            done.elsewhere[uuid] = inst.host or '-'
            continue
        if not in_flight:
            takeover.record(uuid, source, dst.host, takeover.MANUAL_ACTION,
                           ctxt)
        done.moved.append(uuid)
    if done.elsewhere:
        return done
    cn = objects.ComputeNode.get_by_id(ctxt, move.compute_node_id)
    if (cn.host or '').lower() == source.lower():
        cn.host = dst.host
        cn.service_id = dst.id
        cn.save()
    done.node_moved = True
    return done


def _describe_move(move: Move) -> str:
    text = '%d instance(s)' % len(move.instances)
    if move.orphans:
        text += ' and %d deleted instance(s)' % len(move.orphans)
    return text


def run(source: str, dest: str, execute: bool, out: TextIO,
        fmt: str, conf: cfg.ConfigOpts | None = None) -> int:
    conf = conf or cfg.CONF
    # The partition as the services read it: with divide = shards nova's
    # static [ironic] shard scope is not in use.
    part = partition_opts.resolve(conf, fleet_mod.OBSERVER, observer=True)
    ctxt = nova_context.get_admin_context()
    try:
        mapping = objects.HostMapping.get_by_host(ctxt, source)
    except exception.HostMappingNotFound as e:
        raise Refused('Host %r is not mapped to any cell: check the name '
                      '(nova-manage cell_v2 list_hosts).' % source) from e
    with nova_context.target_cell(ctxt, mapping.cell_mapping) as cctxt:
        src, dst = services(cctxt, source, dest)
        client = ironic.Ironic(conf)
        moves = plan(cctxt, src.host, client)
        check(cctxt, src, dst, moves, Scopes(client), part.by_shard)
        data: dict[str, Any] = {
            'from': src.host, 'to': dst.host, 'execute': execute,
            'nodes': [{'node': m.node,
                       'instances': [u for u, _ in m.instances],
                       'orphans': list(m.orphans)}
                      for m in moves]}
        orphans = sum(len(m.orphans) for m in moves)
        if not execute:
            rows = [[m.node, ', '.join('%s (%s)' % (u, n)
                                       for u, n in m.instances) or '-',
                     ', '.join(m.orphans) or '-']
                    for m in moves]
            text = '\n'.join([
                'Dry run: %d node(s) would move from %s to %s, with %d '
                'instance(s) and %d deleted instance(s) (orphans, still '
                'deployed).' % (
                    len(moves), src.host, dst.host,
                    sum(len(m.instances) for m in moves), orphans),
                output.table(['NODE', 'INSTANCES', 'DELETED INSTANCES'],
                             rows) if rows else '',
                'Run again with --execute to move them.'])
            output.emit(out, fmt, data, text)
            return 0
        done = []
        elsewhere: dict[str, str] = {}
        live = members(cctxt)
        for i, move in enumerate(moves, 1):
            try:
                got = _move_one(cctxt, move, src.host, dst, live)
            except exception.InstanceUpdateConflict as e:
                out.write('[%d/%d] node %s: an instance changed meanwhile '
                          '(nova\'s API acted on it, or a peer moved it): '
                          '%s\nRun the same command again to continue.\n'
                          % (i, len(moves), move.node, e))
                return 1
            except Exception as e:
                out.write('[%d/%d] node %s: FAILED: %s\nWhat moved before '
                          'the failure stays moved; run the same command '
                          'again to continue.\n'
                          % (i, len(moves), move.node, e))
                return 1
            elsewhere.update(got.elsewhere)
            if got.node_moved:
                done.append(move.node)
            if fmt == 'json':
                continue
            for uuid, host in sorted(got.elsewhere.items()):
                out.write('[%d/%d] node %s: instance %s is on %s now (moved '
                          'since the plan): left alone\n'
                          % (i, len(moves), move.node, uuid, host))
            if got.node_moved:
                out.write('[%d/%d] node %s: moved with %s to %s\n'
                          % (i, len(moves), move.node, _describe_move(move),
                             dst.host))
        data['moved'] = done
        data['moved_elsewhere_since_the_plan'] = elsewhere
        text = ('Moved %d node(s) from %s to %s; %s manages them from its '
                'next resource-tracker period.'
                % (len(done), src.host, dst.host, dst.host))
        if orphans:
            text += (' Its reaper ([DEFAULT] running_deleted_instance_action)'
                     ' tears down the nodes of the %d deleted instance(s).'
                     % orphans)
        output.emit(out, fmt, data, text)
        return 0
