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
"""``python -m nova_ironic_multi.tests.soak --minutes N --seed S``.

``--combine A.json B.json ...`` prints one table for several runs' reports
(a long run of several seeds) and exits 1 if any of them had a violation.

Exit status 0 when the run had no violation, 1 when it had some, 2 when it
could not run (a missing service: the e2e tier's prerequisites).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from typing import Any

from nova_ironic_multi.tests.fixtures import backing
from nova_ironic_multi.tests.soak import report
from nova_ironic_multi.tests.soak import runner
from nova_ironic_multi.tests.soak import schedule


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='python -m nova_ironic_multi.tests.soak',
        description='A seeded chaos soak on the e2e deployment.')
    p.add_argument('--minutes', type=float, default=10.0,
                   help='minutes of faults and traffic (default 10); the '
                   'set-up (about a minute) and the settling come on top')
    p.add_argument('--seed', type=int, default=None,
                   help='the seed of the fault schedule and of the '
                   "traffic's draws (default: from the clock, printed)")
    p.add_argument('--profile', choices=sorted(schedule.PROFILES),
                   default='long',
                   help='gaps and held times: long (default) or short '
                   "(CI's)")
    p.add_argument('--report', metavar='PATH',
                   help='also write the result as JSON here')
    p.add_argument('--keep', action='store_true',
                   help='keep the run directory (configurations, logs) '
                   'even without violations')
    p.add_argument('--schedule-only', action='store_true',
                   help='print the schedule of the seed and exit')
    p.add_argument('--combine', nargs='+', metavar='REPORT.json',
                   help="print one table for these runs' --report files "
                   '(runs nothing) and exit 1 if any had a violation')
    return p.parse_args(argv)


def _interrupt(signo: int, frame: Any) -> None:
    raise KeyboardInterrupt('signal %d' % signo)


def _combine(paths: list[str]) -> int:
    results = []
    for path in paths:
        try:
            with open(path) as f:
                results.append(json.load(f))
        except (OSError, ValueError) as e:
            print('--combine: cannot read the soak report %s: %s'
                  % (path, e), file=sys.stderr)
            return 2
    print(report.combine(results), flush=True)
    return 1 if any(r['violations'] for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    profile = schedule.PROFILES[args.profile]
    if args.combine:
        return _combine(args.combine)
    if args.schedule_only:
        print('seed %d, profile %s, %.1f minutes:' % (seed, profile.name,
                                                     args.minutes))
        for step in schedule.plan(seed, profile, args.minutes * 60):
            print('  ' + step.describe())
        return 0
    problems = backing.prerequisites()
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return 2
    root = os.environ.get('NIM_E2E_RUN_ROOT') or tempfile.gettempdir()
    run_dir = tempfile.mkdtemp(prefix='nim-soak-', dir=root)
    # A SIGTERM (a CI time-out) still stops every process and drops the
    # databases.
    signal.signal(signal.SIGTERM, _interrupt)
    result = runner.run(
        seed, args.minutes, args.profile, run_dir,
        keep=lambda r: args.keep or r is None or bool(r.violations))
    if result is None:
        return 2
    print(result.table, flush=True)
    if args.report:
        with open(args.report, 'w') as f:
            f.write(result.to_json())
    return 1 if result.violations else 0


if __name__ == '__main__':
    sys.exit(main())
