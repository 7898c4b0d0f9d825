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
"""Judge a CI log: every tier the test command runs ran, and passed.

Usage: summarize.py LOG --command TEST_COMMAND [--tox-ini tox.ini]

The expected runs come from tox.ini: every pytest command of every tox
environment the test command names (``-e a,b``, else tox's envlist), each
labelled ``novaNN tier/mode`` (NN is the major version of the nova that the
environment's constraints file, ``-c`` in its deps, pins; the tier is the
``nova_ironic_multi.tests.TIER`` package it names; the mode is eventlet
unless the command's environment sets ``OS_NOVA_DISABLE_EVENTLET_PATCHING``
to a true value, as nova's test packages decide). Each pytest run of the
suite prints, just before its summary, ``nova-ironic-multi pytest run:
novaNN tier/mode`` (``nova_ironic_multi/tests/conftest.py``). A run is good
when that line is followed by a pytest summary with tests passed and none
failed or in error.

It also prints each tox environment's wall time (tox's closing report:
set-up and each command) and the whole run's, and fails the run, naming
the slowest environments, when the whole run took longer than
``--limit-minutes`` (75 by default: CI's hard limit is 90 minutes, and a
run that creeps towards it should be seen at 75, not discovered at 90).
``--elapsed SECONDS`` gives the whole run's time as ``.ci/run`` measured
it; without it, tox's own total counts.

Prints one line per expected run, a line for each problem (a run with no
summary, one that ran no test, one that failed), and ends with
``N passed, N failed``: the tests of every labelled run, plus one failure for
each expected run that is missing or ran no test, so the last line cannot
look green when a tier did not run. Exit status 0 only when every expected
run is good.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import os
import re
import shlex
import sys

#: The whole run's time past which CI fails (its hard limit is 90 minutes).
LIMIT_MINUTES = 75.0
#: How many of the slowest environments a slow run names.
SLOWEST = 3
#: tox's closing report: "  py3: OK (149.20=setup[34.10]+cmd[115.10]
#: seconds)" (the parts in brackets from verbosity 2, tox's default).
TOX_ENV = re.compile(
    r'^\s*(?P<env>[\w.-]+): (?P<outcome>OK|SKIP|NOT AVAILABLE|'
    r'(?:IGNORED )?FAIL code -?\d+) \((?P<total>[0-9.]+)'
    r'(?:=setup\[(?P<setup>[0-9.]+)\](?:\+cmd\[(?P<cmds>[0-9.,]*)\])?)?'
    r' seconds\)\s*$')
TOX_TOTAL = re.compile(r'^\s*(?:congratulations :\)|evaluation failed :\()'
                       r' \((?P<total>[0-9.]+) seconds\)\s*$')
#: What the parallel launcher prints when a test was lost
#: (nova_ironic_multi/tests/parallel.py).
PARALLEL_FAILED = 'nova-ironic-multi parallel: FAILED '
#: The module that runs one pytest run in several processes.
PARALLEL = 'nova_ironic_multi.tests.parallel'

#: What nova_ironic_multi/tests/run_label.py prints (a unit test keeps the
#: two equal; this script runs without the package installed).
MARKER = 'nova-ironic-multi pytest run: '
TIER = re.compile(r'nova_ironic_multi[./]tests[./](\w+)')
MODE_VARIABLE = 'OS_NOVA_DISABLE_EVENTLET_PATCHING'

ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
# pytest's last line: "==== 3 failed, 5 passed in 1.23s ====", "no tests ran
# in 0.01s", or the same without the rule under -q.
SUMMARY = re.compile(
    r'^=*\s*(?P<body>(?:no tests ran|\d+ [a-z]+(?:, \d+ [a-z]+)*)'
    r' in [0-9.]+s\b.*?)\s*=*$')
COUNT = re.compile(r'(\d+) ([a-z]+)')
PASSED = ('passed', 'xpassed')
FAILED = ('failed', 'error', 'errors')
SUBSTITUTION = re.compile(r'\{\[([^\]]+)\]([^}]+)\}')
NOVA_PIN = re.compile(r'^nova\s*===?\s*(\d+)\.', re.M)


class ToxIniError(Exception):
    """tox.ini cannot be read for the runs it makes."""


# What the command runs -----------------------------------------------------

def tox_envs(command: str, ini: configparser.ConfigParser) -> list[str]:
    """The tox environments ``command`` runs, in order."""
    words = shlex.split(command.replace('&&', ' && '))
    for i, word in enumerate(words):
        if word in ('-e', '--env') and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith('-e') and len(word) > 2 and '=' not in word:
            value = word[2:]
        elif word.startswith('--env='):
            value = word[len('--env='):]
        else:
            continue
        return [e.strip() for e in value.split(',') if e.strip()]
    envlist = ini.get('tox', 'envlist', fallback='')
    return [e.strip() for e in re.split(r'[,\s]+', envlist) if e.strip()]


def _value(ini: configparser.ConfigParser, env: str, key: str,
           depth: int = 0) -> str:
    """A key of ``[testenv:env]``, else of ``[testenv]``, substituted."""
    section = 'testenv:%s' % env
    for name in (section, 'testenv'):
        if ini.has_option(name, key):
            return _substitute(ini, ini.get(name, key), depth)
    return ''


def _substitute(ini: configparser.ConfigParser, text: str,
                depth: int) -> str:
    if depth > 10:
        raise ToxIniError('tox.ini: substitutions nest too deep')

    def one(m: re.Match[str]) -> str:
        section, key = m.group(1), m.group(2)
        if not ini.has_option(section, key):
            raise ToxIniError('tox.ini: {[%s]%s} is not set' % (section, key))
        return _substitute(ini, ini.get(section, key), depth + 1)

    return SUBSTITUTION.sub(one, text)


def _lines(value: str) -> list[str]:
    joined = re.sub(r'\\\n\s*', ' ', value)
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.strip().startswith('#')]


def _setenv(ini: configparser.ConfigParser, env: str) -> dict[str, str]:
    out = {}
    for line in _lines(_value(ini, env, 'setenv')):
        key, sep, value = line.partition('=')
        if sep:
            out[key.strip()] = value.strip()
    return out


def _is_pytest(words: list[str]) -> bool:
    return any(w == 'pytest' or w.endswith('/pytest') or
               (w == '-m' and i + 1 < len(words) and
                words[i + 1] in ('pytest', PARALLEL))
               for i, w in enumerate(words))


def _pytest_words(words: list[str]) -> list[str]:
    """The words pytest gets: with the parallel launcher, those after --."""
    for i, w in enumerate(words):
        if w == '-m' and i + 1 < len(words) and words[i + 1] == PARALLEL:
            rest = words[i + 2:]
            return rest[rest.index('--') + 1:] if '--' in rest else rest
    return words


def _test_arguments(words: list[str]) -> list[str]:
    """The words of a command that are not plugin names (``-p NAME``)."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == '-p':
            skip = True
        elif not word.startswith('-p'):
            out.append(word)
    return out


