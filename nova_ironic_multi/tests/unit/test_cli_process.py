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
"""The installed ``nova-ironic-multi`` command, as an operator runs it.

(Its commands against a real cell and Ironic: tests/functional/test_cli.)
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

COMMAND = os.path.join(os.path.dirname(sys.executable), 'nova-ironic-multi')


def run(*args: str, conf: pathlib.Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    argv = [COMMAND] + (['--config-file', str(conf)] if conf else [])
    env = dict(os.environ)
    env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
    return subprocess.run(argv + list(args), capture_output=True, text=True,
                          timeout=120, env=env)


def test_help_lists_the_commands() -> None:
    result = run('--help')
    assert result.returncode == 0
    assert 'ring' in result.stdout and 'takeover' in result.stdout
    result = run('ring', 'simulate', '--help')
    assert result.returncode == 0
    assert '--add HOST' in result.stdout and '--format' in result.stdout


def test_cell_mappings_can_be_read(tmp_path: pathlib.Path) -> None:
    # nova's CellMapping reads [DEFAULT] transport_url as it loads a cell:
    # the command's configuration must have registered it, as
    # nova-manage's does, or every command fails on a real cloud.
    conf = tmp_path / 'nova.conf'
    conf.write_text('[DEFAULT]\ntransport_url = rabbit://nova:s3cret@mq/\n')
    code = (
        'import sys\n'
        'from nova_ironic_multi.cmd import main\n'
        'main.configure(sys.argv[1:])\n'
        'from nova.objects import cell_mapping\n'
        'print(cell_mapping.CellMapping.format_mq_url(\n'
        '    "{scheme}://{username}:{password}@{hostname}/cell1"))\n')
    env = dict(os.environ)
    env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
    result = subprocess.run(
        [sys.executable, '-c', code, '--config-file', str(conf), 'ring',
         'show'], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'rabbit://nova:s3cret@mq/cell1'


def test_takeover_needs_both_hosts() -> None:
    result = run('takeover', '--from', 'host3')
    assert result.returncode == 2
    assert '--to' in result.stderr


def test_no_ironic_endpoint_is_explained(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / 'nova.conf'
    conf.write_text('[DEFAULT]\n')
    result = run('ring', 'show', conf=conf)
    assert result.returncode == 1
    assert '[ironic] endpoint_override' in result.stderr
    assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('section', [
    '[ironic_multi]\npartition_key = a\npeer_list = h1\n'
    '[ironic]\nconductor_group = b\n',
    '[ironic_multi]\nring_algorithm = no-such-ring\n',
])
def test_invalid_partition_options_are_refused(tmp_path: pathlib.Path,
                                               section: str) -> None:
    conf = tmp_path / 'nova.conf'
    conf.write_text(section)
    result = run('ring', 'show', conf=conf)
    assert result.returncode == 2, result.stderr
    assert '[ironic' in result.stderr
    assert 'Traceback' not in result.stderr


def test_upgrade_check_explains_what_it_cannot_read(
        tmp_path: pathlib.Path) -> None:
    # On a host without nova's databases configured, Ironic away: every
    # check answers, none breaks (no 255, no traceback).
    conf = tmp_path / 'nova.conf'
    conf.write_text('[DEFAULT]\ncompute_driver = '
                    'nova_ironic_multi.IronicDriver\n[ironic]\n'
                    'endpoint_override = http://127.0.0.1:9/\n')
    result = run('upgrade', 'check', '--format', 'json', conf=conf)
    assert result.returncode == 2, result.stderr
    checks = {c['check']: (c['result'], c['details'])
              for c in json.loads(result.stdout)['checks']}
    assert checks['Local settings'][0] == 0, checks
    verdict, details = checks['Same settings in each scope']
    assert verdict == 2 and "Cannot read nova's databases" in details
    assert checks['Ironic API version'][0] == 2
    assert 'Connection refused' in checks['Ironic API version'][1]
    assert checks['nova.virt shim'][0] == 0
    assert 'Traceback' not in result.stderr
    # The table nova-status prints, and the same exit code.
    table = run('upgrade', 'check', conf=conf)
    assert table.returncode == 2
    assert 'Check: nova.virt shim' in table.stdout
