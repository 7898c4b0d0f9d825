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
"""What pytest-xdist's workers would print, printed by the controller.

The unit tier runs on every core (``pytest -n auto``): its tests run in
worker processes, and the controller, which prints pytest's summary,
neither loads the tests' conftest (whose run label CI pairs with that
summary, :mod:`.run_label`) nor counts the churn test's steps
(:mod:`.profiles`). tox loads this plugin with ``-p
nova_ironic_multi.tests.xdist_relay`` in every process: each worker hands
both over when it finishes, and the controller prints them just before the
summary, as a run without workers does. Without xdist it does nothing.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

#: The keys of a worker's ``workeroutput``.
LABEL = 'nova_ironic_multi_label'
STEPS = 'nova_ironic_multi_churn_steps'

#: What the workers handed over (in the controller).
_labels: set[str] = set()
_steps: collections.Counter[str] = collections.Counter()


def pytest_sessionfinish(session: Any) -> None:
    output = getattr(session.config, 'workeroutput', None)
    if output is None:          # not a worker
        return
    from nova_ironic_multi.tests import profiles
    from nova_ironic_multi.tests import run_label
    output[LABEL] = run_label.this_run(session.config.args)
    output[STEPS] = dict(profiles.STEPS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    output = getattr(node, 'workeroutput', {})
    if LABEL in output:
        _labels.add(output[LABEL])
    _steps.update(output.get(STEPS, {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from nova_ironic_multi.tests import profiles
    from nova_ironic_multi.tests import run_label
    # Every worker runs the same nova in the same mode: one line, unless
    # they disagree (then CI finds a label it does not expect).
    for label in sorted(_labels):
        terminalreporter.write_line(run_label.MARKER + label)
    if _steps:
        terminalreporter.write_line(profiles.steps_line(_steps))
