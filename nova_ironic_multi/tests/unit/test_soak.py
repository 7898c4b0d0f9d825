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
import tempfile
import unittest

from nova_ironic_multi import rings
from nova_ironic_multi.tests.soak import __main__ as soak_main
from nova_ironic_multi.tests.soak import invariants as inv
from nova_ironic_multi.tests.soak import observe
from nova_ironic_multi.tests.soak import report
from nova_ironic_multi.tests.soak import schedule

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


class ExpectedDivisionTest(unittest.TestCase):
    def test_free_nodes_divided_once_between_live_peers(self) -> None:
        snap = snapshot([node(u) for u in G1])
        divisions = inv.expected(snap, CONFIGS, {'host1', 'host2'})
        owners = inv.managers(divisions)
        self.assertEqual(set(owners), set(G1))
        for uuid, hosts in owners.items():
            self.assertEqual(hosts, [ring_owner(['host1', 'host2'], uuid)])

    def test_a_host_down_forced_down_or_disabled_gets_nothing_free(
            self) -> None:
        for down in (service('host2', age=60),
                     service('host2', forced_down=True),
                     service('host2', disabled=True)):
            snap = snapshot([node(u) for u in G1],
                            services=[service('host1'), down])
            divisions = inv.expected(snap, CONFIGS, {'host1', 'host2'})
            self.assertEqual(divisions['host1'].owned, set(G1))
            self.assertEqual(divisions['host2'].owned, set())

    def test_nodes_of_instances_and_orphans_stay_with_their_host(
            self) -> None:
        away = next(u for u in G1
                    if ring_owner(['host1', 'host2'], u) == 'host1')
        orphan_node = next(u for u in G1 if u != away and
                           ring_owner(['host1', 'host2'], u) == 'host1')
        snap = snapshot(
            [node(u, 'i-live' if u == away else
                  'i-gone' if u == orphan_node else None) for u in G1],
            [observe.Instance('i-live', 'host2', away, 'active', None,
                              False),
             observe.Instance('i-gone', 'host2', orphan_node, 'deleted',
                              None, True)])
        divisions = inv.expected(snap, CONFIGS, {'host1', 'host2'})
        self.assertIn(away, divisions['host2'].owned)
        self.assertIn(orphan_node, divisions['host2'].owned)
        self.assertEqual(divisions['host2'].with_instance, 2)
        self.assertNotIn(away, divisions['host1'].owned)

    def test_a_host_out_of_its_peer_list_keeps_only_its_instances(
            self) -> None:
        busy = G1[0]
        configs = {'host1': inv.HostConfig('g1', ('host1',)),
                   'host2': inv.HostConfig('g1', ('host1',))}
        snap = snapshot([node(u, 'i' if u == busy else None) for u in G1],
                        [observe.Instance('i', 'host2', busy, 'active',
                                          None, False)])
        divisions = inv.expected(snap, configs, {'host1', 'host2'})
        self.assertEqual(divisions['host2'].owned, {busy})
        self.assertEqual(divisions['host1'].owned, set(G1) - {busy})

    def test_different_peer_lists_show_as_a_double_manager(self) -> None:
        configs = {'host1': inv.HostConfig('g1', ('host1',)),
                   'host2': inv.HostConfig('g1', ('host1', 'host2'))}
        snap = snapshot([node(u) for u in G1])
        divisions = inv.expected(snap, configs, {'host1', 'host2'})
        must = inv.should_be_managed(snap, configs, {'host1', 'host2'})
        problems = inv.division_problems(snap, divisions, must)
        doubled = [p for p in problems if p.invariant ==
                   'managed by one host']
        self.assertTrue(doubled)
        self.assertTrue(all(p.grace == inv.DIVISION_GRACE for p in doubled))

    def test_cell_rows_are_checked_against_the_division(self) -> None:
        owner = {u: ring_owner(['host1', 'host2'], u) for u in G1}
        nodes = [node(u) for u in G1]
        right = snapshot(nodes, rows=owner)
        divisions = inv.expected(right, CONFIGS, {'host1', 'host2'})
        must = inv.should_be_managed(right, CONFIGS, {'host1', 'host2'})
        self.assertEqual(inv.division_problems(right, divisions, must), [])
        wrong = dict(owner)
        wrong[G1[0]] = 'host2' if owner[G1[0]] == 'host1' else 'host1'
        snap = snapshot(nodes, rows=wrong)
        problems = inv.division_problems(snap, divisions, must)
        self.assertEqual([(p.invariant, p.subject) for p in problems],
                         [('compute node of the manager', G1[0])])

    def test_shards_divide_by_shard(self) -> None:
        configs = {h: dataclasses.replace(c, divide='shards')
                   for h, c in CONFIGS.items()}
        nodes = [node(u, shard='shard-%d' % (i % 2))
                 for i, u in enumerate(G1)]
        divisions = inv.expected(snapshot(nodes), configs,
                                 {'host1', 'host2'})
        owners = inv.managers(divisions)
        for shard in ('shard-0', 'shard-1'):
            hosts = {owners[n.uuid][0] for n in nodes if n.shard == shard}
            self.assertEqual(len(hosts), 1, shard)


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
        self.assertEqual(t.update([p], 12, 0), [])
        self.assertEqual(t.update([p], 23, 0), [p])

    def test_a_new_expectation_is_a_new_problem(self) -> None:
        t = inv.Tracker()
        t.update([self.problem(10, 'a')], 0, 0)
        self.assertEqual(t.update([self.problem(10, 'b')], 11, 0), [])

    def test_no_grace_is_a_violation_at_once_even_during_a_fault(
            self) -> None:
        t = inv.Tracker()
        p = self.problem(None)
        self.assertEqual(t.update([p], 0, None), [p])
        self.assertEqual(t.update([p], 1, None), [])


class LogFollowerTest(unittest.TestCase):
    LINE = ("2026-11-01 14:10:53.123 77 DEBUG nova_ironic_multi.inventory "
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
