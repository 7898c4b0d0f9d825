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
from nova_ironic_multi import ownership
from nova_ironic_multi import rings


def _balance(counts: Sequence[int]) -> float | None:
    if not counts or not sum(counts):
        return None
    return max(counts) / (sum(counts) / len(counts))


def show(fleet: fleet_mod.Fleet, out: TextIO, fmt: str) -> int:
    part = fleet.partition
    free = set(fleet.free)
    rows, data_hosts = [], []
    for name in sorted(fleet.hosts):
        host = fleet.hosts[name]
        managed_free = len(host.managed & free)
        rows.append([name, host.state,
                     'disabled' if host.disabled else 'enabled',
                     'yes' if host.member else 'no', managed_free,
                     len(host.with_instance)])
        data_hosts.append({
            'host': name, 'state': host.state, 'disabled': host.disabled,
            'member': host.member, 'free_nodes': managed_free,
            'nodes_with_instance': len(host.with_instance)})
    member_free = [len(fleet.hosts[m].managed & free) for m in fleet.members]
    balance = _balance(member_free)
    orphaned = [n for n in fleet.in_scope if n.instance_uuid and
                n.instance_uuid not in fleet.instance_hosts]
    unmanaged = [name for name, h in fleet.hosts.items()
                 if h.with_instance and not h.member]
    data: dict[str, Any] = {
        'partition': part.summary(), 'members': sorted(fleet.members),
        'hosts': data_hosts, 'nodes_listed': len(fleet.nodes),
        'nodes_in_scope': len(fleet.in_scope), 'free_nodes': len(free),
        'balance_peak_to_mean': balance,
        'nodes_with_unknown_instance': [n.uuid for n in orphaned],
        'hosts_not_managing_their_instances': sorted(unmanaged),
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
                      'WITH INSTANCE'], rows),
        '',
        '%d nodes listed, %d in scope, %d free; free-node balance '
        '(peak/mean over members): %s' % (
            len(fleet.nodes), len(fleet.in_scope), len(free),
            '%.3f' % balance if balance else 'n/a'),
    ]
    for name in sorted(unmanaged):
        text.append('Warning: %s is not a live member; the nodes of its '
                    'instances are unmanaged until it returns or you run '
                    '"nova-ironic-multi takeover --from %s --to <host>".'
                    % (name, name))
    if orphaned:
        text.append('Warning: %d node(s) carry an instance nova does not '
                    'know: %s' % (len(orphaned),
                                  ', '.join(n.uuid for n in orphaned)))
    if part.by_shard:
        data['shards'], shard_text = shards.section(fleet)
        text += ['', shard_text]
    output.emit(out, fmt, data, '\n'.join(text))
    return 0


def explain(fleet: fleet_mod.Fleet, node_uuid: str, out: TextIO,
            fmt: str) -> int:
    node = fleet.node(node_uuid)
    part = fleet.partition
    if node is None:
        out.write('Node %s is not among the %d nodes Ironic lists for %s.\n'
                  % (node_uuid, len(fleet.nodes), part.scope.describe()))
        return 1
    successors = fleet.ring.owners(node.uuid, len(fleet.members))
    owner: str | None
    if not ownership.in_scope(node, part.scope):
        owner, rule = None, (
            'out of scope: conductor group %r, shard %r; this partition is '
            '%s' % (node.conductor_group, node.shard, part.scope.describe()))
    elif node.instance_uuid:
        owner = fleet.instance_hosts.get(node.instance_uuid)
        if owner is None:
            rule = ('its instance %s is unknown to nova: no host manages '
                    'it' % node.instance_uuid)
        else:
            rule = ('its instance %s belongs to %s (a node with an instance '
                    'stays with the instance\'s host)'
                    % (node.instance_uuid, owner))
            host = fleet.hosts.get(owner)
            if host is not None and not host.member:
                rule += ('; %s is %s and not a live member, so the node is '
                         'unmanaged until it returns or is taken over'
                         % (owner, host.state))
    else:
        assignment = fleet.ring.assign(fleet.free)
        owner = assignment.get(node.uuid)
        rule = 'free node placed by the %s ring' % part.ring_algorithm
        if successors and owner != successors[0]:
            rule += (' (its first choice %s is at capacity)'
                     % successors[0])
    data: dict[str, Any] = {
        'node': node.uuid, 'owner': owner, 'reason': rule,
            'successors': [s for s in successors if s != owner],
            'provision_state': node.provision_state,
            'instance_uuid': node.instance_uuid,
            'conductor_group': node.conductor_group}
    text = '\n'.join([
        'Node %s (%s, conductor group %r)' % (
            node.uuid, node.provision_state, node.conductor_group),
        'Managed by: %s' % (owner or 'nobody'),
        'Why: %s' % rule,
        'Takes over if it leaves, in order: %s' % (
            ', '.join(data['successors']) or 'nobody'),
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
