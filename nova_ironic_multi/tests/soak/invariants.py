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
"""The invariants, as pure functions of one snapshot and the configuration.

Each check returns :class:`Problem` s. A problem with no grace is a
violation as soon as it is seen (a second compute node for a node, a
deleted one, a provider deleted and created again). The others may be
true for a while after a fault or a request (a node moves within a period,
a torn-down node is cleaned); :class:`Tracker` makes them violations only
when they last past their grace, counted from the moment the deployment
was quiet (no fault under way, membership unchanged) and they were seen.

What each host should manage comes from the product's own pure division
(:func:`nova_ironic_multi.division.divide`) applied to the facts read from
the databases: each running host with the partition it was given, its
live peers (enabled, not forced down, up by ``service_down_time``), its
instances and orphans. So the soak checks that the running services agree
with the rules at every quiet moment, not the ring's arithmetic (the unit
tier does that).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
import dataclasses

from nova_ironic_multi import division
from nova_ironic_multi import ownership
from nova_ironic_multi import partition
from nova_ironic_multi.tests.soak import observe

#: The deployment's resource-tracker period and service_down_time
#: (:mod:`nova_ironic_multi.tests.fixtures.deployment`).
PERIOD = 5.0
DOWN_TIME = 10.0
#: nova's reaper of deleted instances still deployed, on the computes.
REAP_INTERVAL = 20.0
#: What a loaded two-core machine adds to a bound (as the e2e tier).
SLACK = 15.0
#: A node's manager settles within one period once the deployment is quiet.
DIVISION_GRACE = PERIOD + SLACK
#: A torn-down node is available again, and an orphan reaped, within one
#: reaper period and a resource period of its host.
IRONIC_GRACE = REAP_INTERVAL + 2 * PERIOD + SLACK
#: Placement follows a boot, a delete or a move within two periods.
ALLOCATION_GRACE = 2 * PERIOD + SLACK
RING = 'compatible'
EXPONENT = 5
#: Ironic states a node without an instance passes through on its way back.
SETTLING = ('available', 'cleaning', 'clean wait', 'deleting')


@dataclasses.dataclass(frozen=True)
class HostConfig:
    """The ``[ironic_multi]`` options a compute runs with."""

    partition_key: str
    peer_list: tuple[str, ...]
    divide: str = 'nodes'

    def partition(self, host: str) -> partition.Partition:
        return partition.Partition(
            host=host.lower(),
            scope=partition.Scope(conductor_group=self.partition_key.lower()),
            peers=frozenset(p.lower() for p in self.peer_list),
            membership_driver='servicegroup', ring_algorithm=RING,
            partition_exponent=EXPONENT, divide=self.divide)

    def options(self) -> dict[str, str]:
        return {'partition_key': self.partition_key,
                'peer_list': ','.join(self.peer_list),
                'divide': self.divide}


@dataclasses.dataclass(frozen=True)
class Problem:
    invariant: str
    subject: str
    evidence: str
    #: Seconds it may last once the deployment is quiet; None: never.
    grace: float | None
    #: What was expected: a new expectation is a new problem.
    expected: str = ''

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.invariant, self.subject, self.expected)


# What each host should manage ------------------------------------------

def instances_by_host(snap: observe.Snapshot) -> dict[str, set[str]]:
    """Host -> its live instances and its orphans (lower-cased hosts).

    An orphan: an instance nova deleted that a node still carries; it
    stays with the host it was on, for that host's reaper.
    """
    out: dict[str, set[str]] = {}
    for inst in snap.instances.values():
        if not inst.deleted and inst.host:
            out.setdefault(inst.host.lower(), set()).add(inst.uuid)
    for node in snap.nodes.values():
        inst = snap.instances.get(node.instance_uuid or '')
        if inst is not None and inst.deleted and inst.host:
            out.setdefault(inst.host.lower(), set()).add(inst.uuid)
    return out


def live_hosts(snap: observe.Snapshot, down_time: float = DOWN_TIME
               ) -> set[str]:
    return {h.lower() for h, s in snap.services.items()
            if s.live(down_time)}


def shard_counts(nodes: Iterable[observe.Node]) -> dict[str, int]:
    """What ``GET /v1/shards`` says (nodes without one under 'None')."""
    counts: dict[str, int] = {}
    for node in nodes:
        name = node.shard if node.shard is not None else 'None'
        counts[name] = counts.get(name, 0) + 1
    return counts


def expected(snap: observe.Snapshot, configs: Mapping[str, HostConfig],
             running: Collection[str], down_time: float = DOWN_TIME
             ) -> dict[str, ownership.Division]:
    """Host -> the division it should make now, for each running host."""
    nodes = sorted(snap.nodes.values(), key=lambda n: n.uuid)
    live = live_hosts(snap, down_time)
    mine = instances_by_host(snap)
    counts = shard_counts(nodes)
    out = {}
    for host in sorted(running):
        conf = configs[host]
        part = conf.partition(host)
        assert part.peers is not None
        members = {p for p in part.peers if p in live}
        out[host] = division.divide(
            nodes, {host.lower(): mine.get(host.lower(), set())}, members,
            part, counts)[host.lower()]
    return out


def managers(divisions: Mapping[str, ownership.Division]
             ) -> dict[str, list[str]]:
    """Node -> the hosts whose division keeps it."""
    out: dict[str, list[str]] = {}
    for host, div in sorted(divisions.items()):
        for node in div.owned:
            out.setdefault(node, []).append(host)
    return out


def should_be_managed(snap: observe.Snapshot,
                      configs: Mapping[str, HostConfig],
                      running: Collection[str],
                      down_time: float = DOWN_TIME) -> set[str]:
    """Nodes some host must manage now.

    A node in the scope of a live running host, free or carrying an
    instance (or orphan) of a live running host whose scope holds it. A
    node of a host that is merely down waits for it (or its fence); a
    node whose instance nova never knew is left alone.
    """
    live = live_hosts(snap, down_time) & {h.lower() for h in running}
    scopes = {h.lower(): configs[h].partition(h).scope for h in running}
    by_instance = {i: h for h, insts in instances_by_host(snap).items()
                   for i in insts}
    out = set()
    for node in snap.nodes.values():
        in_scope = [h for h in live
                    if ownership.in_scope(node, scopes[h])]
        if not in_scope:
            continue
        if node.instance_uuid is None:
            out.add(node.uuid)
            continue
        host = by_instance.get(node.instance_uuid)
        if host in live and ownership.in_scope(node, scopes[host]):
            out.add(node.uuid)
    return out


# The checks --------------------------------------------------------------

def rows_and_providers(snap: observe.Snapshot,
                       known_providers: Mapping[str, int]
                       ) -> list[Problem]:
    """One compute node and one provider per node, never deleted.

    :param known_providers: node uuid -> the provider id first seen for it.
    """
    problems = []
    live: dict[str, list[observe.ComputeNodeRow]] = {}
    for row in snap.compute_nodes:
        if row.deleted:
            if row.hypervisor_hostname in snap.nodes:
                problems.append(Problem(
                    'compute node never deleted', row.hypervisor_hostname,
                    'compute_nodes row %d (host %s) is deleted while Ironic '
                    'still has the node' % (row.id, row.host), None,
                    str(row.id)))
            continue
        live.setdefault(row.hypervisor_hostname, []).append(row)
    for node, rows in live.items():
        if len(rows) > 1:
            problems.append(Problem(
                'one compute node per node', node,
                'live compute_nodes rows %s' % [
                    (r.id, r.host) for r in rows], None,
                ','.join(str(r.id) for r in rows)))
        for row in rows:
            if row.uuid != node:
                problems.append(Problem(
                    'one compute node per node', node,
                    'compute node uuid %s is not the node uuid' % row.uuid,
                    None, row.uuid))
    by_name: dict[str, list[observe.Provider]] = {}
    for rp in snap.providers:
        by_name.setdefault(rp.name, []).append(rp)
    for node in snap.nodes:
        found = by_name.get(node, [])
        if len(found) > 1:
            problems.append(Problem(
                'one provider per node', node, 'providers %s' % [
                    (p.id, p.uuid) for p in found], None,
                ','.join(str(p.id) for p in found)))
        known = known_providers.get(node)
        if known is not None and [p.id for p in found] != [known]:
            problems.append(Problem(
                'provider never deleted', node,
                'provider id %d was seen for the node; now %s' % (
                    known, [(p.id, p.uuid) for p in found] or 'none'),
                None, str(known)))
    return problems


def division_problems(snap: observe.Snapshot,
                      divisions: Mapping[str, ownership.Division],
                      must: Collection[str]) -> list[Problem]:
    """Exactly one manager per node that needs one, as the cell records.

    The division itself (two hosts keeping one node, a node nobody
    keeps) and nova's compute node rows (the host that reported the node
    last) against it.
    """
    problems = []
    owners = managers(divisions)
    rows = {r.hypervisor_hostname: r for r in snap.compute_nodes
            if not r.deleted}
    for node in sorted(set(owners) | set(must)):
        hosts = owners.get(node, [])
        if len(hosts) > 1:
            problems.append(Problem(
                'managed by one host', node,
                'the partitions in force give it to %s' % hosts,
                DIVISION_GRACE, ','.join(hosts)))
        elif not hosts:
            problems.append(Problem(
                'managed by one host', node,
                'in scope, yet no running host should manage it (%s)' % (
                    snap.nodes[node]), DIVISION_GRACE, '-'))
            continue
        row = rows.get(node)
        if row is None:
            problems.append(Problem(
                'compute node of the manager', node,
                'no live compute_nodes row; %s should report it' % hosts[0],
                DIVISION_GRACE, hosts[0]))
        elif row.host.lower() != hosts[0]:
            problems.append(Problem(
                'compute node of the manager', node,
                'compute_nodes row %d says host %s; %s should manage it'
                % (row.id, row.host, hosts[0]), DIVISION_GRACE, hosts[0]))
    return problems


def ironic_problems(snap: observe.Snapshot) -> list[Problem]:
    """Deployed only for live instances; free nodes available again."""
    problems = []
    for node in snap.nodes.values():
        if node.maintenance:
            problems.append(Problem(
                'node available again', node.uuid, 'in maintenance: %s'
                % node.last_error, IRONIC_GRACE, 'maintenance'))
        if node.instance_uuid is None:
            if node.provision_state not in SETTLING:
                problems.append(Problem(
                    'node available again', node.uuid,
                    'no instance, provision state %r (%s)' % (
                        node.provision_state, node.last_error),
                    IRONIC_GRACE, node.provision_state))
            continue
        inst = snap.instances.get(node.instance_uuid)
        if inst is None or inst.deleted:
            problems.append(Problem(
                'deployed only for live instances', node.uuid,
                'carries instance %s, which nova %s (provision state %s)'
                % (node.instance_uuid,
                   'deleted' if inst is not None else 'does not know',
                   node.provision_state), IRONIC_GRACE,
                node.instance_uuid))
    for inst in snap.instances.values():
        if (inst.deleted or inst.node is None or inst.task_state or
                inst.vm_state not in ('active', 'stopped')):
            continue
        node = snap.nodes.get(inst.node)
        if node is None or node.instance_uuid != inst.uuid:
            problems.append(Problem(
                'servers deployed', inst.uuid,
                'server %s is %s on node %s, which carries %s' % (
                    inst.uuid, inst.vm_state, inst.node,
                    node.instance_uuid if node else 'nothing (no node)'),
                DIVISION_GRACE, inst.node))
    return problems


#: vm_states of a server without a node whose allocation is its own.
UNCLAIMED_STATES = frozenset({'building', 'error'})


def allocation_problems(snap: observe.Snapshot) -> list[Problem]:
    """Each node's allocations are the servers on it, no more, no less.

    nova records a server's node only when a compute claims it. Until then
    the scheduler's allocation is the only record of where a build goes: a
    build cast to a compute that is dead (killed, fenced) waits in its
    queue with it. A build that failed before any claim keeps it too, until
    the server is deleted (nova's start puts those in ERROR). Such a
    server's allocation is its own wherever it is; one that never ends is a
    stuck request, which that invariant checks.
    """
    want: dict[str, set[str]] = {}
    unclaimed: set[str] = set()
    for inst in snap.instances.values():
        if inst.deleted:
            continue
        if inst.node:
            want.setdefault(inst.node, set()).add(inst.uuid)
        elif inst.vm_state in UNCLAIMED_STATES:
            unclaimed.add(inst.uuid)
    by_uuid = {p.uuid: p for p in snap.providers}
    problems = []
    for node in sorted(set(want) | set(snap.allocations)):
        have = snap.allocations.get(node, set()) - unclaimed
        servers = want.get(node, set())
        if have != servers:
            problems.append(Problem(
                'allocations are the servers', node,
                'placement has consumers %s on provider %s; the servers on '
                'the node are %s' % (sorted(have), node if node in by_uuid
                                     else '(no provider)', sorted(servers)),
                ALLOCATION_GRACE,
                '%s/%s' % (','.join(sorted(have)), ','.join(sorted(servers)))
            ))
    return problems


class Tracker:
    """Turns problems that last into violations, each once."""

    def __init__(self) -> None:
        self.first_seen: dict[tuple[str, str, str], float] = {}
        self.reported: set[tuple[str, str, str]] = set()

    def update(self, problems: Iterable[Problem], now: float,
               quiet_since: float | None) -> list[Problem]:
        """The problems that became violations now.

        :param quiet_since: when the deployment became quiet; None while a
            fault is under way (only the problems without grace count).
        """
        out = []
        seen = set()
        for p in problems:
            seen.add(p.key)
            first = self.first_seen.setdefault(p.key, now)
            if p.key in self.reported:
                continue
            if p.grace is None:
                due = True
            elif quiet_since is None:
                due = False
            else:
                due = now - max(first, quiet_since) > p.grace
            if due:
                self.reported.add(p.key)
                out.append(p)
        for key in set(self.first_seen) - seen:
            del self.first_seen[key]
        return out

    def pending(self) -> set[tuple[str, str, str]]:
        """Problems seen now, violations or not."""
        return set(self.first_seen)
