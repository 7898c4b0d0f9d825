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
"""CI's verdict: every tier the README's command runs ran and passed."""

from __future__ import annotations

from collections.abc import Mapping
import importlib.util
import os
import pathlib
import subprocess
import sys
import types

import pytest

from nova_ironic_multi import compat
from nova_ironic_multi.tests import run_label
from nova_ironic_multi.tests import source
from nova_ironic_multi.tests.unit import test_readme

EXPECTED = ['nova34 e2e/threading', 'nova34 functional/threading',
            'nova34 functional/eventlet', 'nova33 unit/threading',
            'nova33 functional/eventlet', 'nova32 unit/threading',
            'nova32 functional/eventlet', 'nova34 unit/threading']


def summarize() -> types.ModuleType:
    path = source.source_dir() / '.ci' / 'summarize.py'
    spec = importlib.util.spec_from_file_location('ci_summarize', path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the script's annotations through sys.modules.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def run_log(label: str, summary: str | None) -> str:
    """What tox shows of one pytest run: progress, label, summary."""
    lines = ['============ test session starts ============',
             'collected 12 items', '', '.......   [100%]']
    if summary is not None:
        lines += [run_label.MARKER + label, summary]
    return '\n'.join(lines) + '\n'


UNIT = '======= 640 passed, 3 warnings in 131.20s (0:02:11) ======='
FUNCTIONAL = '======= 74 passed in 301.5s (0:05:01) ======='
GOOD = {
    'nova34 unit/threading': UNIT,
    'nova34 functional/threading': FUNCTIONAL,
    'nova34 functional/eventlet': FUNCTIONAL,
    'nova33 unit/threading': UNIT,
    'nova33 functional/eventlet': FUNCTIONAL,
    'nova32 unit/threading': UNIT,
    'nova32 functional/eventlet': FUNCTIONAL,
    'nova34 e2e/threading': '======= 24 passed in 612.0s (0:10:12) =======',
}
#: The tests of every run above.
TOTAL = 3 * 640 + 4 * 74 + 24


def judge(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
          summaries: Mapping[str, str | None]) -> tuple[int, list[str]]:
    log = tmp_path / 'ci.log'
    log.write_text(''.join(run_log(label, summaries.get(label))
                           for label in EXPECTED))
    rc = summarize().main([
        str(log), '--command', test_readme.ci_test_command(),
        '--tox-ini', str(source.source_dir() / 'tox.ini')])
    return rc, capsys.readouterr().out.splitlines()


def test_the_command_runs_every_release_by_tox_ini() -> None:
    ci = summarize()
    ini = ci.configparser.ConfigParser(interpolation=None)
    ini.read(source.source_dir() / 'tox.ini')
    envs = ci.tox_envs(test_readme.ci_test_command(), ini)
    assert envs == ['e2e', 'functional', 'nova33', 'nova32', 'py3']
    assert ci.expected_runs(ini, envs, str(source.source_dir())) == EXPECTED


def test_each_environment_is_labelled_with_the_nova_it_pins(
        tmp_path: pathlib.Path) -> None:
    ci = summarize()
    (tmp_path / 'c').mkdir()
    (tmp_path / 'c' / 'old.txt').write_text('# x\nnova==31.3.1\n')
    (tmp_path / 'new.txt').write_text('novaclient==1.0\nnova===35.0.0\n')
    ini = ci.configparser.ConfigParser(interpolation=None)
    ini.read_string(
        '[testenv]\ndeps =\n    -c{toxinidir}/new.txt\n    -rreq.txt\n'
        'commands = pytest --pyargs nova_ironic_multi.tests.unit\n'
        '[testenv:old]\ndeps = -c {toxinidir}/c/old.txt\n'
        '[testenv:none]\ndeps = -rreq.txt\n')
    assert ci.expected_runs(ini, ['py3', 'old'], str(tmp_path)) == [
        'nova35 unit/eventlet', 'nova31 unit/eventlet']
    with pytest.raises(ci.ToxIniError, match=r'\[testenv:none\]: cannot '
                       'tell which nova it installs'):
        ci.expected_runs(ini, ['none'], str(tmp_path))


def test_a_pytest_command_in_no_known_tier_is_refused() -> None:
    ci = summarize()
    ini = ci.configparser.ConfigParser(interpolation=None)
    ini.read_string('[testenv]\ncommands = pytest tests/\n')
    with pytest.raises(ci.ToxIniError, match='cannot tell which tier'):
        ci.expected_runs(ini, ['py3'])


def test_the_label_format_is_the_summarizers() -> None:
    ci = summarize()
    assert ci.MARKER == run_label.MARKER
    assert ci.TIER.pattern == run_label.TIER.pattern
    assert run_label.label(['nova_ironic_multi.tests.functional'],
                           eventlet=True, nova=33) == (
                               'nova33 functional/eventlet')


def test_all_good(tmp_path: pathlib.Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys, dict(GOOD))
    assert rc == 0, out
    assert out[-1] == '%d passed, 0 failed' % TOTAL


def test_a_crashed_tier_is_named(tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    # The old sum printed "738 passed, 0 failed" and exited 0 here.
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'nova33 functional/eventlet': None})
    assert rc == 1
    assert ('summarize: FAILED nova33 functional/eventlet: no pytest '
            'summary: the run crashed or never started (read its output '
            'above)') in out
    # The others of the same tier and mode are not blamed.
    assert sum('FAILED' in line for line in out) == 1
    assert out[-1] == '%d passed, 1 failed' % (TOTAL - 74)


