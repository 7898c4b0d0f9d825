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
"""The soak's pure parts: its schedule, its invariants, its table."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import tempfile
import time
import unittest
from unittest import mock

from nova_ironic_multi import rings
from nova_ironic_multi.tests.soak import __main__ as soak_main
from nova_ironic_multi.tests.soak import checker as checker_mod
from nova_ironic_multi.tests.soak import invariants as inv
from nova_ironic_multi.tests.soak import observe
from nova_ironic_multi.tests.soak import report
from nova_ironic_multi.tests.soak import schedule
from nova_ironic_multi.tests.soak import workload

G1 = ['11111111-0000-0000-0000-%012d' % i for i in range(6)]
CONFIGS = {'host1': inv.HostConfig('g1', ('host1', 'host2')),
           'host2': inv.HostConfig('g1', ('host1', 'host2'))}


def node(uuid: str, instance: str | None = None, state: str = 'available',
         group: str = 'g1', shard: str | None = None) -> observe.Node:
    return observe.Node(uuid, instance, group, shard,
                        state if instance is None or state != 'available'
                        else 'active', False)


def service(host: str, age: float = 1.0, **flags: bool) -> observe.Service:
    return observe.Service(host, flags.get('disabled', False),
                           flags.get('forced_down', False), age)


def snapshot(nodes: list[observe.Node],
             instances: list[observe.Instance] = (),  # type: ignore
             services: list[observe.Service] | None = None,
             rows: dict[str, str] | None = None) -> observe.Snapshot:
    services = services or [service('host1'), service('host2')]
    rows = rows or {}
    return observe.Snapshot(
        0.0, {n.uuid: n for n in nodes}, {i.uuid: i for i in instances},
        {s.host: s for s in services},
        [observe.ComputeNodeRow(i, n, h, n, False)
         for i, (n, h) in enumerate(sorted(rows.items()))],
        [observe.Provider(i, n.uuid, n.uuid, 1)
         for i, n in enumerate(nodes)], {}, {'g1'})


def ring_owner(members: list[str], uuid: str) -> str:
    return rings.load('compatible', members, 5).assign(G1)[uuid]


class ScheduleTest(unittest.TestCase):
    def test_same_seed_same_schedule(self) -> None:
        for name, profile in schedule.PROFILES.items():
            a = schedule.plan(42, profile, 3600)
            self.assertEqual(a, schedule.plan(42, profile, 3600), name)
            self.assertNotEqual(a, schedule.plan(43, profile, 3600), name)

    def test_each_round_has_every_kind_once(self) -> None:
        steps = schedule.steps(5, schedule.PROFILES['long'])
        n = len(schedule.KINDS)
        for _ in range(3):
            kinds = [next(steps).kind for _ in range(n)]
            self.assertEqual(sorted(kinds), sorted(schedule.KINDS))

    def test_steps_stay_within_their_profile(self) -> None:
        for seed in range(20):
            for profile in schedule.PROFILES.values():
                for step in schedule.plan(seed, profile, 3600):
                    self.assertGreaterEqual(step.gap, profile.gap[0])
                    self.assertLessEqual(step.gap, profile.gap[1])
                    if step.kind == 'fence':
                        self.assertIn(step.target, schedule.FENCEABLE)
                        self.assertGreaterEqual(step.hold, 12)
                    if step.kind in ('kill-compute', 'sigterm-compute'):
                        self.assertIn(step.target, schedule.COMPUTES)
                    if step.kind == 'sighup-invalid':
                        option, value = step.detail.split(' = ')
                        self.assertIn((option, value), schedule.INVALID)

    def test_plan_fits_the_time(self) -> None:
        profile = schedule.PROFILES['short']
        plan = schedule.plan(1, profile, 120)
        self.assertLessEqual(sum(s.gap + s.hold for s in plan[:-1]), 120)
        self.assertIn('#1 after', plan[0].describe())


class ReportingTest(unittest.TestCase):
    """What the hosts reported (nova's resource tracker), held against the
    facts: each check fails on the defect it is there to see.
    """

    RUNNING = {'host1', 'host2'}

    def problems(self, snap: observe.Snapshot,
                 reported: dict[str, set[str]],
                 configs: dict[str, inv.HostConfig] = CONFIGS,
                 running: set[str] | None = None) -> set[tuple[str, str]]:
        running = self.RUNNING if running is None else running
        must = inv.should_be_managed(snap, configs, running)
        return {(p.invariant, p.subject) for p in inv.reporting_problems(
            snap, configs, running, reported, must)}

    def test_each_node_reported_once_by_a_live_host_is_fine(self) -> None:
        rows = {u: ring_owner(['host1', 'host2'], u) for u in G1}
        snap = snapshot([node(u) for u in G1], rows=rows)
        reported = {h: {u for u, o in rows.items() if o == h}
                    for h in self.RUNNING}
        self.assertEqual(set(), self.problems(snap, reported))

    def test_two_hosts_reporting_one_node(self) -> None:
        # The double manager the old checker could not see while counts
        # matched: both report G1[0].
        rows = {u: 'host1' for u in G1}
        snap = snapshot([node(u) for u in G1], rows=rows)
        reported = {'host1': set(G1), 'host2': {G1[0]}}
        self.assertEqual({('reported by one host', G1[0])},
                         self.problems(snap, reported))

    def test_a_node_nobody_reports(self) -> None:
        rows = {u: 'host1' for u in G1}
        snap = snapshot([node(u) for u in G1], rows=rows)
        self.assertEqual({('reported by a live host', G1[5])},
                         self.problems(snap, {'host1': set(G1[:5]),
                                              'host2': set()}))
        # Reported only by a host that is down: nobody live does.
        down = snapshot([node(u) for u in G1], rows=rows,
                        services=[service('host1'),
                                  service('host2', age=60)])
        self.assertEqual({('reported by a live host', G1[5])},
                         self.problems(down, {'host1': set(G1[:5]),
                                              'host2': {G1[5]}}))

    def test_a_node_with_an_instance_is_its_hosts(self) -> None:
        rows = {u: 'host1' for u in G1}
        snap = snapshot([node(u, 'i' if u == G1[0] else None) for u in G1],
                        [observe.Instance('i', 'host2', G1[0], 'active',
                                          None, False)], rows=rows)
        self.assertEqual({("reported by its instance's host", G1[0])},
                         self.problems(snap, {'host1': set(G1),
                                              'host2': set()}))
        rows[G1[0]] = 'host2'
        snap = snapshot([node(u, 'i' if u == G1[0] else None) for u in G1],
                        [observe.Instance('i', 'host2', G1[0], 'active',
                                          None, False)], rows=rows)
        self.assertEqual(set(), self.problems(
            snap, {'host1': set(G1[1:]), 'host2': {G1[0]}}))

    def test_a_node_out_of_the_reporters_scope(self) -> None:
        g2 = '22222222-0000-0000-0000-000000000000'
        rows = {u: 'host1' for u in G1}
        rows[g2] = 'host1'
        snap = snapshot([node(u) for u in G1] + [node(g2, group='g2')],
                        rows=rows)
        self.assertEqual({('reported within scope', g2)}, self.problems(
            snap, {'host1': set(G1) | {g2}, 'host2': set()}))

    def test_the_row_names_the_reporting_host(self) -> None:
        rows = {u: 'host1' for u in G1}
        rows[G1[0]] = 'host2'
        snap = snapshot([node(u) for u in G1], rows=rows)
        self.assertEqual({('compute node of the reporting host', G1[0])},
                         self.problems(snap, {'host1': set(G1),
                                              'host2': set()}))


class SettlingTest(unittest.TestCase):
    """The states that must end, each within its bound."""

    def test_a_fenced_or_drained_hosts_instances_must_move(self) -> None:
        # The stranded instance of two drains at once, or of a takeover
        # that never happens: on a host that is forced down, or disabled
        # and stopped, with a live host whose scope holds the node.
        for gone in (service('host2', forced_down=True),
                     service('host2', disabled=True)):
            snap = snapshot([node(G1[0], 'i')],
                            [observe.Instance('i', 'host2', G1[0], 'active',
                                              None, False)],
                            services=[service('host1'), gone])
            problems = inv.stranded_problems(snap, CONFIGS, {'host1'})
            self.assertEqual([('instances on a live host', 'i')],
                             [(p.invariant, p.subject) for p in problems])
            self.assertEqual(inv.TAKEOVER_GRACE, problems[0].grace)
        # Merely down (not fenced): it waits for its host. Disabled but
        # running: it manages its instances.
        for host2, running in ((service('host2', age=60), {'host1'}),
                               (service('host2', disabled=True),
                                {'host1', 'host2'})):
            snap = snapshot([node(G1[0], 'i')],
                            [observe.Instance('i', 'host2', G1[0], 'active',
                                              None, False)],
                            services=[service('host1'), host2])
            self.assertEqual([], inv.stranded_problems(snap, CONFIGS,
                                                       running))
        # Nobody live could take it (another conductor group).
        snap = snapshot([node(G1[0], 'i', group='g2')],
                        [observe.Instance('i', 'host2', G1[0], 'active',
                                          None, False)],
                        services=[service('host1'),
                                  service('host2', forced_down=True)])
        self.assertEqual([], inv.stranded_problems(snap, CONFIGS,
                                                   {'host1'}))

    def test_no_task_state_outlives_its_bound(self) -> None:
        # The claim a cut-off move left (nova's API answered 409 to every
        # action but delete) and any other leftover task state.
        snap = snapshot(
            [node(G1[0], 'a'), node(G1[1], 'b'), node(G1[2], 'c')],
            [observe.Instance('a', 'host1', G1[0], 'active',
                              'nim-takeover:host2|', False),
             observe.Instance('b', 'host1', G1[1], 'active', 'rebooting',
                              False),
             observe.Instance('c', 'host1', G1[2], 'active', None, False)])
        got = {p.subject: p.grace for p in inv.task_state_problems(snap)}
        self.assertEqual({'a': inv.CLAIM_GRACE, 'b': inv.TASK_GRACE}, got)

    def test_a_tear_down_stuck_in_cleaning_fails(self) -> None:
        snap = snapshot([node(G1[0], state='clean wait'),
                         node(G1[1], state='cleaning'),
                         node(G1[2], state='available')])
        self.assertEqual(
            {(G1[0], inv.IRONIC_GRACE), (G1[1], inv.IRONIC_GRACE)},
            {(p.subject, p.grace) for p in inv.ironic_problems(snap)})


class ChecksTest(unittest.TestCase):
    def test_rows_and_providers_never_doubled_nor_deleted(self) -> None:
        snap = snapshot([node(u) for u in G1[:2]])
        snap.compute_nodes.extend([
            observe.ComputeNodeRow(10, G1[0], 'host1', G1[0], False),
            observe.ComputeNodeRow(11, G1[0], 'host2', G1[0], False),
            observe.ComputeNodeRow(12, G1[1], 'host2', G1[1], True)])
        problems = inv.rows_and_providers(snap, {G1[0]: 0, G1[1]: 99})
        kinds = sorted((p.invariant, p.subject) for p in problems)
        self.assertEqual(kinds, [
            ('compute node never deleted', G1[1]),
            ('one compute node per node', G1[0]),
            ('provider never deleted', G1[1])])
        self.assertTrue(all(p.grace is None for p in problems))

    def test_nodes_deployed_only_for_live_instances(self) -> None:
        snap = snapshot(
            [node(G1[0], 'gone'), node(G1[1], 'unknown'),
             node(G1[2], state='deploy failed'), node(G1[3], 'live'),
             node(G1[4])],
            [observe.Instance('gone', 'host1', G1[0], 'deleted', None, True),
             observe.Instance('live', 'host1', G1[3], 'active', None, False),
             observe.Instance('lost', 'host1', G1[4], 'active', None,
                              False)])
        problems = {(p.invariant, p.subject)
                    for p in inv.ironic_problems(snap)}
        self.assertEqual(problems, {
            ('deployed only for live instances', G1[0]),
            ('deployed only for live instances', G1[1]),
            ('node available again', G1[2]),
            ('servers deployed', 'lost')})

    def test_allocations_are_the_servers_on_each_node(self) -> None:
        snap = snapshot(
            [node(G1[0], 'a'), node(G1[1], 'b')],
            [observe.Instance('a', 'host1', G1[0], 'active', None, False),
             observe.Instance('b', 'host1', G1[1], 'active', None, False)])
        snap.allocations.update({G1[0]: {'a'}, G1[1]: {'a'}})
        problems = inv.allocation_problems(snap)
        self.assertEqual([p.subject for p in problems], [G1[1]])

    def test_a_failed_rebuild_may_lose_its_allocation_on_its_node(
            self) -> None:
        # Found by the soak: nova's rebuild_instance removes the server's
        # allocation from its own node when the rebuild fails on the
        # compute. Another ERROR server with none is still a problem, and
        # so is the failed rebuild's allocation on another node.
        snap = dataclasses.replace(snapshot(
            [node(G1[0], 'rebuilt'), node(G1[1], 'erred'),
             node(G1[2], 'moved'), node(G1[3])],
            [observe.Instance('rebuilt', 'host1', G1[0], 'error', None,
                              False),
             observe.Instance('erred', 'host1', G1[1], 'error', None, False),
             observe.Instance('moved', 'host1', G1[2], 'error', None,
                              False)]),
            failed_rebuilds=frozenset({'rebuilt', 'moved'}))
        snap.allocations.update({G1[2]: {'moved'}, G1[3]: {'moved'}})
        problems = inv.allocation_problems(snap)
        self.assertEqual([p.subject for p in problems], [G1[1], G1[3]])

    def test_a_build_no_compute_claimed_yet_owns_its_allocation(
            self) -> None:
        # Found by the soak: a boot scheduled to a compute that was then
        # killed and fenced waits in that compute's queue with the
        # scheduler's allocation on the node, and nova records the node
        # only when a compute claims it. Neither is a leak; a build that
        # stays so is a stuck request, checked as such.
        snap = snapshot(
            [node(G1[0]), node(G1[1]), node(G1[2]), node(G1[3])],
            [observe.Instance('queued', None, None, 'building', 'scheduling',
                              False),
             observe.Instance('failed', None, None, 'error', None, False),
             observe.Instance('gone', None, None, 'building', None, True),
             observe.Instance('stopped', None, None, 'stopped', None,
                              False)])
        snap.allocations.update({G1[0]: {'queued'}, G1[1]: {'failed'},
                                 G1[2]: {'gone'}, G1[3]: {'stopped'}})
        problems = inv.allocation_problems(snap)
        # A deleted one's, or a server that is neither building nor
        # failed, are still leaks.
        self.assertEqual([p.subject for p in problems], [G1[2], G1[3]])

    def test_a_build_no_cell_has_is_novas_not_the_drivers(self) -> None:
        # Found by the soak (seed 3 on 011400d): nova-conductor failed on a
        # database outage after the scheduler's allocation and before it
        # created the instance in the cell; the server stayed a build
        # request with an allocation for good. It is reported, apart from
        # the driver's violations; an allocation of a server a cell has is
        # still the driver's.
        snap = dataclasses.replace(snapshot(
            [node(G1[0]), node(G1[1])],
            [observe.Instance('celled', None, None, 'stopped', None,
                              False)]),
            uncelled=frozenset({'lost'}))
        snap.allocations.update({G1[0]: {'lost'}, G1[1]: {'celled'}})
        problems = inv.allocation_problems(snap)
        self.assertEqual(
            [(p.subject, p.outside) for p in problems],
            [(G1[1], ''), ('lost', 'nova-conductor')])

    def test_a_request_stuck_before_any_cell_is_novas(self) -> None:
        def server(uuid: str, cell: str) -> workload.Server:
            return workload.Server(uuid, cell, None, None, None, None, False)
        self.assertEqual(workload.outside([server('a', 'build')]),
                         'nova-conductor')
        # One of the request's servers in a cell, one unknown, or none:
        # the driver's.
        self.assertEqual(workload.outside(
            [server('a', 'build'), server('b', 'cell1')]), '')
        self.assertEqual(workload.outside([server('a', 'build'), None]), '')
        self.assertEqual(workload.outside([]), '')


class TrackerTest(unittest.TestCase):
    def problem(self, grace: float | None, expected: str = '') -> inv.Problem:
        return inv.Problem('x', 'n', 'evidence', grace, expected)

    def test_grace_counts_from_quiet_and_from_first_sight(self) -> None:
        t = inv.Tracker()
        p = self.problem(10)
        self.assertEqual(t.update([p], 0, None), [])    # a fault: no clock
        self.assertEqual(t.update([p], 20, 15), [])     # quiet since 15
        self.assertEqual(t.update([p], 26, 15), [p])
        self.assertEqual(t.update([p], 40, 15), [])     # once only

    def test_a_problem_that_goes_away_starts_again(self) -> None:
        t = inv.Tracker()
        p = self.problem(10)
        t.update([p], 0, 0)
        t.update([], 8, 0)
        gone = 8 + inv.ABSENT + 1
        t.update([], gone, 0)
        self.assertEqual(t.update([p], gone + 1, 0), [])
        self.assertEqual(t.update([p], gone + 12, 0), [p])

    def test_a_new_expectation_is_a_new_problem(self) -> None:
        t = inv.Tracker()
        t.update([self.problem(10, 'a')], 0, 0)
        self.assertEqual(t.update([self.problem(10, 'b')], 11, 0), [])

    def test_one_sample_that_misses_a_problem_keeps_its_clock(
            self) -> None:
        # A flapping problem (seen, missed once, seen again) is one
        # problem: its grace runs from when it was first seen.
        t = inv.Tracker()
        p = self.problem(10)
        t.update([p], 0, 0)
        t.update([], 2, 0)
        t.update([p], 4, 0)
        t.update([], 6, 0)
        self.assertEqual(t.update([p], 11, 0), [p])

    def test_no_grace_is_a_violation_at_once_even_during_a_fault(
            self) -> None:
        t = inv.Tracker()
        p = self.problem(None)
        self.assertEqual(t.update([p], 0, None), [p])
        self.assertEqual(t.update([p], 1, None), [])


class LogFollowerTest(unittest.TestCase):
    LINE = ("2026-11-01 14:10:53.123 77 DEBUG "
            "nova_ironic_multi.period.inventory "
            "[-] Managing %d Ironic nodes (%d with this host's instances) of "
            "9 listed: 4 free in scope, 0 with other hosts' instances, 0 "
            "out of scope; peers host1,host2, ring compatible/2^5; listing "
            "took 0.01s, division 0.001s")

    def test_reads_each_period_and_masks_errors(self) -> None:
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        with os.fdopen(fd, 'w') as f:
            f.write(self.LINE % (3, 1) + '\n')
        follower = observe.LogFollower(path)
        follower.poll()
        assert follower.last is not None
        self.assertEqual((follower.last.owned, follower.last.mine), (3, 1))
        self.assertEqual(follower.last.peers, 'host1,host2')
        with open(path, 'a') as f:
            f.write(self.LINE % (5, 2) + '\n')
            for uuid in ('a' * 8, 'b' * 8):
                f.write('2026-11-01 14:10:54.000 77 ERROR nova.compute x '
                        '[req-1] Node %s-1111-2222-3333-444444444444 '
                        'failed\n' % uuid)
                f.write('2026-11-01 14:10:54.000 77 ERROR nova.compute x '
                        '[req-1] Traceback (most recent call last):\n')
                f.write('2026-11-01 14:10:55.000 77 INFO nova.compute x\n')
            f.write(self.LINE % (6, 2))     # not a whole line yet
        follower.poll()
        self.assertEqual((follower.last.owned, follower.last.mine), (5, 2))
        self.assertEqual(follower.errors, {'x [#] Node # failed': 2})

    #: nova's resource tracker's report of a node, at a second of a minute.
    RT_LINE = ('2026-11-01 14:10:%02d.500 77 DEBUG '
               'nova.compute.resource_tracker [None req-1 - - - - - -] '
               'Final resource view: name=%s phys_ram=1024MB used_ram=0MB '
               'phys_disk=10GB used_disk=0GB total_vcpus=1 used_vcpus=0 '
               'pci_stats=[] stats={} {{(pid=77) _report_final_resource_'
               'view x.py:1}}\n')

    def test_reads_what_novas_resource_tracker_reported(self) -> None:
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        line = self.RT_LINE
        with os.fdopen(fd, 'w') as f:
            f.write(line % (50, G1[0]) + line % (53, G1[1]))
        follower = observe.LogFollower(path)
        follower.poll()
        at = observe.log_time(line % (53, G1[1]))
        assert at is not None
        self.assertEqual({G1[0], G1[1]}, follower.reported(at, 5))
        self.assertEqual({G1[1]}, follower.reported(at + 1, 3))

    def test_a_node_let_go_is_not_reported_once_the_period_is_whole(
            self) -> None:
        # host1 manages two nodes, then hands G1[1] over: the period that
        # drops it reports G1[0] alone, and from then on G1[1] is not
        # among what host1 reports, though within the window.
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        def period(second: int, owned: int) -> str:
            return CheckerTest.PERIOD % ('2026-11-01 14:10:%02d' % second,
                                         owned)

        rt = self.RT_LINE
        follower = observe.LogFollower(path)
        with os.fdopen(fd, 'w') as f:
            f.write(period(40, 2) + rt % (40, G1[0]) + rt % (40, G1[1]))
            f.flush()
            follower.poll()
            at = observe.log_time(rt % (40, G1[1]))
            assert at is not None
            self.assertEqual({G1[0], G1[1]}, follower.reported(at, 15))
            # The next period has begun, not yet reported: the last whole
            # one stands.
            f.write(period(45, 1))
            f.flush()
            follower.poll()
            self.assertEqual({G1[0], G1[1]}, follower.reported(at + 5, 15))
            f.write(rt % (45, G1[0]))
            f.flush()
            follower.poll()
            self.assertEqual({G1[0]}, follower.reported(at + 5, 15))
            # A period cut short keeps the nodes it did not get to.
            f.write(period(50, 1) + period(55, 1))
            f.flush()
            follower.poll()
            self.assertEqual({G1[0]}, follower.reported(at + 15, 15))


class CheckerTest(unittest.TestCase):
    """The checker's own pipeline: the computes' logs in, violations out."""

    RT = ('%s.000 77 DEBUG nova.compute.resource_tracker [-] Final '
          'resource view: name=%s phys_ram=1024MB used_ram=0MB\n')
    PERIOD = ("%s.000 77 INFO "
              "nova_ironic_multi.period.inventory [-] Managing %d "
              "Ironic nodes (0 with this host's instances) of 6 listed: 0 "
              "free in scope, 0 with other hosts' instances, 0 out of "
              "scope; peers host1,host2, ring compatible/2^5; listing took "
              "0.01s, division 0.001s\n")
    WALL = 1_800_000_000.0

    def setUp(self) -> None:
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        self.logs = {h: os.path.join(root, h + '.log')
                     for h in ('host1', 'host2')}
        for path in self.logs.values():
            open(path, 'w').close()
        self.snap = snapshot([node(u) for u in G1],
                             rows={u: 'host1' for u in G1})
        self.violations: list[checker_mod.Violation] = []
        dbs = mock.Mock()
        dbs.snapshot.side_effect = lambda: self.snap
        with self.at(0):
            self.checker = checker_mod.Checker(
                1, dbs, {h: observe.LogFollower(p)
                         for h, p in self.logs.items()},
                lambda: (dict(CONFIGS), {'host1', 'host2'}, {'g1'}),
                lambda: [], 0.0, self.violations.append)

    def at(self, seconds: float) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(
            checker_mod.time, 'monotonic', return_value=seconds))
        stack.enter_context(mock.patch.object(
            checker_mod.time, 'time', return_value=self.WALL + seconds))
        return stack

    def period(self, seconds: float, reports: dict[str, list[str]]) -> None:
        """Each host's period at ``seconds``: the nodes it reported."""
        stamp = time.strftime('%Y-%m-%d %H:%M:%S',
                              time.localtime(self.WALL + seconds))
        for host, nodes in reports.items():
            with open(self.logs[host], 'a') as f:
                f.writelines(self.RT % (stamp, n) for n in nodes)
                f.write(self.PERIOD % (stamp, len(nodes)))

    def sample(self, seconds: float) -> None:
        with self.at(seconds):
            self.checker.sample()

    def test_two_hosts_reporting_one_node_is_a_violation(self) -> None:
        # Each host's own periods say nothing wrong (counts); nova's
        # resource trackers on both report G1[0].
        for t in (0, 5, 10, 15, 20, 25):
            self.period(t, {'host1': G1, 'host2': [G1[0]]})
            self.sample(t + 1)
        self.assertEqual([('reported by one host', G1[0])],
                         [(v.invariant, v.subject) for v in self.violations])

    def test_a_node_that_moves_once_is_no_violation(self) -> None:
        self.period(0, {'host1': G1, 'host2': []})
        self.sample(1)
        # host2 takes G1[0] over (its row follows); host1 stops reporting
        # it.
        self.snap = snapshot([node(u) for u in G1],
                             rows={u: 'host2' if u == G1[0] else 'host1'
                                   for u in G1})
        for t in (5, 10, 15, 20, 25, 30, 35):
            self.period(t, {'host1': G1[1:], 'host2': [G1[0]]})
            self.sample(t + 1)
        self.assertEqual([], self.violations)


class ReportTest(unittest.TestCase):
    def _run(self, seed: int, **over: object) -> dict[str, object]:
        r: dict[str, object] = {
            'seed': seed, 'profile': 'long', 'minutes': 20.0,
            'requests': {'boot': {'ok': 3, 'error': 1}},
            'faults': {'fence': 1}, 'converge': {'fence: fenced': [5.0]},
            'unconverged': {}, 'cut_short': {}, 'violations': [],
            'notes': {'request outcomes': {'boot error: No valid host': 1}}}
        r.update(over)
        return r

    def test_combined_runs_add_up_and_pool_their_times(self) -> None:
        text = report.combine([
            self._run(1),
            self._run(2, requests={'boot': {'ok': 2}, 'reboot': {'ok': 4}},
                      converge={'fence: fenced': [9.0, 1.0]},
                      unconverged={'fence: unfenced': 1},
                      violations=['VIOLATION no request stuck: x'])])
        lines = text.splitlines()
        self.assertEqual(lines[0], '2 runs, seeds 1, 2, profiles long: '
                         '40 minutes of faults')
        boot = next(line for line in lines if line.startswith('boot '))
        self.assertEqual(boot.split(), ['boot', '5', '1', '6'])
        self.assertEqual(next(line for line in lines
                              if line.startswith('reboot ')).split(),
                         ['reboot', '4', '0', '4'])
        self.assertEqual(next(line for line in lines
                              if line.startswith('fence ')).split(),
                         ['fence', '2'])
        # Pooled: 1, 5 and 9 s, so the median is 5 and the max 9.
        fenced = next(line for line in lines
                      if line.startswith('fence: fenced'))
        self.assertEqual(fenced.split()[-5:], ['3', '5.0', '9.0', '0', '0'])
        self.assertIn('     2  boot error: No valid host', lines)
        self.assertIn('violations: 1', lines)
        self.assertIn('  seed 2: VIOLATION no request stuck: x', lines)

    def test_problems_outside_the_driver_are_listed_apart(self) -> None:
        text = report.combine([
            self._run(1), self._run(3, outside=['OUTSIDE THE DRIVER y'])])
        lines = text.splitlines()
        self.assertIn('violations: 0', lines)
        self.assertIn('outside the driver (no compute had the server): 1',
                      lines)
        self.assertIn('  seed 3: OUTSIDE THE DRIVER y', lines)
        self.assertNotIn('outside the driver', report.combine(
            [self._run(1)]))

    def test_the_command_combines_report_files(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for seed, violations in ((1, []), (2, ['VIOLATION x'])):
                paths.append(os.path.join(tmp, '%d.json' % seed))
                with open(paths[-1], 'w') as f:
                    json.dump(self._run(seed, violations=violations), f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(soak_main.main(['--combine'] + paths), 1)
                self.assertEqual(soak_main.main(['--combine', paths[0]]), 0)
            self.assertIn('seed 2: VIOLATION x', out.getvalue())
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(soak_main.main(
                    ['--combine', os.path.join(tmp, 'none.json')]), 2)
            self.assertIn('cannot read the soak report', err.getvalue())

    def test_nothing_to_combine_is_an_error(self) -> None:
        with self.assertRaises(ValueError):
            report.combine([])

    def test_table(self) -> None:
        text = report.table(
            {'boot': {'ok': 3, 'error': 1}, 'delete': {'ok': 2}},
            {'fence': 2}, {'fence: fenced': [4.0, 6.0, 20.0]},
            {'fence: unfenced': 1}, ['VIOLATION x'], 'header',
            causes={'boot error: No valid host': 1})
        self.assertIn('header', text)
        lines = text.splitlines()
        boot = next(line for line in lines if line.startswith('boot '))
        self.assertEqual(boot.split(), ['boot', '3', '1', '4'])
        fenced = next(line for line in lines
                      if line.startswith('fence: fenced'))
        self.assertEqual(fenced.split()[-5:], ['3', '6.0', '20.0', '0', '0'])
        self.assertIn('violations: 1', text)
        self.assertIn('     1  boot error: No valid host', lines)
