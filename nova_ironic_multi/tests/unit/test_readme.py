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
"""The README's commands are the ones CI runs."""

from __future__ import annotations

import re

from nova_ironic_multi.tests import source


def readme_commands() -> list[str]:
    text = (source.source_dir() / 'README.rst').read_text()
    # Literal blocks introduced by "::" hold the set-up commands.
    return [m.group(1).strip() for m in
            re.finditer(r'::\n\n    (.+)\n', text)]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (source.source_dir() / '.ci/run').read_text()
    m = re.search(r'^TEST_COMMAND="(.*)"$', ci, re.M)
    assert m, '.ci/run must define TEST_COMMAND'
    assert m.group(1) in readme_commands()


def test_readme_lists_at_most_two_set_up_commands() -> None:
    cmds = readme_commands()
    assert 1 <= len(cmds) <= 2, cmds
    assert all(c.startswith('python3 -m pip install') for c in cmds), cmds