def nova_release(ini: configparser.ConfigParser, env: str,
                 toxinidir: str) -> int:
    """The nova major version ``env`` installs, from its constraints file."""
    for line in _lines(_value(ini, env, 'deps')):
        words = shlex.split(line)
        if words and words[0] == '-c':
            path = ' '.join(words[1:])
        elif words and words[0].startswith('-c'):
            path = words[0][2:]
        else:
            continue
        path = os.path.join(toxinidir, path.replace('{toxinidir}', toxinidir))
        try:
            with open(path) as f:
                m = NOVA_PIN.search(f.read())
        except OSError as e:
            raise ToxIniError('tox.ini [testenv:%s]: cannot read its '
                              'constraints file: %s' % (env, e)) from e
        if m:
            return int(m.group(1))
    raise ToxIniError(
        'tox.ini [testenv:%s]: cannot tell which nova it installs: give it'
        ' a constraints file (-c in deps) that pins nova==X.Y.Z' % env)


def expected_runs(ini: configparser.ConfigParser, envs: list[str],
                  toxinidir: str = '.') -> list[str]:
    """``novaNN tier/mode`` of every pytest command of ``envs``, in order."""
    labels = []
    for env in envs:
        environ = _setenv(ini, env)
        nova: int | None = None
        for command in _lines(_value(ini, env, 'commands')):
            words = shlex.split(command)
            if not _is_pytest(words):
                continue
            run_environ = dict(environ)
            if words and words[0] == 'env':
                for word in words[1:]:
                    key, sep, value = word.partition('=')
                    if not sep:
                        break
                    run_environ[key] = value
            tiers = sorted({m.group(1) for w in
                            _test_arguments(_pytest_words(words))
                            for m in TIER.finditer(w)})
            if not tiers:
                raise ToxIniError(
                    'tox.ini [testenv:%s]: cannot tell which tier "%s" runs:'
                    ' name it as --pyargs nova_ironic_multi.tests.TIER'
                    % (env, command))
            threading = run_environ.get(MODE_VARIABLE, '').lower() in (
                '1', 'true', 'yes')
            if nova is None:
                nova = nova_release(ini, env, toxinidir)
            labels.append('nova%d %s/%s' % (nova, '+'.join(tiers),
                                            'threading' if threading else
                                            'eventlet'))
    return labels


