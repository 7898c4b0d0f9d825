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
"""What the end-to-end tier reports at the end of a run.

The measured figures (takeover times, the reload log lines) and, after a
failure, the kept run directory are printed in the terminal summary, so
they stay visible however pytest captures output.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

FIGURES = pytest.StashKey[list[str]]()
OUTCOMES = pytest.StashKey[dict[str, str]]()


@pytest.fixture(scope='session')
def figures(request: pytest.FixtureRequest) -> list[str]:
    """Lines for the summary: ``figures.append('takeover: 12.3s')``."""
    return request.config.stash.setdefault(FIGURES, [])


@pytest.fixture(scope='session')
def outcomes(request: pytest.FixtureRequest) -> dict[str, str]:
    """``{test node id: 'passed' | 'failed' | 'skipped'}`` so far.

    A test that was selected but has no outcome did not finish (an
    interruption): the deployment keeps its run directory then too.
    """
    return request.config.stash.setdefault(OUTCOMES, {})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item,
        call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                  pytest.TestReport]:
    report = yield
    if report.when == 'call' or report.failed:
        done = item.config.stash.setdefault(OUTCOMES, {})
        if done.get(item.nodeid) != 'failed':
            done[item.nodeid] = report.outcome
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section('nova-ironic-multi end-to-end')
        for line in lines:
            terminalreporter.write_line(line)
