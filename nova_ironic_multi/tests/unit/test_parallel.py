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
"""The parallel launcher: every test runs exactly once, or CI hears of it.

Real runs of ``python -m nova_ironic_multi.tests.parallel`` over small
generated test modules: each test records which worker ran it, so the
assertions read what the workers did, not what the launcher says.
"""

from __future__ import annotations

import collections
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from nova_ironic_multi.tests import parallel
from nova_ironic_multi.tests import run_label

#: A test module whose tests append "<module> <test> <pid>" to a file.
MODULE = '''
import os, time
import pytest

def record(name):
    with open(os.environ['RAN_FILE'], 'a') as f:
        f.write('%s %s %d\\n' % (__name__, name, os.getpid()))

@pytest.mark.parametrize('n', range({count}))
def test_one(n):
    time.sleep(0.05)
    record('test_one[%d]' % n)
{extra}
'''


def write_module(path: pathlib.Path, name: str, count: int,
                 extra: str = '') -> None:
    (path / ('%s.py' % name)).write_text(
        MODULE.format(count=count, extra=textwrap.dedent(extra)))


def launch(path: pathlib.Path, *options: str) -> tuple[
        int, list[str], list[tuple[str, str, int]]]:
    ran = path / 'ran.txt'
    env = dict(os.environ, RAN_FILE=str(ran),
               OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    env.pop('NIM_TEST_WORKERS', None)
    proc = subprocess.run(
        [sys.executable, '-m', 'nova_ironic_multi.tests.parallel', *options,
         '--', '-p', 'no:cacheprovider', '-q', str(path)],
        cwd=path, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    records = []
    if ran.exists():
        for line in ran.read_text().splitlines():
            module, test, pid = line.split()
            records.append((module, test, int(pid)))
    return proc.returncode, proc.stdout.splitlines(), records


def test_every_test_runs_once_shared_between_the_workers(
        tmp_path: pathlib.Path) -> None:
    write_module(tmp_path, 'test_a', 20)
    rc, out, records = launch(tmp_path, '--workers', '2')
    assert rc == 0, '\n'.join(out)
    tests = collections.Counter(t for _, t, _ in records)
    assert tests == collections.Counter(
        'test_one[%d]' % n for n in range(20))
    # Both processes did part of the work.
    assert len({pid for _, _, pid in records}) == 2, records
    # The run ends as one pytest run would: its label, then one summary.
    assert out[-2].startswith(run_label.MARKER), out
    assert out[-1].startswith('======== 20 passed in '), out
    assert out[-1].endswith('s (2 workers) ========'), out


CLASSES = '''
import os, time
import pytest

def record(name):
    with open(os.environ['RAN_FILE'], 'a') as f:
        f.write('%s %s %d\\n' % (__name__, name, os.getpid()))

@pytest.fixture(scope='module')
def shared():
    record('module-set-up')
    yield
    record('module-torn-down')

class TestOne:
    @pytest.mark.parametrize('n', range(3))
    def test_it(self, shared, n):
        time.sleep(0.05)
        record('TestOne[%d]' % n)

class TestTwo:
    @pytest.mark.parametrize('n', range(3))
    def test_it(self, shared, n):
        time.sleep(0.05)
        record('TestTwo[%d]' % n)
'''


def test_tests_of_classes_and_modules_interleaved_between_workers(
        tmp_path: pathlib.Path) -> None:
    # A worker's test follows one another worker ran, of another class or
    # module: pytest must still set up and tear down as in one process
    # (it refused: "previous item was not torn down properly").
    for name in ('test_a', 'test_b', 'test_c'):
        (tmp_path / ('%s.py' % name)).write_text(CLASSES)
    rc, out, records = launch(tmp_path, '--workers', '2')
    assert rc == 0, '\n'.join(out)
    assert out[-1].startswith('======== 18 passed in '), out
    # Each worker that used a module set its fixture up once and tore it
    # down once.
    events = collections.Counter((m, t, p) for m, t, p in records
                                 if t.startswith('module-'))
    for (module, _, pid), n in events.items():
        assert n == 1, events
        assert (module, 'module-set-up', pid) in events
        assert (module, 'module-torn-down', pid) in events


def test_a_failing_test_fails_the_run(tmp_path: pathlib.Path) -> None:
    write_module(tmp_path, 'test_a', 6, extra='''
        def test_broken():
            record('test_broken')
            assert False, 'broken on purpose'
    ''')
    rc, out, records = launch(tmp_path, '--workers', '2')
    assert rc == 1
    assert out[-1].startswith('======== 1 failed, 6 passed in '), out
    assert any('broken on purpose' in line for line in out), out


def test_a_crashed_worker_loses_no_test_silently(
        tmp_path: pathlib.Path) -> None:
    # One worker dies in the middle of its run: its tests are named, the
    # summary counts them as failed, and the exit status says so.
    write_module(tmp_path, 'test_a', 8, extra='''
        def test_crash():
            record('test_crash')
            os._exit(3)
    ''')
    rc, out, records = launch(tmp_path, '--workers', '2')
    assert rc == 1
    assert any('left no report: it crashed before pytest ended' in line
               for line in out), out
    assert any(line.startswith('nova-ironic-multi parallel: FAILED ') and
               'test_crash: run by no worker' in line for line in out), out
    summary = out[-1]
    assert ' failed' in summary and summary.startswith('======== '), out


def test_by_module_keeps_each_module_in_one_worker(
        tmp_path: pathlib.Path) -> None:
    for name in ('test_a', 'test_b', 'test_c'):
        write_module(tmp_path, name, 5)
    rc, out, records = launch(tmp_path, '--workers', '2', '--by', 'module')
    assert rc == 0, '\n'.join(out)
    pids = collections.defaultdict(set)
    for module, _, pid in records:
        pids[module].add(pid)
    assert sorted(pids) == ['test_a', 'test_b', 'test_c']
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len(records) == 15
    assert out[-1].startswith('======== 15 passed in '), out


def test_one_worker_is_plain_pytest(tmp_path: pathlib.Path) -> None:
    write_module(tmp_path, 'test_a', 3)
    rc, out, records = launch(tmp_path, '--workers', '1')
    assert rc == 0, '\n'.join(out)
    assert len({pid for _, _, pid in records}) == 1
    assert not any('nova-ironic-multi parallel' in line for line in out)


def test_combine_names_tests_run_twice_or_never() -> None:
    collected = ['t::a', 't::b', 't::c']
    reports = [
        {'worker': 0, 'collected': collected,
         'outcomes': {'t::a': 'passed', 't::b': 'passed'}},
        {'worker': 1, 'collected': collected,
         'outcomes': {'t::b': 'passed'}},
    ]
    outcomes, problems = parallel.combine(reports)
    assert outcomes == {'t::a': 'passed', 't::b': 'failed',
                        't::c': 'failed'}
    assert problems == ['t::b: run by workers 0, 1',
                        't::c: run by no worker']


def test_combine_refuses_workers_that_collected_differently() -> None:
    reports = [
        {'worker': 0, 'collected': ['t::a'], 'outcomes': {'t::a': 'passed'}},
        {'worker': 1, 'collected': ['t::a', 't::b'], 'outcomes': {}},
    ]
    outcomes, problems = parallel.combine(reports)
    assert problems[0] == ('worker 0 collected 1 tests, worker 1 2: the '
                           'workers must collect the same tests')


@pytest.mark.parametrize('outcomes,expected', [
    ({'a': 'passed', 'b': 'skipped'}, '1 passed, 1 skipped'),
    ({'a': 'failed', 'b': 'passed', 'c': 'error', 'd': 'error'},
     '1 failed, 1 passed, 2 errors'),
    ({}, 'no tests ran'),
])
def test_the_summary_reads_as_pytests(outcomes: dict[str, str],
                                      expected: str) -> None:
    assert parallel.summary_line(outcomes, 12.345, 2) == (
        '======== %s in 12.35s (2 workers) ========' % expected)
