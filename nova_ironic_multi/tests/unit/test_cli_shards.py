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
"""``shards plan|apply`` and ``ring show``'s shards, on a fake fleet."""

from __future__ import annotations

import argparse
import collections
import io
import json
from typing import Any
from unittest import mock
import uuid

from nova.conf import ironic as nova_ironic_conf
from oslo_config import cfg
import pytest

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import main as cli
from nova_ironic_multi.cmd import ring as ring_cmd
from nova_ironic_multi.cmd import shards
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import sharding
from nova_ironic_multi import ironic as ironic_mod
from nova_ironic_multi import rings
from nova_ironic_multi.tests.unit import fake_ironic

HOSTS = ('host1', 'host2', 'host3')


def make_conf(divide: str = 'nodes',
              ring: str = 'compatible') -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    conf.set_override('divide', divide, group='ironic_multi')
    conf.set_override('ring_algorithm', ring, group='ironic_multi')
    return conf


def make_fleet(ironic: fake_ironic.FakeIronic, divide: str = 'nodes',
               instance_hosts: dict[str, str] | None = None,
               ring: str = 'compatible') -> fleet_mod.Fleet:
    part = partition_opts.resolve(make_conf(divide, ring), 'cli',
                                  observer=True)
    nodes = ironic.list_nodes(part.scope, with_shard=True)
    hosts = {h: fleet_mod.Host(h, h, True, False, False, member=True)
             for h in HOSTS}
    fleet = fleet_mod.Fleet(part, nodes, instance_hosts or {}, hosts,
                            frozenset(HOSTS), rings.load(ring, HOSTS, 5),
                            shard_counts=ironic.shards())
    fleet_mod.divide(fleet)
    return fleet


@pytest.fixture
def ironic() -> fake_ironic.FakeIronic:
    fake = fake_ironic.FakeIronic()
    for i in range(40):
        fake.add_node(str(uuid.UUID(int=i * 7919 + 1)))
    return fake


def apply(fake: fake_ironic.FakeIronic, p: shards.Plan) -> None:
    for node, _, target in p.changes:
        fake.patch(node, [{'op': 'add', 'path': '/shard', 'value': target}])


def test_labels_are_stable_and_consistent() -> None:
    nodes = [str(uuid.UUID(int=i * 104729 + 3)) for i in range(2000)]
    four = [sharding.label(n, 4) for n in nodes]
    assert four == [sharding.label(n, 4) for n in nodes]
    assert set(four) == {'shard-%d' % i for i in range(4)}
    five = [sharding.label(n, 5) for n in nodes]
    # Growing the count only moves nodes to the new shard.
    assert ({b for a, b in zip(four, five, strict=True) if a != b} ==
            {'shard-4'})
    assert 300 < sum(a != b for a, b in zip(four, five, strict=True)) < 500
    with pytest.raises(ValueError):
        sharding.label(nodes[0], 0)


def test_plan_labels_only_unsharded_nodes_and_is_idempotent(
        ironic: fake_ironic.FakeIronic) -> None:
    labelled = list(ironic.nodes)[:5]
    for node in labelled:
        ironic.nodes[node]['shard'] = 'hand-made'
    p = shards.plan(make_fleet(ironic), 4, relabel_all=False)
    assert len(p.changes) == 35
    assert not {c[0] for c in p.changes} & set(labelled)
    assert all(old is None for _, old, _ in p.changes)
    assert p.after['hand-made'] == 5
    # divide = nodes: labels move nothing now, but say what the switch
    # would move.
    assert p.moves == []
    assert p.moves_if_shards is not None and p.moves_if_shards
    apply(ironic, p)
    again = shards.plan(make_fleet(ironic), 4, relabel_all=False)
    assert again.changes == []


def test_relabel_all_replaces_every_other_label(
        ironic: fake_ironic.FakeIronic) -> None:
    for node in list(ironic.nodes)[:5]:
        ironic.nodes[node]['shard'] = 'hand-made'
    p = shards.plan(make_fleet(ironic), 4, relabel_all=True)
    assert len(p.changes) == 40
    apply(ironic, p)
    assert shards.plan(make_fleet(ironic), 4, True).changes == []
    assert 'hand-made' not in {n['shard'] for n in ironic.nodes.values()}


