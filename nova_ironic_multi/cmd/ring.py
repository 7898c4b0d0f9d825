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
"""``ring show``, ``ring explain`` and ``ring simulate``."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, TextIO

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import output
from nova_ironic_multi.cmd import settings_check
from nova_ironic_multi.cmd import shards
from nova_ironic_multi.cmd import takeover
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import sharding
from nova_ironic_multi.ironic import nodeinfo

#: ``ring explain`` names at most this many successors of a free node.
SUCCESSORS = 3


def _balance(counts: Sequence[int]) -> float | None:
    if not counts or not sum(counts):
        return None
    return max(counts) / (sum(counts) / len(counts))


def destinations(fleet: fleet_mod.Fleet, name: str,
                 scopes: takeover.Scopes) -> dict[str, str | None]:
    """Every other host, and why ``takeover --from name`` refuses it.

    None for the hosts it accepts now: :func:`takeover.refusal` for the
    nodes it would move.
    """
    host = fleet.hosts[name]
    moving = scopes.nodes(sorted(host.to_move))
    return {other: takeover.refusal(host, h, moving, scopes,
                                    fleet.partition.by_shard)
            for other, h in sorted(fleet.hosts.items()) if other != name}


def advice(fleet: fleet_mod.Fleet, name: str, scopes: takeover.Scopes,
           refused: dict[str, str | None] | None = None) -> str:
    """What to do about a host whose instances' nodes nobody manages.

    Never a takeover that ``takeover`` would refuse or that would move
    nothing: the source must be forced down first, and only destinations
    it accepts are named.

    :param refused: :func:`destinations` of ``name``, if already known.
    """
    host = fleet.hosts[name]
    if host.service_host is None:
        return ('%s has no nova-compute service record: the nodes of its '
                'instances stay unmanaged until a service named %s runs.'
                % (name, name))
    state = 'forced down' if host.forced_down else 'down'
    if not host.to_move:
        return ('%s is %s: the nodes of its instances are unmanaged until '
                'it returns, and a takeover would move nothing (nova records '
                'none of those nodes for it): start %s again.'
                % (name, state, name))
    if refused is None:
        refused = destinations(fleet, name, scopes)
    dests = [h for h, why in refused.items() if why is None]
    if not dests:
        then = ('no host would be accepted as the destination (up and '
                'enabled, running this driver, in its availability zone%s, '
                'serving the conductor group%s of those nodes), so a '
                'takeover would be refused: start %s again, or such a host'
                % (' %r' % host.zone if host.zone else '',
                   '' if fleet.partition.by_shard else ' and shard', name))
    else:
        then = ('"nova-ironic-multi takeover --from %s --to HOST" moves '
                'them (HOST one of: %s)' % (host.service_host,
                                            ', '.join(dests)))
    if host.forced_down:
        return ('%s is forced down: the nodes of its instances are '
                'unmanaged until it returns; %s.' % (name, then))
    return ('%s is down: the nodes of its instances are unmanaged until it '
            'returns. If it is stopped for good, fence it first '
            '("openstack compute service set --down %s nova-compute"); '
            'then %s.' % (name, host.service_host, then))


def show(fleet: fleet_mod.Fleet, out: TextIO, fmt: str) -> int:
    part = fleet.partition
    free = set(fleet.free)
    rows, data_hosts = [], []
    for name in sorted(fleet.hosts):
        host = fleet.hosts[name]
        managed_free = len(host.managed & free)
        managed_taken = len(host.managed & (host.with_instance |
                                            host.orphaned))
        rows.append([name, host.state,
                     'disabled' if host.disabled else 'enabled',
                     'yes' if host.member else 'no', managed_free,
                     '%d/%d' % (managed_taken, len(host.with_instance) +
                                len(host.orphaned))])
        data_hosts.append({
            'host': name, 'state': host.state, 'disabled': host.disabled,
            'member': host.member, 'free_nodes': managed_free,
            'nodes_with_instance': len(host.with_instance),
            'orphaned_nodes': len(host.orphaned),
            'managed_nodes_with_instance': managed_taken,
            'managed': sorted(host.managed)})
    member_free = [len(fleet.hosts[m].managed & free) for m in fleet.members]
    balance = _balance(member_free)
    # Hosts whose instances' nodes nobody manages: not running, and so
    # neither keeping them (rule 1) nor letting anyone else (rule 3).
    elsewhere = settings_check.elsewhere(fleet.hosts, part.scope)
    stranded = sorted(name for name, h in fleet.hosts.items()
                      if (h.with_instance or h.orphaned) and not h.running)
    scopes = takeover.Scopes(fleet.client) if fleet.client else None
    refused = {name: destinations(fleet, name, scopes)
               for name in stranded if scopes and
               fleet.hosts[name].service_host and fleet.hosts[name].to_move}
    advised = {name: advice(fleet, name, scopes, refused.get(name))
               if scopes else '' for name in stranded}
    orphans = [{'node': n.uuid, 'instance': n.instance_uuid,
                'host': fleet.deleted_hosts[n.instance_uuid],
                'managed_by': fleet.manager(n.uuid)}
               for n in fleet.in_scope
               if n.instance_uuid in fleet.deleted_hosts]
    unknown = [{'node': n.uuid, 'instance': n.instance_uuid,
                'logged_by': fleet.ring_owner(n.uuid)}
               for n in fleet.unknown]
    data: dict[str, Any] = {
        'partition': part.summary(), 'members': sorted(fleet.members),
        'hosts': data_hosts, 'nodes_listed': len(fleet.nodes),
        'nodes_in_scope': len(fleet.in_scope), 'free_nodes': len(free),
        'balance_peak_to_mean': balance,
        'orphaned_nodes': orphans,
        'nodes_with_unknown_instance': unknown,
        'hosts_not_managing_their_instances': stranded + sorted(elsewhere),
        'hosts_dividing_another_scope': {
            name: {'scope': _scope(fleet, name), 'nodes': nodes}
            for name, nodes in elsewhere.items()},
        'advice': advised,
        # Per stranded host: what a takeover moves, and why each other
        # host would be refused as its destination (null: accepted).
        'takeover': {name: {'nodes': sorted(fleet.hosts[name].to_move),
                            'destinations': by_dest}
                     for name, by_dest in refused.items()},
        'cell_conflicts': list(fleet.cell_conflicts),
        'recent_takeovers': [t.as_dict() for t in fleet.takeovers],
        'settings_differ': list(fleet.settings_differ),
        'settings_unread': fleet.settings_unread,
    }
    text = [
        'Scope: %s; peers: %s; membership: %s; ring: %s' % (
            part.scope.describe(),
            ','.join(sorted(part.peers)) if part.peers else 'any',
            part.membership_driver, data['partition']['ring']),
        'Live members (%d): %s' % (len(fleet.members),
                                   ', '.join(sorted(fleet.members)) or
                                   'none'),
        '',
        output.table(['HOST', 'SERVICE', 'STATUS', 'MEMBER', 'FREE NODES',
                      'WITH INSTANCE (MANAGED/ALL)'], rows),
        '',
        '%d nodes listed, %d in scope, %d free; free-node balance '
        '(peak/mean over members): %s' % (
            len(fleet.nodes), len(fleet.in_scope), len(free),
            '%.3f' % balance if balance else 'n/a'),
    ]
    kept = sorted(name for name, h in fleet.hosts.items()
                  if h.running and not h.member and h.with_instance)
    for name in kept:
        text.append('Note: %s is not a ring member (%s) but runs: it keeps '
                    'managing the nodes of its instances and claims no '
                    'free node.' % (name, 'disabled' if
                                    fleet.hosts[name].disabled else
                                    'not a live peer'))
    for name in stranded:
        text.append('Warning: %s' % advised[name])
    for name, nodes in elsewhere.items():
        text.append(
            'Warning: %s divides %s now (as it publishes), so nobody '
            'manages the %d node(s) of its servers in %s, and their servers '
            'cannot be acted on. Move it back to this scope, then hand its '
            'servers over before moving it (operations guide, "Moving a '
            'host to another conductor group").' % (
                name, _scope(fleet, name), len(nodes),
                part.scope.describe()))
    if fleet.cell_conflicts:
        text += ['', 'Warning: One Ironic scope belongs to one cell. A '
                 'compute sees only the services and compute nodes of its '
                 'own cell, so the computes of two cells divide the same '
                 'nodes apart and claim each free node twice. Serve each '
                 'conductor group (or the whole fleet) from one cell:']
        text += ['  %s' % line for line in fleet.cell_conflicts]
    if orphans:
        text += ['', 'Nodes of instances nova deleted while their host was '
                 'down (the host keeps each; nova\'s reaper, [DEFAULT] '
                 'running_deleted_instance_action, acts on it while the '
                 'host runs):',
                 output.table(['NODE', 'DELETED INSTANCE', 'HOST',
                               'MANAGED BY'],
                              [[o['node'], o['instance'], o['host'],
                                o['managed_by'] or 'nobody (host not '
                                'running)'] for o in orphans])]
    if unknown:
        text += ['', 'Nodes whose instance nova has never heard of (no host '
                 'manages them and nothing is deployed over them; undeploy '
                 'them in Ironic if the instance is not wanted):',
                 output.table(['NODE', 'UNKNOWN INSTANCE', 'LOGGED BY'],
                              [[u['node'], u['instance'],
                                u['logged_by'] or '-'] for u in unknown])]
    if fleet.takeovers:
        text += ['', 'Recent takeovers of fenced hosts\' instances, '
                 'automatic and by hand with "nova-ironic-multi takeover" '
                 '(newest first; "openstack server event list" shows each '
                 'as a takeover or manual-takeover action):',
                 output.table(['TIME', 'INSTANCE', 'FROM', 'TO', 'HOW',
                               'CELL'],
                              [[t.at.strftime('%Y-%m-%d %H:%M:%S')
                                if t.at else '-', t.instance, t.source,
                                t.destination, t.how, t.cell]
                               for t in fleet.takeovers])]
    if fleet.partition.by_shard:
        data['shards'], shard_text = shards.section(fleet)
        text += ['', shard_text]
    text += settings_check.lines(fleet.settings_differ, fleet.settings_unread)
    output.emit(out, fmt, data, '\n'.join(text))
    return 0


def _scope(fleet: fleet_mod.Fleet, name: str) -> str:
    scope = fleet.hosts[name].scope
    return scope.describe() if scope is not None else 'an unknown scope'


def _why(fleet: fleet_mod.Fleet, node: nodeinfo.NodeInfo,
         scopes: takeover.Scopes | None) -> str:
    """Why a node is managed by whom, by the rules the driver applies."""
    part = fleet.partition
    if not ownership.in_scope(node, part.scope):
        return ('out of scope: conductor group %r, shard %r; this partition '
                'is %s' % (node.conductor_group, node.shard,
                           part.scope.describe()))
    instance = node.instance_uuid
    if instance is None:
        return _placed(fleet, node)
    if instance in fleet.instance_hosts:
        host_name = fleet.instance_hosts[instance]
        rule = ('its instance %s belongs to %s (a node with an instance '
                'stays with the instance\'s host)' % (instance, host_name))
    elif instance in fleet.deleted_hosts and not fleet.deleted_hosts[
            instance]:
        owner = fleet.ring_owner(node.uuid)
        return ('its instance %s was deleted with no host: the ring gives '
                'the node to %s, which keeps it so nova\'s reaper ([DEFAULT] '
                'running_deleted_instance_action) acts on it'
                % (instance, owner or 'no host (no live member)'))
    elif instance in fleet.deleted_hosts:
        host_name = fleet.deleted_hosts[instance]
        rule = ('its instance %s was deleted while its host %s was down: %s '
                'keeps the node so nova\'s reaper ([DEFAULT] '
                'running_deleted_instance_action) acts on it'
                % (instance, host_name, host_name))
    else:
        owner = fleet.ring_owner(node.uuid)
        return ('its instance %s is unknown to nova: no host manages it and '
                'nothing is deployed over it; %s logs it'
                % (instance, owner or 'no host (no live member)'))
    host = fleet.hosts.get(host_name)
    if host is not None and host.running and not host.member:
        rule += ('; %s is not a ring member (%s) but runs, so it keeps the '
                 'node' % (host_name, 'disabled' if host.disabled
                           else 'not a live peer'))
    elif host is not None and not host.running:
        rule += '; %s' % (advice(fleet, host_name, scopes) if scopes
                          else '%s is not running, so the node is '
                          'unmanaged' % host_name)
    return rule


def _placed(fleet: fleet_mod.Fleet, node: nodeinfo.NodeInfo) -> str:
    """Why rule 2 gives a free node to its manager.

    Only a capped placement passes a key on from its first choice: the
    ``balanced`` ring's node capacity, and its shard weighing; a
    ``compatible`` placement is always its first choice.
    """
    part = fleet.partition
    owner = fleet.ring_owner(node.uuid)
    # The key the ring placed: the shard's name, or the node's UUID.
    key = node.shard if part.by_shard and node.shard is not None else None
    by_shard = key is not None
    if key is not None:
        counts = fleet.shard_counts or {}
        rule = ('free node of shard %r, and the %s ring gives that shard '
                'to %s' % (node.shard, part.ring_algorithm,
                           owner or 'nobody'))
        if part.ring_algorithm in sharding.WEIGHTED:
            rule += (' (shards are weighed by node count: %d here, %d '
                     'without a shard)' % (counts.get(key, 0),
                                           counts.get(sharding.UNSHARDED,
                                                      0)))
    elif part.by_shard:
        unsharded = sum(1 for n in fleet.in_scope if n.shard is None)
        rule = ('free node without a shard: the %s ring divides the %d '
                'node(s) in scope without a shard node by node, and gives '
                'it to %s' % (part.ring_algorithm, unsharded,
                              owner or 'nobody'))
    else:
        rule = 'free node placed by the %s ring' % part.ring_algorithm
    if not fleet.members:
        return rule + ' (no live member: nobody manages it)'
    first = fleet.ring.owners(key or node.uuid, 1)
    if first and owner is not None and first[0] != owner:
        if by_shard:
            rule += ('; its first choice %s had no room for the shard '
                     'within the cap of the weighing' % first[0])
        else:
            rule += ' (its first choice %s is at capacity)' % first[0]
    return rule


def successors(fleet: fleet_mod.Fleet, node_uuid: str,
               limit: int = SUCCESSORS) -> list[str]:
    """Who would manage a free node if its manager left, then the next.

    Each by recomputing the services' division without the members before
    it: a capped ring or the shard weighing may not follow the ring order.
    """
    members = set(fleet.members)
    current = fleet.ring_owner(node_uuid)
    found: list[str] = []
    while current is not None and len(found) < limit:
        members.discard(current)
        current = fleet.placement(members).get(node_uuid) if members else None
        if current is not None:
            found.append(current)
    return found


def explain(fleet: fleet_mod.Fleet, node_uuid: str, out: TextIO,
            fmt: str) -> int:
    node = fleet.node(node_uuid)
    part = fleet.partition
    if node is None:
        out.write('Node %s is not among the %d nodes Ironic lists for %s.\n'
                  % (node_uuid, len(fleet.nodes), part.scope.describe()))
        return 1
    scopes = takeover.Scopes(fleet.client) if fleet.client else None
    owner = fleet.manager(node.uuid)
    rule = _why(fleet, node, scopes)
    if node.instance_uuid is None and ownership.in_scope(node, part.scope):
        after = successors(fleet, node.uuid)
    else:
        # A node with an instance never moves by itself (takeover moves it).
        after = []
    data: dict[str, Any] = {
        'node': node.uuid, 'owner': owner, 'reason': rule,
        'successors': after,
        'provision_state': node.provision_state,
        'instance_uuid': node.instance_uuid,
        'conductor_group': node.conductor_group,
        'shard': node.shard, 'divide': part.divide,
        'settings_differ': list(fleet.settings_differ),
        'settings_unread': fleet.settings_unread}
    text = '\n'.join([
        'Node %s (%s, conductor group %r%s)' % (
            node.uuid, node.provision_state, node.conductor_group,
            ', shard %r' % node.shard if part.by_shard else ''),
        'Managed by: %s' % (owner or 'nobody'),
        'Why: %s' % rule,
        'Takes over if it leaves, in order: %s' % (
            ', '.join(after) or 'nobody'),
    ] + settings_check.lines(fleet.settings_differ, fleet.settings_unread))
    output.emit(out, fmt, data, text)
    return 0


def simulate(fleet: fleet_mod.Fleet, add: Sequence[str],
             remove: Sequence[str], out: TextIO, fmt: str) -> int:
    """What would move, by the division the services compute.

    The ring input is every node in scope, and with ``divide = shards``
    the shards are placed again for the new members: a period's division
    (:func:`division.divide`) with the members changed, nothing else.
    """
    part = fleet.partition
    after_members = (set(fleet.members) |
                     {h.lower() for h in add}) - {h.lower() for h in remove}
    free = fleet.free
    placed_before = fleet.placement()
    placed_after = fleet.placement(after_members)
    before = {n: placed_before.get(n) for n in free}
    after = {n: placed_after.get(n) for n in free}
    moved = sorted(n for n in free if before[n] != after[n])
    hosts = sorted(set(fleet.members) | after_members)
    shares_before = collections.Counter(before.values())
    shares_after = collections.Counter(after.values())
    counts = {h: (shares_before[h], shares_after[h]) for h in hosts}
    # A newcomer takes its share of the new ring, a leaver gives up its
    # share of the old one: no ring can move fewer nodes. A node a leaver
    # gives to a newcomer counts for both. (Adding a member or removing a
    # stranger changes nothing.)
    n_free = len(free)
    joined = after_members - set(fleet.members)
    left = set(fleet.members) - after_members
    ideal = max(n_free * len(joined) / max(1, len(after_members)),
                n_free * len(left) / max(1, len(fleet.members)))
    data: dict[str, Any] = {
        'members_before': sorted(fleet.members),
        'members_after': sorted(after_members),
        'divide': part.divide,
        'free_nodes': n_free, 'moved': len(moved),
        'ideal_moved': round(ideal, 1), 'moved_nodes': moved,
        'per_host': {h: {'before': b, 'after': a}
                     for h, (b, a) in counts.items()},
        'settings_differ': list(fleet.settings_differ),
        'settings_unread': fleet.settings_unread,
    }
    lines = [
        'Members: %s -> %s' % (','.join(sorted(fleet.members)) or '-',
                               ','.join(sorted(after_members)) or '-'),
        output.table(['HOST', 'FREE NOW', 'FREE AFTER', 'CHANGE'],
                     [[h, b, a, '%+d' % (a - b)]
                      for h, (b, a) in counts.items()]),
        '%d of %d free nodes would move (about %.0f is the least any ring '
        'could move); nodes with instances never move.' % (
            len(moved), n_free, ideal),
    ]
    if part.by_shard:
        shards_before = fleet.shard_assignment()
        shards_after = fleet.shard_assignment(after_members)
        changed = sorted(s for s in shards_before
                         if s != sharding.UNSHARDED and
                         shards_before[s] != shards_after.get(s))
        data['moved_shards'] = changed
        lines.append('divide = shards: %d shard(s) change hands, each with '
                     'its free nodes; the nodes without a shard are divided '
                     'node by node.' % len(changed))
    lines += settings_check.lines(fleet.settings_differ, fleet.settings_unread)
    output.emit(out, fmt, data, '\n'.join(lines))
    return 0
