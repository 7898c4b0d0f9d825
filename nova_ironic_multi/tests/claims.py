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
"""A pytest plugin: several pytest processes share one run's tests.

Loaded in each worker that :mod:`.parallel` starts (``-p
nova_ironic_multi.tests.claims``). Every worker collects the same tests and
walks them in the same order; before it runs one, it claims it by creating
a file named after it in a directory all workers share
(``os.O_CREAT | os.O_EXCL``, atomic on one machine). The first worker to
claim a test runs it; the others pass it by without a report. So the work
is balanced as it goes, like pytest-xdist's, but with no channel between
the processes: it works where xdist's cannot, in nova's eventlet mode
(eventlet patches the threads and sockets xdist's workers talk through,
and a worker hangs).

With ``by = module`` a worker claims a whole module at its first test and
runs all of it: the end-to-end tier's modules each bring up one
deployment that their tests share, in order.

Each worker writes what it collected and how each test it ran ended to a
JSON file in the same directory; the launcher checks from those files that
every test ran exactly once and prints the run's one summary.

Without :data:`DIR_VARIABLE` set the plugin does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import pytest

#: The directory the workers share (made by the launcher).
DIR_VARIABLE = 'NIM_CLAIMS_DIR'
#: ``test`` (the default) or ``module``: what one claim takes.
BY_VARIABLE = 'NIM_CLAIMS_BY'
#: This worker's number, 0 .. N-1.
WORKER_VARIABLE = 'NIM_CLAIMS_WORKER'
BY = ('test', 'module')


def report_path(directory: str, worker: int) -> str:
    return os.path.join(directory, 'worker-%d.json' % worker)


def claim_key(item: pytest.Item, by: str) -> str:
    """What a worker claims to run ``item``: the test, or its module."""
    if by == 'module':
        return item.nodeid.split('::', 1)[0]
    return item.nodeid


class Claims:
    """The plugin's state in one worker."""

    def __init__(self, directory: str, by: str, worker: int) -> None:
        if by not in BY:
            raise pytest.UsageError('%s=%s: use one of %s' % (
                BY_VARIABLE, by, ', '.join(BY)))
        self.directory = directory
        self.by = by
        self.worker = worker
        self.mine: set[str] = set()
        self.theirs: set[str] = set()
        self.collected: list[str] = []
        #: node id -> passed | failed | error | skipped
        self.outcomes: dict[str, str] = {}
        self.started = time.monotonic()
        self.label: str | None = None

    def claim(self, key: str) -> bool:
        """Whether this worker runs what ``key`` names (claimed now or before).
        """
        if key in self.mine:
            return True
        if key in self.theirs:
            return False
        name = hashlib.sha256(key.encode()).hexdigest()
        path = os.path.join(self.directory, 'claim-' + name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            self.theirs.add(key)
            return False
        with os.fdopen(fd, 'w') as f:
            f.write('%d %s\n' % (self.worker, key))
        self.mine.add(key)
        return True

    # pytest's hooks ------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item,
                                nextitem: pytest.Item | None) -> Any:
        if not self.claim(claim_key(item, self.by)):
            return True          # another worker runs it: nothing to do
        # pytest tore the previous test down for the test after it, which
        # may be one another worker ran: what that one would have shared
        # (its class, its module) is still set up. Tear down what this
        # test does not share, as if the previous test had named it next.
        item.session._setupstate.teardown_exact(item)
        return None              # run it as usual

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        before = self.outcomes.get(report.nodeid)
        if report.failed:
            now = 'failed' if report.when == 'call' else 'error'
            if before != 'failed':
                self.outcomes[report.nodeid] = now
        elif report.skipped and before is None:
            self.outcomes[report.nodeid] = 'skipped'
        elif report.when == 'call' and report.passed and before is None:
            self.outcomes[report.nodeid] = 'passed'

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, config: pytest.Config) -> None:
        # The label the run would print (tests/conftest.py), for the
        # launcher: it prints the one line for the whole run.
        from nova_ironic_multi.tests import run_label
        self.label = run_label.this_run(config.args)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        record = {
            'worker': self.worker, 'label': self.label,
            'collected': self.collected, 'outcomes': self.outcomes,
            'seconds': time.monotonic() - self.started,
        }
        path = report_path(self.directory, self.worker)
        with open(path + '.tmp', 'w') as f:
            json.dump(record, f)
        os.replace(path + '.tmp', path)


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(DIR_VARIABLE)
    if not directory:
        return
    plugin = Claims(directory, os.environ.get(BY_VARIABLE, 'test'),
                    int(os.environ.get(WORKER_VARIABLE, '0')))
    config.pluginmanager.register(plugin, 'nova_ironic_multi_claims')


def in_worker() -> bool:
    """Whether this process is one of a parallel run's workers."""
    return bool(os.environ.get(DIR_VARIABLE))