# What the log says ---------------------------------------------------------

@dataclasses.dataclass
class Run:
    label: str
    summary: str | None = None
    passed: int = 0
    failed: int = 0


def read_runs(lines: list[str]) -> tuple[list[Run], int]:
    """Each labelled run with the first pytest summary after its label.

    Also returns how many summaries had no label before them.
    """
    runs: list[Run] = []
    pending: Run | None = None
    unlabelled = 0
    for raw in lines:
        line = ANSI.sub('', raw).strip()
        if line.startswith(MARKER):
            if pending is not None:
                runs.append(pending)
            pending = Run(line[len(MARKER):].strip())
            continue
        m = SUMMARY.match(line)
        if not m:
            continue
        if pending is None:
            unlabelled += 1
            continue
        pending.summary = m.group('body')
        for n, kind in COUNT.findall(m.group('body')):
            if kind in PASSED:
                pending.passed += int(n)
            elif kind in FAILED:
                pending.failed += int(n)
        runs.append(pending)
        pending = None
    if pending is not None:
        runs.append(pending)
    return runs, unlabelled


@dataclasses.dataclass
class EnvTime:
    env: str
    seconds: float
    setup: float | None = None
    commands: tuple[float, ...] = ()


def read_times(lines: list[str]) -> tuple[list[EnvTime], float | None]:
    """Each tox environment's time from tox's report, and tox's total."""
    times: list[EnvTime] = []
    total = None
    for raw in lines:
        line = ANSI.sub('', raw).rstrip()
        m = TOX_ENV.match(line)
        if m:
            cmds = tuple(float(c) for c in (m.group('cmds') or '').split(',')
                         if c)
            setup = m.group('setup')
            times.append(EnvTime(m.group('env'), float(m.group('total')),
                                 float(setup) if setup else None, cmds))
            continue
        m = TOX_TOTAL.match(line)
        if m:
            total = float(m.group('total'))
    return times, total


def judge_time(times: list[EnvTime], total: float,
               limit_minutes: float = LIMIT_MINUTES) -> tuple[
                   list[str], list[str]]:
    """(lines of the time table, problems): slow past the limit is one."""
    report = []
    for t in times:
        parts = ''
        if t.setup is not None:
            parts = ' (set-up %.0f%s)' % (t.setup, ''.join(
                ' + %.0f' % c for c in t.commands))
        report.append('%-14s %7.0f s%s' % (t.env, t.seconds, parts))
    report.append('%-14s %7.0f s = %.1f min (guard: %g min)' % (
        'total', total, total / 60, limit_minutes))
    problems = []
    if total > limit_minutes * 60:
        slowest = sorted(times, key=lambda t: -t.seconds)[:SLOWEST]
        problems.append(
            'CI took %.1f minutes, over its %g-minute guard (a run past 90 '
            'minutes does not land at all); the slowest environments: %s. '
            'Make them faster or move long profiles out of the test '
            'command (doc/source/contributor.rst, "CI\'s time")' % (
                total / 60, limit_minutes, ', '.join(
                    '%s %.0f s' % (t.env, t.seconds) for t in slowest)
                or 'none reported by tox'))
    return report, problems


