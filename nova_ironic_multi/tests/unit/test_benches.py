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
"""Every benchmark at a tiny size, so none can stop running unseen.

The published figures (doc/source/performance.rst) come from ``tox -e bench
-- NAME``; a nova, placement or driver change that breaks a benchmark
fails here, in CI, instead of the next time someone sizes a fleet with it
(``bench scale`` and ``bench fleet`` stopped running once the peer rule
read placement, and nothing noticed). Each runs as ``python -m bench``, in
a process of its own (the benchmarks configure nova's global options as a
nova-compute does), and must exit 0 with its table and the checks of
correctness it makes (the same nodes from both drivers, no node managed
twice), which hold at any size; speed targets are not asserted (a tiny
size says nothing about them). ``bench period`` has its own test
(test_bench_period).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from nova_ironic_multi.tests import source


def bench_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory holding only the checkout's bench package.

    The driver stays the installed one, as nova would load it.
    """
    path = tmp_path / 'path'
    path.mkdir(exist_ok=True)
    if not (path / 'bench').exists():
        (path / 'bench').symlink_to(source.source_dir() / 'bench')
    return path


def run_bench(tmp_path: pathlib.Path, *args: str) -> str:
    """``python -m bench ARGS``; its standard output. It must exit 0."""
    env = dict(os.environ, PYTHONPATH=str(bench_path(tmp_path)),
               OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    proc = subprocess.run([sys.executable, '-m', 'bench', *args],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def test_rings_compatible_ring_maps_as_tooz(tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'rings', '--sizes', '1e3x5', '--repeat', '1')
    rows = {line.split()[2]: line.split() for line in out.splitlines()
            if re.match(r'\s*1e\+03\s+5\s', line)}
    assert {'tooz', 'compatible', 'balanced'} <= set(rows), out
    # The compatible ring gives every node the host tooz gives it.
    assert 'yes' == rows['compatible'][-1], out


def test_scale_both_drivers_return_the_same_nodes(
        tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'scale', '--nodes', '30', '--repeat', '1')
    found = re.search(r'same set of nodes from both drivers in all (\d+) '
                      r'calls: (\S+) \((\d+) nodes\)', out)
    assert found, out
    # One cold and one warm call of each driver; host1's third of 30.
    assert ('4', 'yes') == found.group(1, 2), out
    assert 0 < int(found.group(3)) < 30, out
    assert 'Memory (one traced cold call each):' in out


def test_churn_moves_no_other_node(tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'churn', '--sizes', '1e2x5', '--steps', '3')
    verdicts = [line for line in out.splitlines()
                if 'other nodes moved per boot or delete' in line]
    assert 2 == len(verdicts), out      # both rings
    for line in verdicts:
        assert line.endswith(' met'), line


def test_fleet_division_checked_in_every_mode(tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'fleet', '--nodes', '40', '--hosts', '3',
                    '--shards', '4', '--unsharded', '4')
    assert 'C=3: division checked' in out, out
    for mode in ('in-tree', 'ours nodes', 'ours shards'):
        assert re.search(r'\n\s*3\s+%s\s' % mode, out), out
    assert 'Extrapolated to 10^5 nodes and 100 hosts' in out


def test_shards_balanced_ring_meets_its_target(
        tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'shards', '--quick')
    verdicts = [line for line in out.splitlines() if 'max/mean' in line
                and 'hosts, balanced' in line]
    assert verdicts, out
    for line in verdicts:
        assert line.endswith(' met'), line


def test_boots_every_server_active_in_both_layouts(
        tmp_path: pathlib.Path) -> None:
    out = run_bench(tmp_path, 'boots', '--quick')
    rows = [line.split() for line in out.splitlines()
            if re.match(r'\s*(this driver, 3 computes|in-tree, 1 compute)'
                        r'\s+4\s', line)]
    # Each layout asked both ways; every server ACTIVE (the last column).
    assert 4 == len([r for r in rows if r[-1] == '0']), out
    assert 'in-tree time / this time' in out, out
    assert 'most time in' in out, out


def test_unknown_bench_is_refused_with_the_list(
        tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(bench_path(tmp_path)))
    proc = subprocess.run([sys.executable, '-m', 'bench', 'nope'],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert 2 == proc.returncode
    assert ('usage: python -m bench '
            '{rings,scale,churn,fleet,shards,period,boots}' in proc.stderr)
