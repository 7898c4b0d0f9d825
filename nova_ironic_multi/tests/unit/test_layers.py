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
"""The layers of the package, as .importlinter states them, hold.

doc/source/architecture.rst says what each package may import; these tests
run import-linter's contracts on the checkout, and show each contract
failing on a copy of the tree with one import that breaks it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from nova_ironic_multi.tests import source

LINT = os.path.join(os.path.dirname(sys.executable), 'lint-imports')


def lint(tree: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [LINT, '--no-cache', '--config', str(tree / '.importlinter')],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_its_layers() -> None:
    result = lint(source.source_dir())
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Contracts: 3 kept, 0 broken.' in result.stdout


@pytest.mark.parametrize('module, line, broken', [
    # A node action reaching into the period's pipeline.
    ('actions/power.py', 'from nova_ironic_multi.period import inventory',
     'nova_ironic_multi.actions is not allowed to import '
     'nova_ironic_multi.period'),
    # The HTTP layer reaching up to the hosts' moves.
    ('ironic/acted.py', 'from nova_ironic_multi.hosts import zones',
     'nova_ironic_multi.ironic is not allowed to import '
     'nova_ironic_multi.hosts'),
    # The pure division reading nova.
    ('division/ownership.py', 'from nova import objects',
     'nova_ironic_multi.division is not allowed to import nova'),
    # The product (the demo once did) importing the test tree.
    ('cmd/output.py', 'from nova_ironic_multi.tests import source',
     'nova_ironic_multi.cmd is not allowed to import '
     'nova_ironic_multi.tests'),
])
def test_each_contract_fails_on_an_import_that_breaks_it(
        tmp_path: pathlib.Path, module: str, line: str, broken: str) -> None:
    checkout = source.source_dir()
    shutil.copy(checkout / '.importlinter', tmp_path / '.importlinter')
    shutil.copytree(checkout / 'nova_ironic_multi',
                    tmp_path / 'nova_ironic_multi',
                    ignore=shutil.ignore_patterns('__pycache__'))
    target = tmp_path / 'nova_ironic_multi' / module
    target.write_text(target.read_text() + '\n%s  # noqa\n' % line)
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in ' '.join(result.stdout.split()), result.stdout
