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
"""``shards plan`` and ``shards apply``: label Ironic nodes with shards.

Each node is labelled ``shard-<i>`` among ``--count`` shards, ``i`` a
consistent hash of its UUID (:func:`sharding.label`), so a run is
repeatable and a second run changes nothing. Only nodes without a shard are
labelled unless ``--relabel-all``. Both commands first show what would
change and which free nodes would change hands (nodes with an instance
never do: they stay with the instance's host); ``apply`` then writes each
label with one ``PATCH /v1/nodes/<uuid>`` (policy
``baremetal:node:update:shard``). When some labels cannot be written,
``apply`` says which were written and which were not, and exits non-zero;
running it again writes the rest (a node already labelled is no change).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
import dataclasses
from typing import Any, TextIO

from oslo_config import cfg

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import output
from nova_ironic_multi import division as division_mod
from nova_ironic_multi.division import partition
from nova_ironic_multi.division import sharding
from nova_ironic_multi import ironic


class BadArgument(ValueError):
    """An argument that cannot make a plan."""


#: The most nodes named per outcome of ``shards apply``.
SHOWN = 20


@dataclasses.dataclass
class Applied:
    """What ``shards apply`` wrote."""

    #: ``(node, shard)`` written.
    written: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: ``(node, shard, error)`` tried and not written (or not confirmed).
    failed: list[tuple[str, str, str]] = dataclasses.field(
        default_factory=list)
    #: ``(node, shard)`` not tried: Ironic refused or stopped answering.
    not_attempted: list[tuple[str, str]] = dataclasses.field(
        default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.failed and not self.not_attempted


@dataclasses.dataclass
class Plan:
    count: int
    relabel_all: bool
    #: ``(node, shard now, shard after)`` for every node to label.
    changes: list[tuple[str, str | None, str]]
    #: Shard -> nodes in scope after the labels.
    after: dict[str, int]
    #: ``(node, manager now, manager after)`` of the free nodes that would
    #: change hands in the configured mode.
    moves: list[tuple[str, str | None, str | None]]
    #: The same had every host ``divide = shards`` (only with ``nodes``).
    moves_if_shards: list[tuple[str, str | None, str | None]] | None


def _managers(fleet: fleet_mod.Fleet, shard_of: Mapping[str, str | None],
              counts: Mapping[str, int], by_shard: bool
              ) -> dict[str, str | None]:
    """Free in-scope node -> its manager, as the services would divide.

    :param shard_of: node -> its shard (before or after the labels).
    :param by_shard: divide as ``divide = shards`` (else ``nodes``).
    """
    part = dataclasses.replace(
        fleet.partition,
        divide=partition.SHARDS if by_shard else partition.NODES)
    nodes = [dataclasses.replace(n, shard=shard_of.get(n.uuid, n.shard))
             for n in fleet.nodes]
    placed = division_mod.placement(nodes, fleet.members, part, counts,
                                    fleet.ring_cache)
    return {u: placed.get(u) for u in fleet.free}


def plan(fleet: fleet_mod.Fleet, count: int, relabel_all: bool) -> Plan:
    now = {n.uuid: n.shard for n in fleet.in_scope}
    changes = []
    for node in fleet.in_scope:
        if node.shard is not None and not relabel_all:
            continue
        target = sharding.label(node.uuid, count)
        if target != node.shard:
            changes.append((node.uuid, node.shard, target))
    later: dict[str, str | None] = dict(now)
    counts_after = collections.Counter(fleet.shard_counts or {})
    for uuid, old, new in changes:
        later[uuid] = new
        counts_after[str(old)] -= 1
        counts_after[new] += 1
    counts_after = +counts_after      # drop emptied shards
    by_shard = fleet.partition.by_shard
    before = _managers(fleet, now, fleet.shard_counts or {}, by_shard)
    after = _managers(fleet, later, counts_after, by_shard)
    moves = sorted((u, before[u], after[u]) for u in before
                   if before[u] != after[u])
    moves_if_shards = None
    if not by_shard:
        shard_after = _managers(fleet, later, counts_after, True)
        moves_if_shards = sorted((u, before[u], shard_after[u])
                                 for u in before
                                 if before[u] != shard_after[u])
    in_scope_after = collections.Counter(
        s for s in later.values() if s is not None)
    return Plan(count, relabel_all, changes, dict(in_scope_after), moves,
                moves_if_shards)


def write(client: ironic.Ironic, changes: list[tuple[str, str | None, str]]
          ) -> Applied:
    """Write each label; go on past a node-specific failure.

    A PATCH of ``/shard`` to the same value is no change, so a label whose
    answer was lost is safely written again by the next run.
    """
    done = Applied()
    for i, (uuid, _, target) in enumerate(changes):
        try:
            client.patch(uuid, [{'op': 'add', 'path': '/shard',
                                 'value': target}])
        except (ironic.NodeNotFound, ironic.Conflict) as e:
            # This node only: deleted since the listing, or still locked
            # after the retries. The others may be labelled.
            done.failed.append((uuid, target, str(e)))
        except ironic.IronicError as e:
            # Ironic or Keystone is not answering, or refuses this kind of
            # request (policy, API version): every next PATCH would fail
            # alike, after its retries.
            done.failed.append((uuid, target, str(e)))
            done.not_attempted = [(u, t) for u, _, t in changes[i + 1:]]
            break
        else:
            done.written.append((uuid, target))
    return done


def _some(nodes: list[str]) -> str:
    shown = ', '.join(nodes[:SHOWN])
    if len(nodes) > SHOWN:
        shown += ' ... and %d more' % (len(nodes) - SHOWN)
    return shown


def _outcome(p: Plan, done: Applied) -> tuple[dict[str, Any], list[str]]:
    """What ``apply`` wrote and did not, each list bounded to SHOWN."""
    data = {
        'written': len(done.written),
        'written_nodes': [u for u, _ in done.written[:SHOWN]],
        'not_written': len(done.failed),
        'not_written_nodes': [{'node': u, 'to': t, 'error': e}
                              for u, t, e in done.failed[:SHOWN]],
        'not_attempted': len(done.not_attempted),
        'not_attempted_nodes': [u for u, _ in done.not_attempted[:SHOWN]],
    }
    if done.complete:
        return data, []
    text = ['', 'FAILED: %d of %d label(s) written, %d not written, %d not '
            'attempted.' % (len(done.written), len(p.changes),
                            len(done.failed), len(done.not_attempted))]
    if done.written:
        text.append('Written (%d): %s' % (
            len(done.written), _some([u for u, _ in done.written])))
    text.append('Not written (%d; Ironic refused or did not answer):'
                % len(done.failed))
    text += ['  %s -> %s: %s' % f for f in done.failed[:SHOWN]]
    if len(done.failed) > SHOWN:
        text.append('  ... and %d more' % (len(done.failed) - SHOWN))
    if done.not_attempted:
        text.append('Not attempted (%d; the last error would repeat): %s'
                    % (len(done.not_attempted),
                       _some([u for u, _ in done.not_attempted])))
    text.append('The hand-overs above assume every label; only the '
                'written ones take effect. Run "shards apply" again with '
                'the same arguments to write the rest: it reads every node '
                'again and skips the ones already labelled.')
    return data, text


def _describe(fleet: fleet_mod.Fleet, p: Plan, done: Applied | None
              ) -> tuple[dict[str, Any], str]:
    applied = done is not None
    if done is None:
        verb = 'Would label'
    elif done.complete:
        verb = 'Labelled'
    else:
        verb = 'Labelled %d of' % len(done.written)
    unsharded = sum(1 for n in fleet.in_scope if n.shard is None)
    data: dict[str, Any] = {
        'count': p.count, 'relabel_all': p.relabel_all,
        'divide': fleet.partition.divide,
        'nodes_in_scope': len(fleet.in_scope),
        'unsharded_before': unsharded,
        'changes': [{'node': u, 'from': o, 'to': n}
                    for u, o, n in p.changes],
        'shards_after': p.after,
        'free_nodes_changing_hands': [
            {'node': u, 'from': a, 'to': b} for u, a, b in p.moves],
        'applied': done is not None and done.complete,
        'settings_differ': list(fleet.settings_differ),
        'settings_unread': fleet.settings_unread,
    }
    if p.moves_if_shards is not None:
        data['free_nodes_changing_hands_with_divide_shards'] = len(
            p.moves_if_shards)
    moved = collections.Counter((a, b) for _, a, b in p.moves)
    text = [
        'Scope: %s; %d nodes, %d without a shard; divide = %s' % (
            fleet.partition.scope.describe(), len(fleet.in_scope),
            unsharded, fleet.partition.divide),
        '%s %d node(s) among %d shard(s)%s.' % (
            verb, len(p.changes), p.count,
            ' (every node, --relabel-all)' if p.relabel_all
            else ' (nodes without a shard only)'),
    ]
    if p.changes:
        by_target = collections.Counter(n for _, _, n in p.changes)
        headers = ['SHARD', 'NODES AFTER', 'LABELLED NOW']
        names = sorted(set(p.after) | set(by_target))
        rows: list[list[Any]] = [[s, p.after.get(s, 0), by_target.get(s, 0)]
                                 for s in names]
        if done is not None and not done.complete:
            headers = ['SHARD', 'NODES AFTER', 'TO LABEL', 'WRITTEN']
            written = collections.Counter(t for _, t in done.written)
            rows = [r + [written.get(s, 0)]
                    for r, s in zip(rows, names, strict=True)]
        text += ['', output.table(headers, rows)]
    text.append('')
    if moved:
        text.append(output.table(
            ['FROM', 'TO', 'FREE NODES'],
            [[a or '-', b or '-', c] for (a, b), c in sorted(
                moved.items(), key=lambda i: (str(i[0][0]),
                                              str(i[0][1])))]))
    text.append('%d free node(s) change hands with divide = %s; nodes '
                'with an instance never do.'
                % (len(p.moves), fleet.partition.divide))
    if p.moves_if_shards is not None:
        text.append('With divide = shards on every host, %d free node(s) '
                    'would change hands against today\'s division.'
                    % len(p.moves_if_shards))
    if not applied and p.changes:
        text.append('Nothing written: run "shards apply" with the same '
                    'arguments to write these labels.')
    if done is not None:
        result, lines = _outcome(p, done)
        data.update(result)
        text += lines
    if fleet.settings_differ:
        text += ['', 'Warning: this plan is for this command\'s division, '
                 'not the running hosts\'; "shards apply" refuses it:']
        text += ['  %s' % d for d in fleet.settings_differ]
    return data, '\n'.join(text)


def run(conf: cfg.ConfigOpts, action: str, count: int, relabel_all: bool,
        out: TextIO, fmt: str) -> int:
    """``shards plan`` or ``shards apply``."""
    if count < 1:
        raise BadArgument('--count must be at least 1, got %d' % count)
    fleet = fleet_mod.gather(conf, shards=True)
    if action == 'apply' and fleet.settings_differ:
        # Labels written for another division than the hosts run: without
        # partition_key, every conductor group's nodes.
        raise BadArgument(
            'Refusing to write shard labels: this command\'s partition '
            'options differ from the running hosts\'. %s Nothing was '
            'written ("shards plan" shows the labels anyway).'
            % ' '.join(fleet.settings_differ))
    p = plan(fleet, count, relabel_all)
    done = write(ironic.Ironic(conf), p.changes) if action == 'apply' else None
    data, text = _describe(fleet, p, done)
    output.emit(out, fmt, data, text)
    return 0 if done is None or done.complete else 1


def section(fleet: fleet_mod.Fleet) -> tuple[dict[str, Any], str]:
    """``ring show``'s shards: what each member lists, with node counts."""
    # Ironic counts the nodes without a shard under the name 'None'; they
    # are shown apart (every host lists them).
    counts = {s: c for s, c in (fleet.shard_counts or {}).items()
              if s != ironic.UNSHARDED}
    assignment = fleet.shard_assignment()
    per_host: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for shard, host in assignment.items():
        if shard in counts:
            per_host[host][shard] = counts[shard]
    unsharded = sum(1 for n in fleet.in_scope if n.shard is None)
    rows = [[h, len(per_host[h]), sum(per_host[h].values()),
             ', '.join(sorted(per_host[h])) or '-']
            for h in sorted(fleet.members)]
    data = {'by_host': {h: dict(sorted(per_host[h].items()))
                        for h in sorted(fleet.members)},
            'unsharded_nodes_in_scope': unsharded,
            'shards': len(counts)}
    text = '\n'.join([
        'Shards (divide = shards): %d, listed as follows; the %d node(s) '
        'in scope without a shard are listed by every host and divided '
        'node by node.' % (len(counts), unsharded),
        output.table(['HOST', 'SHARDS', 'NODES', 'SHARD NAMES'], rows),
        '(Node counts are Ironic\'s, over every conductor group.)'
        if fleet.partition.scope.conductor_group is not None else '',
    ])
    return data, text