def judge(expected: list[str],
          runs: list[Run]) -> tuple[list[str], list[str], int, int]:
    """(lines per run, problems, passed, failed)."""
    left = list(runs)
    report, problems = [], []
    passed = sum(r.passed for r in runs if r.summary is not None)
    failed = sum(r.failed for r in runs if r.summary is not None)
    for label in expected:
        run = next((r for r in left if r.label == label), None)
        if run is not None:
            left.remove(run)
        if run is None or run.summary is None:
            problems.append(
                '%s: no pytest summary: the run crashed or never started '
                '(read its output above)' % label)
            report.append('%-28s missing' % label)
            failed += 1
            continue
        report.append('%-28s %s' % (label, run.summary))
        if run.failed:
            problems.append('%s: %d failed or in error' % (label, run.failed))
        elif not run.passed:
            problems.append('%s: no test passed (%s)' % (label, run.summary))
            failed += 1
    for run in left:
        report.append('%-28s %s (not expected)' % (
            run.label, run.summary or 'no summary'))
    return report, problems, passed, failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='summarize.py')
    parser.add_argument('log')
    parser.add_argument('--command', required=True,
                        help="the README's test command, as .ci/run ran it")
    parser.add_argument('--tox-ini', default='tox.ini')
    parser.add_argument('--elapsed', type=float, default=None,
                        help='seconds the whole run took (.ci/run); '
                        "default: tox's own total")
    parser.add_argument('--limit-minutes', type=float, default=LIMIT_MINUTES,
                        help='fail when the run took longer (default %g)'
                        % LIMIT_MINUTES)
    args = parser.parse_args(argv)
    ini = configparser.ConfigParser(interpolation=None)
    try:
        with open(args.tox_ini) as f:
            ini.read_file(f)
        expected = expected_runs(ini, tox_envs(args.command, ini),
                                 os.path.dirname(args.tox_ini) or '.')
    except (OSError, configparser.Error, ToxIniError) as e:
        print('summarize: %s' % e)
        print('0 passed, 1 failed')
        return 1
    with open(args.log, errors='replace') as f:
        lines = f.read().splitlines()
    runs, unlabelled = read_runs(lines)
    report, problems, passed, failed = judge(expected, runs)
    for line in lines:
        line = ANSI.sub('', line).strip()
        if line.startswith(PARALLEL_FAILED):
            problems.append('parallel run: ' + line[len(PARALLEL_FAILED):])
    times, tox_total = read_times(lines)
    total = args.elapsed if args.elapsed is not None else tox_total
    if total is None:
        total = sum(t.seconds for t in times)
    time_report, slow = judge_time(times, total, args.limit_minutes)
    failed += len(slow)
    problems += slow
    print('summarize: %d pytest runs expected from %s (%s)' % (
        len(expected), args.tox_ini, ', '.join(expected) or 'none'))
    for line in report:
        print('  ' + line)
    print('summarize: wall time by tox environment:')
    for line in time_report:
        print('  ' + line)
    if unlabelled:
        print('summarize: ignored %d pytest summaries without a run label'
              % unlabelled)
    if not expected:
        problems.append('the command runs no pytest command of tox.ini')
        failed += 1
    for problem in problems:
        print('summarize: FAILED %s' % problem)
    print('%d passed, %d failed' % (passed, failed))
    return 0 if passed and not failed and not problems else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
