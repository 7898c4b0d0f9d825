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

from nova_ironic_multi.tests.fixtures import backing

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


def pytest_collection_finish(session: pytest.Session) -> None:
    # The services the tier needs are checked before any is used, each
    # named with its fix: a newcomer learns everything that is missing
    # from one run, not from the first deployment step that fails.
    if not session.items:
        return
    problems = backing.prerequisites()
    if not problems:
        return
    reporter = session.config.pluginmanager.get_plugin('terminalreporter')
    if reporter is not None:
        reporter.section('nova-ironic-multi end-to-end: missing services',
                         red=True)
        for problem in problems:
            reporter.write_line(problem)
    pytest.exit('the end-to-end tier cannot start: %d of the services it '
                'needs cannot be used (listed above)' % len(problems),
                returncode=pytest.ExitCode.USAGE_ERROR)
