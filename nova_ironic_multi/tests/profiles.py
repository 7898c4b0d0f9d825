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
"""hypothesis profiles, and the churn test's step count (a pytest plugin).

tox loads this plugin with ``-p nova_ironic_multi.tests.profiles``: it is
imported from the installed package, before any test module, so the
profiles exist when hypothesis reads ``--hypothesis-profile``.

* ``ci`` (loaded when no profile is named): no deadline (two shared cores
  make timings meaningless), 100 examples of up to 100 steps each, the
  same ones in every run (derandomized: CI fails for a change, not for a
  draw; search for new failures with ``churn-deep``). The churn test
  runs its state machine until it has taken ``max_examples *
  stateful_step_count`` steps (10^4 here) for each ring.
* ``churn-deep``: 1000 random examples of up to 200 steps (2 * 10^5 steps
  per ring), new ones each run, for a deeper search by hand:
  ``tox -e py3 -- --hypothesis-profile churn-deep -k churn``.
"""

from __future__ import annotations

import collections
from typing import Any

from hypothesis import HealthCheck
from hypothesis import settings

settings.register_profile(
    'ci', deadline=None, max_examples=100, stateful_step_count=100,
    suppress_health_check=[HealthCheck.too_slow], print_blob=True,
    derandomize=True)
settings.register_profile(
    'churn-deep', parent=settings.get_profile('ci'), max_examples=1000,
    stateful_step_count=200, derandomize=False)

#: Steps the churn state machines took in this session, per machine.
STEPS: collections.Counter[str] = collections.Counter()


def pytest_configure(config: Any) -> None:
    # hypothesis's own plugin has loaded a profile named on the command
    # line; otherwise the CI one applies.
    if not config.getoption('hypothesis_profile', None):
        settings.load_profile('ci')


def steps_line(steps: collections.Counter[str]) -> str:
    """The line that says how many steps each ring's churn test took."""
    return 'churn state machine steps (hypothesis profile %s): %s' % (
        settings.get_current_profile_name(),
        ', '.join('%s %d' % kv for kv in sorted(steps.items())))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Under xdist the workers' steps are printed by .xdist_relay.
    if STEPS:
        terminalreporter.write_line(steps_line(STEPS))
