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

import importlib.util
import os
import pathlib
import subprocess
import sys
import types

import pytest

from nova_ironic_multi.tests import run_label
from nova_ironic_multi.tests import source
from nova_ironic_multi.tests.unit import test_readme

EXPECTED = ['unit/threading', 'functional/threading', 'functional/eventlet',
            'e2e/threading']


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


GOOD = {
    'unit/threading': '======= 640 passed, 3 warnings in 131.20s (0:02:11)'
                      ' =======',
    'functional/threading': '======= 74 passed in 301.5s (0:05:01) =======',
    'functional/eventlet': '======= 74 passed in 290.1s (0:04:50) =======',
    'e2e/threading': '======= 24 passed in 612.0s (0:10:12) =======',
}


def judge(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
          summaries: dict[str, str | None]) -> tuple[int, list[str]]:
    log = tmp_path / 'ci.log'
    log.write_text(''.join(run_log(label, summaries.get(label))
                           for label in EXPECTED))
    rc = summarize().main([
        str(log), '--command', test_readme.ci_test_command(),
        '--tox-ini', str(source.source_dir() / 'tox.ini')])
    return rc, capsys.readouterr().out.splitlines()


def test_the_command_runs_four_pytest_runs_by_tox_ini() -> None:
    ci = summarize()
    ini = ci.configparser.ConfigParser(interpolation=None)
    ini.read(source.source_dir() / 'tox.ini')
    envs = ci.tox_envs(test_readme.ci_test_command(), ini)
    assert envs == ['py3', 'functional', 'e2e']
    assert ci.expected_runs(ini, envs) == EXPECTED


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
                           eventlet=True) == 'functional/eventlet'


def test_all_good(tmp_path: pathlib.Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys, dict(GOOD))
    assert rc == 0, out
    assert out[-1] == '812 passed, 0 failed'


def test_a_crashed_tier_is_named(tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    # The old sum printed "738 passed, 0 failed" and exited 0 here.
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'functional/eventlet': None})
    assert rc == 1
    assert ('summarize: FAILED functional/eventlet: no pytest summary: the '
            'run crashed or never started (read its output above)') in out
    assert out[-1] == '738 passed, 1 failed'


def test_a_tier_that_collected_nothing_is_named(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'e2e/threading':
                     '============ no tests ran in 0.02s ============'})
    assert rc == 1
    assert ('summarize: FAILED e2e/threading: no test passed (no tests ran '
            'in 0.02s)') in out
    assert out[-1] == '788 passed, 1 failed'


def test_a_failing_tier_is_named(tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = judge(tmp_path, capsys,
                    {**GOOD, 'functional/threading':
                     '==== 2 failed, 71 passed, 1 error in 300.0s ===='})
    assert rc == 1
    assert ('summarize: FAILED functional/threading: 3 failed or in error'
            in out)
    assert out[-1] == '809 passed, 3 failed'


def test_a_summary_without_its_label_does_not_count(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A tier whose conftest never loaded prints a summary but no label.
    log = tmp_path / 'ci.log'
    log.write_text(run_log('unit/threading', GOOD['unit/threading']) +
                   GOOD['functional/threading'] + '\n')
    rc = summarize().main([
        str(log), '--command', 'tox -e py3,functional',
        '--tox-ini', str(source.source_dir() / 'tox.ini')])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert 'summarize: FAILED functional/eventlet: no pytest summary: the ' \
           'run crashed or never started (read its output above)' in out
    assert out[-1] == '640 passed, 2 failed'


def test_a_real_pytest_run_prints_its_label_before_its_summary(
        tmp_path: pathlib.Path) -> None:
    # The conftest's line, from a real pytest run of a small module, is
    # what the summarizer pairs with that run's summary.
    env = dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider',
         '--pyargs', 'nova_ironic_multi.tests.unit.test_readme'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    runs, unlabelled = summarize().read_runs(proc.stdout.splitlines())
    assert unlabelled == 0, proc.stdout
    assert [(r.label, r.passed, r.failed) for r in runs] == [
        ('unit/threading', 2, 0)], proc.stdout + proc.stderr
