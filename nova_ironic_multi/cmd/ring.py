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
from nova_ironic_multi.cmd import shards
from nova_ironic_multi.cmd import takeover
from nova_ironic_multi import nodeinfo
from nova_ironic_multi import ownership
from nova_ironic_multi import rings


def _balance(counts: Sequence[int]) -> float | None:
    if not counts or not sum(counts):
        return None
    return max(counts) / (sum(counts) / len(counts))


def destinations(fleet: fleet_mod.Fleet, name: str,
                 scopes: takeover.Scopes) -> list[str]:
    """The hosts ``takeover --from name`` would accept now."""
    host = fleet.hosts[name]
    moving = scopes.nodes(sorted(host.with_instance))
    return [other for other, h in sorted(fleet.hosts.items())
            if other != name and h.can_take_over and
            scopes.mismatch(other, h.reported, moving) is None]


def advice(fleet: fleet_mod.Fleet, name: str,
           scopes: takeover.Scopes) -> str:
    """What to do about a host whose instances' nodes nobody manages.

    Never a takeover that ``takeover`` would refuse: the source must be
    forced down first, and only destinations it accepts are named.
    """
    host = fleet.hosts[name]
    if host.service_host is None:
        return ('%s has no nova-compute service record: the nodes of its '
                'instances stay unmanaged until a service named %s runs.'
                % (name, name))
    dests = destinations(fleet, name, scopes)
    if not dests:
        then = ('no up and enabled host serves the conductor group and '
                'shard of those nodes, so a takeover would be refused: '
                'start %s again, or a host that serves them' % name)
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
    stranded = sorted(name for name, h in fleet.hosts.items()
                      if (h.with_instance or h.orphaned) and not h.running)
    scopes = takeover.Scopes(fleet.client) if fleet.client else None
    advised = {name: advice(fleet, name, scopes) if scopes else ''
               for name in stranded}
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
        'hosts_not_managing_their_instances': stranded,
        'advice': advised,
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
    if fleet.partition.by_shard:
        data['shards'], shard_text = shards.section(fleet)
        text += ['', shard_text]
    output.emit(out, fmt, data, '\n'.join(text))
    return 0


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
        rule = 'free node placed by the %s ring' % part.ring_algorithm
        first = fleet.ring.owners(node.uuid, 1)
        if not fleet.members:
            rule += ' (no live member: nobody manages it)'
        elif first and first[0] != fleet.manager(node.uuid):
            rule += ' (its first choice %s is at capacity)' % first[0]
        return rule
    if instance in fleet.instance_hosts:
        host_name = fleet.instance_hosts[instance]
        rule = ('its instance %s belongs to %s (a node with an instance '
                'stays with the instance\'s host)' % (instance, host_name))
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
        successors = [s for s in fleet.ring.owners(node.uuid,
                                                   len(fleet.members))
                      if s != owner]
    else:
        # A node with an instance never moves by itself (takeover moves it).
        successors = []
    data: dict[str, Any] = {
        'node': node.uuid, 'owner': owner, 'reason': rule,
        'successors': successors,
        'provision_state': node.provision_state,
        'instance_uuid': node.instance_uuid,
        'conductor_group': node.conductor_group}
    text = '\n'.join([
        'Node %s (%s, conductor group %r)' % (
            node.uuid, node.provision_state, node.conductor_group),
        'Managed by: %s' % (owner or 'nobody'),
        'Why: %s' % rule,
        'Takes over if it leaves, in order: %s' % (
            ', '.join(successors) or 'nobody'),
    ])
    output.emit(out, fmt, data, text)
    return 0


def simulate(fleet: fleet_mod.Fleet, add: Sequence[str],
             remove: Sequence[str], out: TextIO, fmt: str) -> int:
    part = fleet.partition
    after_members = (set(fleet.members) |
                     {h.lower() for h in add}) - {h.lower() for h in remove}
    before = fleet.ring.assign(fleet.free)
    after = rings.load(part.ring_algorithm, after_members,
                       part.partition_exponent).assign(fleet.free)
    moved = sorted(n for n in fleet.free if before.get(n) != after.get(n))
    hosts = sorted(set(fleet.members) | after_members)
    shares_before = collections.Counter(before.values())
    shares_after = collections.Counter(after.values())
    counts = {h: (shares_before[h], shares_after[h]) for h in hosts}
    # A newcomer takes its share of the new ring, a leaver gives up its
    # share of the old one: no ring can move fewer nodes. (Adding a member
    # or removing a stranger changes nothing.)
    n_free = len(fleet.free)
    joined = after_members - set(fleet.members)
    left = set(fleet.members) - after_members
    ideal = (n_free * len(joined) / max(1, len(after_members)) +
             n_free * len(left) / max(1, len(fleet.members)))
    data: dict[str, Any] = {
        'members_before': sorted(fleet.members),
        'members_after': sorted(after_members),
        'free_nodes': len(fleet.free), 'moved': len(moved),
        'ideal_moved': round(ideal, 1), 'moved_nodes': moved,
        'per_host': {h: {'before': b, 'after': a}
                     for h, (b, a) in counts.items()},
    }
    rows = [[h, b, a, '%+d' % (a - b)] for h, (b, a) in counts.items()]
    text = '\n'.join([
        'Members: %s -> %s' % (','.join(sorted(fleet.members)) or '-',
                               ','.join(sorted(after_members)) or '-'),
        output.table(['HOST', 'FREE NOW', 'FREE AFTER', 'CHANGE'], rows),
        '%d of %d free nodes would move (about %.0f is the least any ring '
        'could move); nodes with instances never move.' % (
            len(moved), len(fleet.free), ideal),
    ])
    output.emit(out, fmt, data, text)
    return 0
