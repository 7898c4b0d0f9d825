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

What each host manages is what it did, never what the product's rules
would say: each compute's resource tracker logs one line per node it
reports each period (nova's own ``Final resource view: name=NODE``), so
the checker knows which hosts reported each node lately
(:class:`observe.LogFollower`). From the facts alone (conductor groups,
live services, the instances' hosts) it requires of each node: at most one
host reports it; one that must be managed (in a live running host's
scope, free or carrying an instance of a live host) is reported by a live
host, by its instance's host if it has one, and only by hosts whose scope
holds it; nova's compute node row names that host. Which of the peers
gets a free node (the ring's arithmetic) is the unit tier's to check.

Beyond the division: the instances of a fenced or drained host are on a
live host within a takeover's bound, no server keeps a task state past the
longest action's bound (a claim past the time its host gives claims
back), and a node without an instance is ``available`` again within a
tear-down's bound (cleaning included).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
import dataclasses

from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi.hosts import takeover
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
#: A node a host reported within this is one it reports now (a live host
#: logs a period at least this often, or "periods go on" fails).
REPORT_WINDOW = 3 * PERIOD
#: A fenced or drained host's instances are on a live host within this:
#: the takeover's period, once the fence is seen.
TAKEOVER_GRACE = DOWN_TIME + 2 * PERIOD + SLACK
#: No server keeps a task state longer than the longest action's bound
#: (a batch of boots, :data:`workload.BOUNDS`)...
TASK_GRACE = 360.0
#: ...nor a takeover's claim past the time its host gives claims back
#: (:func:`nova_ironic_multi.hosts.takeover.release_claims`).
CLAIM_GRACE = (takeover.CLAIM_BOUND + takeover.RELEASE_EVERY * PERIOD +
               SLACK)
RING = 'compatible'
EXPONENT = 5
#: The one Ironic state a node without an instance may stay in.
AVAILABLE = 'available'


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
    #: The service at fault when the subject never reached a compute (so
    #: the driver cannot have seen it): such a problem is reported apart
    #: from the driver's violations, with its evidence.
    outside: str = ''

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
    inst: observe.Instance | None
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


def reporting_problems(snap: observe.Snapshot,
                       configs: Mapping[str, HostConfig],
                       running: Collection[str],
                       reported: Mapping[str, Collection[str]],
                       must: Collection[str],
                       down_time: float = DOWN_TIME) -> list[Problem]:
    """Each node reported by the one host that must, as nova records.

    :param reported: running host -> the nodes its resource tracker
        reported within :data:`REPORT_WINDOW` (its own log).
    :param must: :func:`should_be_managed`.
    """
    problems = []
    live = live_hosts(snap, down_time)
    scopes = {h: configs[h].partition(h).scope for h in running}
    by_node: dict[str, list[str]] = {}
    for host in sorted(running):
        for node in reported.get(host, ()):
            by_node.setdefault(node, []).append(host)
    rows = {r.hypervisor_hostname: r for r in snap.compute_nodes
            if not r.deleted}
    for node in sorted(set(by_node) | set(must)):
        hosts = by_node.get(node, [])
        info = snap.nodes.get(node)
        if len(hosts) > 1:
            problems.append(Problem(
                'reported by one host', node,
                "nova's resource trackers on %s all reported it in the "
                'last %.0fs' % (', '.join(hosts), REPORT_WINDOW),
                DIVISION_GRACE, ','.join(hosts)))
        for host in hosts:
            if info is not None and not ownership.in_scope(info,
                                                           scopes[host]):
                problems.append(Problem(
                    'reported within scope', node,
                    '%s reported it; its conductor group %r is not %s\'s'
                    % (host, info.conductor_group, host), DIVISION_GRACE,
                    host))
        if node not in must:
            continue
        owner = None
        if info is not None and info.instance_uuid:
            inst = snap.instances.get(info.instance_uuid)
            owner = inst.host.lower() if inst and inst.host else None
        up = [h for h in hosts if h.lower() in live]
        if owner is not None and owner in live and [
                h.lower() for h in hosts] != [owner]:
            problems.append(Problem(
                "reported by its instance's host", node,
                'it carries instance %s of %s; reported by %s' % (
                    info.instance_uuid if info else '?', owner,
                    ', '.join(hosts) or 'no host'), DIVISION_GRACE,
                owner))
        elif not up:
            problems.append(Problem(
                'reported by a live host', node,
                'in scope, yet no live host reported it in the last %.0fs '
                '(%s)' % (REPORT_WINDOW, info), DIVISION_GRACE, '-'))
            continue
        if len(up) != 1:
            continue
        row = rows.get(node)
        if row is None:
            problems.append(Problem(
                'compute node of the reporting host', node,
                'no live compute_nodes row; %s reports it' % up[0],
                DIVISION_GRACE, up[0]))
        elif row.host.lower() != up[0].lower():
            problems.append(Problem(
                'compute node of the reporting host', node,
                'compute_nodes row %d says host %s; %s reports it'
                % (row.id, row.host, up[0]), DIVISION_GRACE, up[0]))
    return problems


def stranded_problems(snap: observe.Snapshot,
                      configs: Mapping[str, HostConfig],
                      running: Collection[str],
                      down_time: float = DOWN_TIME) -> list[Problem]:
    """The instances of a fenced or drained host are a live host's.

    Fenced: its service forced down. Drained: disabled and not running.
    Only an instance whose node is in a live running host's scope: nobody
    else could take it.
    """
    live = live_hosts(snap, down_time) & {h.lower() for h in running}
    scopes = {h.lower(): configs[h].partition(h).scope for h in running}
    gone = {h.lower() for h, s in snap.services.items()
            if s.forced_down or (s.disabled and h not in running)}
    problems = []
    for inst in snap.instances.values():
        if inst.deleted or not inst.host or inst.host.lower() not in gone:
            continue
        node = snap.nodes.get(inst.node or '')
        if node is None or not any(ownership.in_scope(node, scopes[h])
                                   for h in live):
            continue
        svc = snap.services.get(inst.host)
        problems.append(Problem(
            'instances on a live host', inst.uuid,
            'still on %s (%s), node %s, %s/%s' % (
                inst.host, 'forced down' if svc and svc.forced_down
                else 'disabled and stopped', inst.node, inst.vm_state,
                inst.task_state), TAKEOVER_GRACE, inst.host.lower()))
    return problems


def task_state_problems(snap: observe.Snapshot) -> list[Problem]:
    """No server keeps a task state (a claim above all) past its bound."""
    problems = []
    for inst in snap.instances.values():
        if inst.deleted or not inst.task_state:
            continue
        claim = takeover.parse_claim(inst.task_state) is not None
        problems.append(Problem(
            'task states end', inst.uuid,
            'task state %s on %s (%s)' % (inst.task_state, inst.host,
                                          inst.vm_state),
            CLAIM_GRACE if claim else TASK_GRACE, inst.task_state))
    return problems


def ironic_problems(snap: observe.Snapshot) -> list[Problem]:
    """Deployed only for live instances; free nodes available again."""
    problems = []
    node: observe.Node | None
    for node in snap.nodes.values():
        if node.maintenance:
            problems.append(Problem(
                'node available again', node.uuid, 'in maintenance: %s'
                % node.last_error, IRONIC_GRACE, 'maintenance'))
        if node.instance_uuid is None:
            if node.provision_state != AVAILABLE:
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

    Found by the soak: when a rebuild fails on its compute (Ironic's
    conductor down), nova's ``rebuild_instance`` removes the server's
    allocation from its own node
    (``delete_allocation_for_evacuated_instance`` with the rebuild's
    ``scheduled_node``) and nothing puts it back; the server stays in ERROR
    on the node. A server with a failed rebuild may lack its allocation on
    its node; one anywhere else is still a leak.
    """
    want: dict[str, set[str]] = {}
    unclaimed: set[str] = set(snap.uncelled)
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
        servers = {s for s in want.get(node, set())
                   if s in have or s not in snap.failed_rebuilds}
        if have != servers:
            problems.append(Problem(
                'allocations are the servers', node,
                'placement has consumers %s on provider %s; the servers on '
                'the node are %s' % (sorted(have), node if node in by_uuid
                                     else '(no provider)', sorted(servers)),
                ALLOCATION_GRACE,
                '%s/%s' % (','.join(sorted(have)), ','.join(sorted(servers)))
            ))
    for node in sorted(snap.allocations):
        for server in sorted(snap.allocations[node] & snap.uncelled):
            problems.append(Problem(
                'nova-conductor creates each scheduled build in its cell',
                server, 'placement has its allocation on provider %s, and '
                'nova has only its build request: no cell has the instance, '
                'so no compute was asked to build it' % node,
                ALLOCATION_GRACE, node, outside='nova-conductor'))
    return problems


#: A problem not seen for this long is gone; one back sooner goes on
#: counting from when it was first seen (one sample that misses a flapping
#: problem does not start its clock again).
ABSENT = 3 * PERIOD


class Tracker:
    """Turns problems that last into violations, each once."""

    def __init__(self) -> None:
        self.first_seen: dict[tuple[str, str, str], float] = {}
        self.last_seen: dict[tuple[str, str, str], float] = {}
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
            self.last_seen[p.key] = now
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
            if now - self.last_seen[key] > ABSENT:
                del self.first_seen[key]
                del self.last_seen[key]
        return out

    def pending(self) -> set[tuple[str, str, str]]:
        """Problems seen lately, violations or not."""
        return set(self.first_seen)
