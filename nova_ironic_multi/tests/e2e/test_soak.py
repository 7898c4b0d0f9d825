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
"""The soak's short profile, in CI: a fixed seed, two minutes of faults.

The same run as ``tox -e soak -- --profile short --minutes 2 --seed
SEED`` (:mod:`nova_ironic_multi.tests.soak`), on a deployment of its own:
the demo user's traffic through the first faults of the seed's schedule,
every invariant checked while it runs and after it settles. Its table goes
to the tier's summary; a violation fails the test with the table, and the
run directory (every log) is kept.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from typing import Any

from nova_ironic_multi.tests.soak import runner

#: A seed whose first steps bring faults of several families: a compute
#: scaled in (its instances handed over on SIGTERM), RabbitMQ gone, and a
#: reload with an unknown membership driver in eventlet mode (a defect the
#: soak found).
SEED = 159
MINUTES = 2.0


def _interrupt(signo: int, frame: Any) -> None:
    raise KeyboardInterrupt('SIGTERM')


def test_soak_short_profile_has_no_violation(figures: list[str]) -> None:
    root = os.environ.get('NIM_E2E_RUN_ROOT') or tempfile.gettempdir()
    run_dir = tempfile.mkdtemp(prefix='nim-soak-', dir=root)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = runner.run(
            SEED, MINUTES, 'short', run_dir, out=sys.stdout,
            keep=lambda r: (r is None or bool(r.violations) or
                            bool(os.environ.get('NIM_E2E_KEEP'))))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result is not None
    figures.extend(result.table.splitlines())
    if result.violations:
        figures.append('soak run directory kept: %s' % run_dir)
    assert not result.violations, result.table
    assert result.steps, 'no fault fitted in %.1f minutes' % MINUTES