def test_in_shard_mode_only_free_nodes_change_hands(
        ironic: fake_ironic.FakeIronic) -> None:
    busy = list(ironic.nodes)[:6]
    owners = {}
    for i, node in enumerate(busy):
        inst = str(uuid.uuid4())
        ironic.nodes[node]['instance_uuid'] = inst
        owners[inst] = HOSTS[i % 3]
    fleet = make_fleet(ironic, 'shards', owners)
    p = shards.plan(fleet, 6, relabel_all=False)
    assert p.moves and p.moves_if_shards is None
    assert not {m[0] for m in p.moves} & set(busy)
    # What the plan says equals what the services do after the labels.
    apply(ironic, p)
    after = make_fleet(ironic, 'shards', owners)
    manager = {n: h for h, host in after.hosts.items() for n in host.managed}
    for node, _, to in p.moves:
        assert manager[node] == to


def test_run_shows_then_writes_and_reruns_clean(
        ironic: fake_ironic.FakeIronic) -> None:
    conf = make_conf()
    with mock.patch.object(fleet_mod, 'gather',
                           side_effect=lambda c, shards: make_fleet(ironic)), \
            mock.patch('nova_ironic_multi.ironic.Ironic',
                       return_value=ironic):
        out = io.StringIO()
        assert shards.run(conf, 'plan', 3, False, out, 'table') == 0
        assert 'Would label 40 node(s) among 3 shard(s)' in out.getvalue()
        assert 'Nothing written' in out.getvalue()
        assert ironic.calls_to('patch') == []
        out = io.StringIO()
        assert shards.run(conf, 'apply', 3, False, out, 'json') == 0
        data = json.loads(out.getvalue())
        assert data['applied'] and len(data['changes']) == 40
        assert len(ironic.calls_to('patch')) == 40
        out = io.StringIO()
        shards.run(conf, 'apply', 3, False, out, 'json')
        assert json.loads(out.getvalue())['changes'] == []
        assert len(ironic.calls_to('patch')) == 40
        with pytest.raises(shards.BadArgument):
            shards.run(conf, 'plan', 0, False, io.StringIO(), 'table')


def test_command_line_parses() -> None:
    parser = argparse.ArgumentParser()
    cli.add_parsers(parser.add_subparsers(dest='name'))
    args = parser.parse_args(['shards', 'apply', '--count', '8',
                              '--relabel-all', '--format', 'json'])
    assert (args.action, args.count, args.relabel_all) == ('apply', 8, True)
    with pytest.raises(SystemExit):
        parser.parse_args(['shards', 'plan'])


def test_ring_show_prints_each_hosts_shards(
        ironic: fake_ironic.FakeIronic) -> None:
    for node in ironic.nodes:
        ironic.nodes[node]['shard'] = sharding.label(node, 6)
    ironic.add_node()       # one without a shard
    fleet = make_fleet(ironic, 'shards')
    out = io.StringIO()
    ring_cmd.show(fleet, out, 'json')
    data: dict[str, Any] = json.loads(out.getvalue())['shards']
    assert data['unsharded_nodes_in_scope'] == 1
    counts = collections.Counter(n['shard'] for n in ironic.nodes.values()
                                 if n['shard'])
    listed = {s: c for per in data['by_host'].values()
              for s, c in per.items()}
    assert listed == dict(counts)
    out = io.StringIO()
    ring_cmd.show(fleet, out, 'table')
    assert 'Shards (divide = shards): 6' in out.getvalue()
    for host in HOSTS:
        assert host in out.getvalue()


def explain(fleet: fleet_mod.Fleet, node: str) -> dict[str, Any]:
    out = io.StringIO()
    assert ring_cmd.explain(fleet, node, out, 'json') == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.mark.parametrize('ring', ['compatible', 'balanced'])
def test_ring_explain_follows_the_shard(ironic: fake_ironic.FakeIronic,
                                        ring: str) -> None:
    # Issue 20.7: in shard mode explain followed the node ring, and said
    # "at capacity" on the compatible ring, which has no capacity.
    for node in ironic.nodes:
        ironic.nodes[node]['shard'] = sharding.label(node, 6)
    unsharded = ironic.add_node(str(uuid.UUID(int=99)))
    fleet = make_fleet(ironic, 'shards', ring=ring)
    counts = ironic.shards()
    weighted = ring in sharding.WEIGHTED
    assignment = sharding.assign(rings.load(ring, HOSTS, 5), counts,
                                 weighted)
    node_ring = rings.load(ring, HOSTS, 5)
    # Nodes the node ring would give another host than their shard's.
    astray = [n for n in ironic.nodes if n != unsharded and
              node_ring.owners(n, 1)[0] !=
              assignment[ironic.nodes[n]['shard']]]
    assert astray
    for node in astray:
        shard = ironic.nodes[node]['shard']
        owner = assignment[shard]
        result = explain(fleet, node)
        assert result['owner'] == owner == fleet.manager(node)
        assert ('free node of shard %r, and the %s ring gives that shard '
                'to %s' % (shard, ring, owner)) in result['reason']
        assert 'at capacity' not in result['reason']
        if not weighted:
            assert 'first choice' not in result['reason']
        # Who takes the shard if its host leaves: the shards placed again.
        others = [h for h in HOSTS if h != owner]
        then = sharding.assign(rings.load(ring, others, 5), counts,
                               weighted)[shard]
        rest = [h for h in others if h != then]
        assert result['successors'] == [then] + rest
        assert result['shard'] == shard
    result = explain(fleet, unsharded)
    assert 'free node without a shard' in result['reason']
    assert result['owner'] == fleet.manager(unsharded)


