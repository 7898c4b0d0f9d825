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
"""Run one pytest run's tests in several pytest processes at once.

Usage::

    python -m nova_ironic_multi.tests.parallel [--workers N] [--by module]
        -- PYTEST_ARGUMENTS

Starts N pytest processes with the same arguments and the
:mod:`.claims` plugin, which shares the tests out between them as they go
(each test, or with ``--by module`` each module, runs in exactly one).
Used for the functional and end-to-end tiers, whose tests are whole nova
cells and deployments: pytest-xdist hangs in nova's eventlet mode, and
each of these tests already has its own Ironic, ports, databases and
directories, so two of them can run side by side.

Each worker's output is printed when it ends, whole, one after the
other. Then the run's own lines, as one pytest run would end: the run
label CI pairs with a summary (:mod:`.run_label`) and one summary that
counts every collected test by how it ended. A test that no worker ran
(a worker crashed), or that two ran, counts as failed and is named, so
the summary cannot look green when tests were lost. The exit status is 0
only when every test passed or was skipped.

``--workers 1`` runs the plain pytest command, as without this launcher.
The default is 2 (the project's machines have two cores), or what
``NIM_TEST_WORKERS`` says: ``NIM_TEST_WORKERS=1 tox -e functional --
--pdb -k NAME`` debugs in one process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, TextIO

from nova_ironic_multi.tests import claims
from nova_ironic_multi.tests import run_label

#: How many workers, when --workers is not given.
WORKERS_VARIABLE = 'NIM_TEST_WORKERS'
#: The order pytest's summary names its counts in.
ORDER = ('failed', 'passed', 'skipped', 'error')


def combine(reports: list[dict[str, Any]]) -> tuple[
        dict[str, str], list[str]]:
    """Every collected test's outcome over all workers, and the problems.

    A test collected but run by no worker, or run by two, is ``failed``
    and named in the problems; so is a worker that collected other tests
    than the first worker did.
    """
    problems: list[str] = []
    collected: list[str] = reports[0]['collected'] if reports else []
    for r in reports[1:]:
        if r['collected'] != collected:
            problems.append(
                'worker %d collected %d tests, worker %d %d: the workers '
                'must collect the same tests' % (
                    reports[0]['worker'], len(collected), r['worker'],
                    len(r['collected'])))
    runs: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for r in reports:
        for nodeid, outcome in r['outcomes'].items():
            runs[nodeid].append((r['worker'], outcome))
    outcomes: dict[str, str] = {}
    for nodeid in collected:
        ran = runs.get(nodeid, [])
        if not ran:
            outcomes[nodeid] = 'failed'
            problems.append('%s: run by no worker' % nodeid)
        elif len(ran) > 1:
            outcomes[nodeid] = 'failed'
            problems.append('%s: run by workers %s' % (
                nodeid, ', '.join(str(w) for w, _ in ran)))
        else:
            outcomes[nodeid] = ran[0][1]
    return outcomes, problems


def summary_line(outcomes: dict[str, str], seconds: float,
                 workers: int) -> str:
    """pytest's summary, e.g. ``== 3 failed, 59 passed in 401.20s ==``."""
    counts = collections.Counter(outcomes.values())
    parts = ['%d %s' % (counts[k], k if k != 'error' or counts[k] == 1
                        else 'errors')
             for k in ORDER if counts[k]]
    body = '%s in %.2fs (%d workers)' % (
        ', '.join(parts) or 'no tests ran', seconds, workers)
    return '%s %s %s' % ('=' * 8, body, '=' * 8)


def _worker_env(directory: str, by: str, worker: int) -> dict[str, str]:
    env = dict(os.environ)
    env[claims.DIR_VARIABLE] = directory
    env[claims.BY_VARIABLE] = by
    env[claims.WORKER_VARIABLE] = str(worker)
    return env


def run(workers: int, by: str, pytest_args: list[str],
        out: TextIO = sys.stdout) -> int:
    command = [sys.executable, '-m', 'pytest', *pytest_args]
    if workers <= 1:
        return subprocess.call(command, stdin=subprocess.DEVNULL)
    directory = tempfile.mkdtemp(prefix='nim-parallel-')
    started = time.monotonic()
    try:
        logs = [open(os.path.join(directory, 'worker-%d.log' % i), 'w+b')
                for i in range(workers)]
        procs = [subprocess.Popen(
            [*command, '-p', 'nova_ironic_multi.tests.claims'],
            stdin=subprocess.DEVNULL, stdout=logs[i],
            stderr=subprocess.STDOUT, env=_worker_env(directory, by, i))
            for i in range(workers)]
        out.write('nova-ironic-multi parallel: %d pytest workers (%s), '
                  'each test in one of them; their output follows when '
                  'they end\n' % (workers, ', '.join(
                      'pid %d' % p.pid for p in procs)))
        out.flush()
        codes = []
        try:
            for proc in procs:
                codes.append(proc.wait())
        except KeyboardInterrupt:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait()
            raise
        seconds = time.monotonic() - started
        reports = []
        problems = []
        for i, (proc, log, code) in enumerate(
                zip(procs, logs, codes, strict=True)):
            log.seek(0)
            out.write('\n---- worker %d of %d (pid %d, exit %d) ----\n'
                      % (i, workers, proc.pid, code))
            out.write(log.read().decode(errors='replace'))
            out.flush()
            log.close()
            try:
                with open(claims.report_path(directory, i)) as f:
                    reports.append(json.load(f))
            except (OSError, ValueError):
                problems.append('worker %d (exit %d) left no report: it '
                                'crashed before pytest ended' % (i, code))
                continue
            if code not in (0, 1, 5):
                # 1: tests failed (counted below); 5: it collected none.
                problems.append('worker %d exited %d: pytest was '
                                'interrupted or failed itself (its output '
                                'above)' % (i, code))
        outcomes, lost = combine(reports)
        problems += lost
        labels = sorted({r['label'] for r in reports if r['label']})
        out.write('\n---- every worker ----\n')
        for problem in problems:
            out.write('nova-ironic-multi parallel: FAILED %s\n' % problem)
        by_worker = collections.Counter(
            r['worker'] for r in reports for _ in r['outcomes'])
        out.write('nova-ironic-multi parallel: %s\n' % ', '.join(
            'worker %d ran %d tests in %.0fs' % (
                r['worker'], by_worker[r['worker']], r['seconds'])
            for r in reports))
        for label in labels or ['unknown']:
            out.write(run_label.MARKER + label + '\n')
        line = summary_line(outcomes, seconds, workers)
        if problems and not outcomes:
            line = line.replace('no tests ran', '%d failed' % len(problems))
        out.write(line + '\n')
        out.flush()
        bad = problems or any(o in ('failed', 'error')
                              for o in outcomes.values())
        return 1 if bad or not outcomes else 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m nova_ironic_multi.tests.parallel',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('--workers', type=int,
                        default=int(os.environ.get(WORKERS_VARIABLE) or 2),
                        help='pytest processes to run at once (default: '
                        '$%s, else 2)' % WORKERS_VARIABLE)
    parser.add_argument('--by', choices=claims.BY, default='test',
                        help='what one worker takes at a time: a test, or '
                        'a whole module (default: test)')
    parser.add_argument('pytest_args', nargs=argparse.REMAINDER,
                        help='-- then the arguments for pytest')
    args = parser.parse_args(argv)
    rest = args.pytest_args
    if rest and rest[0] == '--':
        rest = rest[1:]
    if args.workers < 1:
        parser.error('--workers must be 1 or more')
    return run(args.workers, args.by, rest)


if __name__ == '__main__':
    sys.exit(main())
