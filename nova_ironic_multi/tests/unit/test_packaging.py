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
"""What the distribution ships, and the generated sample configuration."""

from __future__ import annotations

import fcntl
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import pytest

from nova_ironic_multi.tests import source


@pytest.fixture(scope='module')
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp('wheel')
    src = source.source_dir()
    # pip builds in the source tree (its build/ directory): two pytest
    # workers building at once would remove each other's files.
    lock = pathlib.Path(tempfile.gettempdir()) / (
        'nim-wheel-%s.lock' % hashlib.sha1(str(src).encode()).hexdigest()[:12])
    with open(lock, 'w') as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        subprocess.run(
            [sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--quiet',
             '--wheel-dir', str(out), str(src)],
            check=True)
    (whl,) = out.glob('nova_ironic_multi-*.whl')
    with zipfile.ZipFile(whl) as zf:
        return zf.namelist()


def test_wheel_ships_the_shim_inside_nova_virt(
        wheel_names: list[str]) -> None:
    assert 'nova/virt/nova_ironic_multi/__init__.py' in wheel_names
    assert 'nova_ironic_multi/driver.py' in wheel_names


def test_wheel_never_ships_nova_package_markers(
        wheel_names: list[str]) -> None:
    # Shipping either file would overwrite nova's own on install and break
    # nova, or be removed with this package on uninstall.
    assert 'nova/__init__.py' not in wheel_names
    assert 'nova/virt/__init__.py' not in wheel_names
    nova_files = [n for n in wheel_names if n.startswith('nova/')]
    assert all(n.startswith('nova/virt/nova_ironic_multi/')
               for n in nova_files), nova_files


def test_wheel_registers_the_entry_points(wheel_names: list[str]) -> None:
    assert any(n.endswith('.dist-info/entry_points.txt')
               for n in wheel_names)


def test_committed_sample_config_is_current(tmp_path: pathlib.Path) -> None:
    src = source.source_dir()
    committed = src / 'etc/nova-ironic-multi/nova-ironic-multi.conf.sample'
    fresh = tmp_path / 'sample.conf'
    subprocess.run(
        [sys.executable, '-m', 'oslo_config.generator',
         '--config-file',
         str(src / 'etc/nova-ironic-multi/'
                   'nova-ironic-multi-config-generator.conf'),
         '--output-file', str(fresh)],
        check=True)
    assert fresh.read_text() == committed.read_text(), (
        'etc/nova-ironic-multi/nova-ironic-multi.conf.sample is stale: '
        'run "tox -e genconfig" and commit the result.')