class Flaky(fake_ironic.FakeIronic):
    """Fails the PATCHes whose (1-based) turn is in ``failing``."""

    def __init__(self, failing: dict[int, Exception]) -> None:
        super().__init__()
        self.failing = failing
        self.turn = 0

    def patch(self, node_uuid: str, patch: list[dict[str, Any]]) -> None:
        self.turn += 1
        error = self.failing.get(self.turn)
        if error is not None:
            self._record('patch', node_uuid, patch)
            raise error
        super().patch(node_uuid, patch)


def run_apply(fake: fake_ironic.FakeIronic, fmt: str) -> tuple[int, str]:
    with mock.patch.object(fleet_mod, 'gather',
                           side_effect=lambda c, shards: make_fleet(fake)), \
            mock.patch('nova_ironic_multi.ironic.Ironic', return_value=fake):
        out = io.StringIO()
        code = shards.run(make_conf(), 'apply', 3, False, out, fmt)
        return code, out.getvalue()


def labelled(fake: fake_ironic.FakeIronic) -> set[str]:
    return {u for u, n in fake.nodes.items() if n['shard'] is not None}


def test_apply_stopped_midway_says_what_it_wrote_and_a_rerun_finishes(
        ) -> None:
    # Issue 20.10: a PATCH failing midway printed "Cannot read the fleet".
    fake = Flaky({15: ironic_mod.IronicUnavailable('503 Service Unavailable')})
    for i in range(40):
        fake.add_node(str(uuid.UUID(int=i * 7919 + 1)))
    code, text = run_apply(fake, 'table')
    assert code == 1
    order = [c[0] for c in fake.calls_to('patch')]
    assert len(order) == 15            # nothing tried after Ironic failed
    assert labelled(fake) == set(order[:14])
    assert 'Cannot read the fleet' not in text
    assert 'Labelled 14 of 40 node(s) among 3 shard(s)' in text
    assert 'FAILED: 14 of 40 label(s) written, 1 not written, 25 not ' \
        'attempted.' in text
    # Bounded: 20 written nodes named, then a count.
    assert 'Written (14): %s\n' % ', '.join(order[:14]) in text
    assert '  %s -> shard-' % order[14] in text
    assert '503 Service Unavailable' in text
    rest = [n for n in fake.nodes if n not in order]
    assert 'Not attempted (25; the last error would repeat): %s ... and 5 ' \
        'more' % ', '.join(rest[:20]) in text

    # A re-run writes only the rest, and then there is nothing left.
    code, out = run_apply(fake, 'json')
    data = json.loads(out)
    assert (code, data['applied'], data['written']) == (0, True, 26)
    assert len(fake.calls_to('patch')) == 15 + 26
    assert labelled(fake) == set(fake.nodes)
    code, out = run_apply(fake, 'json')
    assert (code, json.loads(out)['changes']) == (0, [])


def test_apply_goes_on_past_a_locked_node() -> None:
    fake = Flaky({3: ironic_mod.Conflict('Node is locked'),
                  7: ironic_mod.NodeNotFound('Node gone')})
    for i in range(12):
        fake.add_node(str(uuid.UUID(int=i * 7919 + 1)))
    code, out = run_apply(fake, 'json')
    data = json.loads(out)
    order = [c[0] for c in fake.calls_to('patch')]
    assert code == 1 and not data['applied']
    assert (data['written'], data['not_written'], data['not_attempted']) == (
        10, 2, 0)
    assert [f['node'] for f in data['not_written_nodes']] == [order[2],
                                                              order[6]]
    assert data['not_written_nodes'][0]['error'] == 'Node is locked'
    assert labelled(fake) == set(order) - {order[2], order[6]}
    code, out = run_apply(fake, 'json')
    assert (code, json.loads(out)['written']) == (0, 2)
    assert labelled(fake) == set(fake.nodes)
