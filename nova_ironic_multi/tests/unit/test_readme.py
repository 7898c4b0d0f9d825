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


def readme_text() -> str:
    return (source.source_dir() / 'README.rst').read_text()


def readme_commands() -> list[str]:
    # Literal blocks introduced by "::" hold the set-up commands.
    return [m.group(1).strip() for m in
            re.finditer(r'::\n\n    (.+)\n', readme_text())]


def command_under(intro: str) -> str:
    """The one-line literal block after the paragraph starting ``intro``."""
    paragraphs = re.split(r'\n\s*\n', readme_text())
    for i, paragraph in enumerate(paragraphs[:-1]):
        if paragraph.startswith(intro) and paragraph.rstrip().endswith('::'):
            block = paragraphs[i + 1]
            assert block.startswith('    ') and '\n' not in block.strip(), (
                'the block after "%s" must be one indented command' % intro)
            return block.strip()
    raise AssertionError('README.rst has no paragraph "%s ...::"' % intro)


def ci_test_command() -> str:
    ci = (source.source_dir() / '.ci/run').read_text()
    m = re.search(r'^TEST_COMMAND="(.*)"$', ci, re.M)
    assert m, '.ci/run must define TEST_COMMAND'
    return m.group(1)


def test_ci_runs_the_readme_test_command() -> None:
    # The command under "Run the tests", not just any README command: the
    # demo's would pass a looser check and run no test tier at all.
    assert ci_test_command() == command_under('Run the tests')


def test_readme_lists_at_most_two_set_up_commands() -> None:
    cmds = readme_commands()
    assert 1 <= len(cmds) <= 2, cmds
    assert all(c.startswith('python3 -m pip install') for c in cmds), cmds
