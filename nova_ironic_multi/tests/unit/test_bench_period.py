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
"""``bench period`` at a tiny size, so the benchmark cannot rot unseen.

The benchmark drives nova's own compute manager, resource tracker and
report client, nova's placement fixture and a real Ironic: a nova or
placement change that breaks it shows here, not months later when someone
sizes a fleet with it. Both drivers run every kind of period on 3 nodes
(a first start made of one real node and two copies, as the larger node
counts are made), in a process of its own: the benchmark configures nova's
global options as a nova-compute does.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from nova_ironic_multi.tests.unit.test_benches import bench_path


def run_bench(tmp_path: pathlib.Path, *args: str) -> tuple[str, list[Any]]:
    path = bench_path(tmp_path)
    out = tmp_path / 'periods.json'
    env = dict(os.environ, PYTHONPATH=str(path),
               OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'bench', 'period', '--json', str(out), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_every_period_of_both_drivers_handles_every_node(
        tmp_path: pathlib.Path) -> None:
    stdout, runs = run_bench(tmp_path, '--nodes', '3', '--steady', '1',
                             '--workers', '2', '--clone-above', '1',
                             '--seed', '1')
    kinds = sorted({(r['driver'], r['kind'], r['workers']) for r in runs})
    expected = [(d, k, 1) for d in ('ours', 'in-tree')
                for k in ('restart', 'steady', 'refresh')]
    expected += [(d, k, 2) for d in ('ours', 'in-tree')
                 for k in ('steady', 'refresh')]
    # One first start, by the first driver, on the one real node.
    assert sorted(expected + [('ours', 'first start', 1)]) == kinds
    for r in runs:
        nodes = 1 if r['kind'] == 'first start' else 3
        assert nodes == r['nodes'], r
        # Every node went through the driver and placement.
        assert nodes == r['methods']['driver get_available_resource'][
            'calls'], r
        assert nodes == r['methods']['driver update_provider_tree'][
            'calls'], r
        assert r['placement_requests'].get('GET', 0) >= 2 * nodes, r
        assert r['parts']['driver']['cpu'] > 0, r
        assert r['cpu'] > r['parts']['placement']['cpu'], r
    steady = [r for r in runs if r['kind'] == 'steady']
    refresh = [r for r in runs if r['kind'] == 'refresh']
    for r in steady:
        # Nothing changed: nova reads, and writes nothing anywhere.
        assert {} == {db: n for db, n in r['writes'].items() if n}, r
        # Two GETs of each provider's allocations, and this driver's one
        # look at the hosts' trait markers per period.
        assert 6 <= r['placement_requests']['GET'] <= 7, r
        assert ['GET'] == list(r['placement_requests']), r
    for r in refresh:
        # The provider tree, inventories, aggregates and traits again, for
        # every provider.
        assert 6 + 4 * 3 <= r['placement_requests']['GET'] <= 7 + 4 * 3, r
    # The restart of the node counts made of copies writes what a restart
    # writes: one compute node save each, nothing to placement.
    for r in runs:
        if r['kind'] == 'restart':
            assert {'nova': 3} == {db: n for db, n in r['writes'].items()
                                   if n}, r
    assert "nova's update_available_resource on one host" in stdout
    for driver in ('ours', 'in-tree'):
        assert ('nodes per host that fit a 60 s period, %s (measured at 3 '
                'nodes)' % driver) in stdout
    assert 'anchor ~9' in stdout
    for fleet in ('1000', '10000', '100000'):
        assert '\n  %s nodes: ours, divide = shards: ' % fleet in stdout

    # A run without a refresh period (a large count alone) says why it
    # gives no sizing, instead of printing empty lines.
    lean = tmp_path / 'lean.json'
    lean.write_text(json.dumps([r for r in runs if r['kind'] != 'refresh']))
    proc = subprocess.run(
        [sys.executable, '-m', 'bench', 'period', '--from-json', str(lean)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(tmp_path / 'path'),
                 OS_NOVA_DISABLE_EVENTLET_PATCHING='1'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ('nodes per host that fit a 60 s period: no figures'
            in proc.stdout), proc.stdout
    assert '\n  no figures: sizing needs a refresh period' in proc.stdout
    assert 'divide = shards' not in proc.stdout


def test_bad_options_are_named(tmp_path: pathlib.Path,
                               monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(bench_path(tmp_path)))
    from bench import period
    for args, message in (
            (['--drivers', 'libvirt'],
             '--drivers: libvirt; choose from ours, in-tree'),
            (['--nodes', '1000,x'],
             '--nodes and --workers take comma-separated integers'),
            (['--workers', '0'], '--nodes, --workers, --steady and --seed '
             'must be at least 1')):
        with pytest.raises(SystemExit) as exit:
            period.parse(args)
        assert 2 == exit.value.code
        assert message in capsys.readouterr().err