def test_a_tier_that_collected_nothing_is_named(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'nova34 e2e/threading':
                     '============ no tests ran in 0.02s ============'})
    assert rc == 1
    assert ('summarize: FAILED nova34 e2e/threading: no test passed (no '
            'tests ran in 0.02s)') in out
    assert out[-1] == '%d passed, 1 failed' % (TOTAL - 24)


def test_a_failing_tier_is_named(tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'nova34 functional/threading':
                     '==== 2 failed, 71 passed, 1 error in 300.0s ===='})
    assert rc == 1
    assert ('summarize: FAILED nova34 functional/threading: 3 failed or in '
            'error' in out)
    assert out[-1] == '%d passed, 3 failed' % (TOTAL - 3)


def test_a_summary_without_its_label_does_not_count(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A tier whose conftest never loaded prints a summary but no label.
    log = tmp_path / 'ci.log'
    log.write_text(run_log('nova34 unit/threading', UNIT) + FUNCTIONAL +
                   '\n')
    rc = summarize().main([
        str(log), '--command', 'tox -e py3,functional',
        '--tox-ini', str(source.source_dir() / 'tox.ini')])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert 'summarize: FAILED nova34 functional/eventlet: no pytest ' \
           'summary: the run crashed or never started (read its output ' \
           'above)' in out
    assert out[-1] == '640 passed, 2 failed'


@pytest.mark.parametrize('workers', [
    [],
    # As tox runs the unit tier: on two workers, whose label the
    # controller prints (xdist_relay); the conftest is not loaded there.
    ['-n', '2', '-p', 'nova_ironic_multi.tests.xdist_relay'],
], ids=['one-process', 'xdist'])
def test_a_real_pytest_run_prints_its_label_before_its_summary(
        tmp_path: pathlib.Path, workers: list[str]) -> None:
    # The conftest's line, from a real pytest run of a small module, is
    # what the summarizer pairs with that run's summary.
    env = dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', *workers,
         '--pyargs', 'nova_ironic_multi.tests.unit.test_readme'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    runs, unlabelled = summarize().read_runs(proc.stdout.splitlines())
    assert unlabelled == 0, proc.stdout
    assert [(r.label, r.passed, r.failed) for r in runs] == [
        ('nova%d unit/threading' % compat.nova_release(), 2, 0)], (
            proc.stdout + proc.stderr)


# CI's time -----------------------------------------------------------------

def tox_report(seconds: dict[str, float], total: float) -> str:
    """tox's closing report, as tox 4 prints it at its default verbosity."""
    lines = ['  %s: OK (%.2f=setup[30.00]+cmd[%.2f] seconds)' % (
        env, s, s - 30) for env, s in seconds.items()]
    lines.append('  congratulations :) (%.2f seconds)' % total)
    return '\n'.join(lines) + '\n'


def judge_timed(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                seconds: dict[str, float], elapsed: float | None,
                tox_total: float) -> tuple[int, list[str]]:
    log = tmp_path / 'ci.log'
    log.write_text(''.join(run_log(label, GOOD[label]) for label in EXPECTED)
                   + tox_report(seconds, tox_total))
    argv = [str(log), '--command', test_readme.ci_test_command(),
            '--tox-ini', str(source.source_dir() / 'tox.ini')]
    if elapsed is not None:
        argv += ['--elapsed', str(elapsed)]
    rc = summarize().main(argv)
    return rc, capsys.readouterr().out.splitlines()


FAST = {'py3': 160.0, 'functional': 900.0, 'nova33': 420.0,
        'nova32': 400.0, 'e2e': 650.0}


def test_each_environments_time_and_the_total_are_printed(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge_timed(tmp_path, capsys, FAST, 2600, sum(FAST.values()))
    assert rc == 0, out
    assert '  functional         900 s (set-up 30 + 870)' in out
    assert '  e2e                650 s (set-up 30 + 620)' in out
    # The measured whole run, not tox's own total, is what counts.
    assert '  total             2600 s = 43.3 min (guard: 75 min)' in out
    assert out[-1] == '%d passed, 0 failed' % TOTAL


def test_a_run_over_75_minutes_fails_naming_the_slowest_environments(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = {'py3': 200.0, 'functional': 2100.0, 'nova33': 700.0,
            'nova32': 650.0, 'e2e': 1000.0}
    # Every test passed: only the time fails the run.
    rc, out = judge_timed(tmp_path, capsys, slow, 4700, 4650)
    assert rc == 1
    (problem,) = [line for line in out if 'FAILED' in line]
    assert problem.startswith(
        'summarize: FAILED CI took 78.3 minutes, over its 75-minute guard')
    assert ('the slowest environments: functional 2100 s, e2e 1000 s, '
            'nova33 700 s.' in problem)
    assert out[-1] == '%d passed, 1 failed' % TOTAL


def test_without_the_measured_time_tox_total_is_judged(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge_timed(tmp_path, capsys, FAST, None, 4501)
    assert rc == 1
    assert any('CI took 75.0 minutes' in line for line in out), out
    rc, out = judge_timed(tmp_path, capsys, FAST, None, 4499)
    assert rc == 0, out


def test_tox_reports_at_every_verbosity_are_read() -> None:
    ci = summarize()
    times, total = ci.read_times([
        '  py3: OK (42.63 seconds)',
        '\x1b[32m  functional: OK (1283.20=setup[29.10]+cmd[664.00,'
        '591.00] seconds)\x1b[0m',
        '  nova33: FAIL code 1 (498.00=setup[33.00]+cmd[112.00,353.00] '
        'seconds)',
        '  evaluation failed :( (1900.50 seconds)'])
    assert [(t.env, t.seconds, t.setup, t.commands) for t in times] == [
        ('py3', 42.63, None, ()),
        ('functional', 1283.2, 29.1, (664.0, 591.0)),
        ('nova33', 498.0, 33.0, (112.0, 353.0))]
    assert total == 1900.5


def test_a_test_lost_by_a_parallel_run_is_named(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    summaries = dict(GOOD)
    summaries['nova34 functional/eventlet'] = (
        'nova-ironic-multi parallel: FAILED test_x.py::T::test_y: run by '
        'no worker\n======== 1 failed, 73 passed in 300.00s (2 workers) '
        '========')
    rc, out = judge(tmp_path, capsys, summaries)
    assert rc == 1
    assert ('summarize: FAILED parallel run: test_x.py::T::test_y: run by '
            'no worker') in out
    assert ('summarize: FAILED nova34 functional/eventlet: 1 failed or in '
            'error') in out


def test_the_parallel_launcher_counts_as_the_pytest_run_it_makes() -> None:
    ci = summarize()
    ini = ci.configparser.ConfigParser(interpolation=None)
    ini.read_string(
        '[testenv]\ndeps = -c{toxinidir}/new.txt\ncommands =\n'
        '    python -m nova_ironic_multi.tests.parallel --by module -- -p '
        'no:cacheprovider --pyargs nova_ironic_multi.tests.e2e\n'
        '    env OS_NOVA_DISABLE_EVENTLET_PATCHING=1 python -m '
        'nova_ironic_multi.tests.parallel -- --pyargs '
        'nova_ironic_multi.tests.functional\n')
    assert ci._is_pytest(['python', '-m', ci.PARALLEL, '--', '-x'])
    assert not ci._is_pytest(['python', '-m', 'bench'])
    with_pin = pathlib.Path(source.source_dir()) / 'upper-constraints.txt'
    ini.set('testenv', 'deps', '-c%s' % with_pin)
    assert ci.expected_runs(ini, ['x']) == [
        'nova34 e2e/eventlet', 'nova34 functional/threading']
