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
"""The three ownership rules, as properties over random fleets."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from oslo_config import cfg
import pytest

from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi import rings


@dataclasses.dataclass(frozen=True)
class Node:
    uuid: str
    instance_uuid: str | None = None
    conductor_group: str | None = None
    shard: str | None = None


GROUPS = [None, '', 'rack-a', 'RACK-B']
SHARDS = [None, 's1', 's2']


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Node], dict[str, str], list[str]]:
    """Nodes, instance -> host (nova's view), and the live members."""
    hosts = draw(st.lists(st.sampled_from(
        ['host1', 'host2', 'host3', 'host4', 'host5']), min_size=1,
        max_size=5, unique=True))
    instance_host: dict[str, str] = {}
    nodes = []
    for i in range(draw(st.integers(0, 60))):
        instance = None
        if draw(st.booleans()):
            instance = 'inst-%d' % i
            # Instances may sit on hosts that are not (or no longer) live.
            instance_host[instance] = draw(st.sampled_from(
                hosts + ['gone-host']))
        nodes.append(Node(
            uuid=str(draw(st.uuids())), instance_uuid=instance,
            conductor_group=draw(st.sampled_from(GROUPS)),
            shard=draw(st.sampled_from(SHARDS))))
    return nodes, instance_host, hosts


scopes = st.builds(partition.Scope,
                   conductor_group=st.sampled_from([None, '', 'rack-a',
                                                    'rack-b']),
                   shard=st.sampled_from([None, 's1']))


def divide(nodes: list[Node], instance_host: dict[str, str],
           members: list[str], scope: partition.Scope,
           algorithm: str) -> dict[str, frozenset[str]]:
    ring = rings.load(algorithm, members, 3)
    result = {}
    for host in members:
        mine = {i for i, h in instance_host.items() if h == host}
        result[host] = ownership.select(
            nodes, mine, ring.select, host, scope).owned
    return result


ALGORITHMS = ['compatible', 'balanced']


@pytest.mark.parametrize('algorithm', ALGORITHMS)
@settings(max_examples=150, deadline=None)
@given(fleet=fleets(), scope=scopes)
def test_a_every_free_in_scope_node_has_exactly_one_owner(
        algorithm: str, fleet: tuple[list[Node], dict[str, str], list[str]],
        scope: partition.Scope) -> None:
    nodes, instance_host, members = fleet
    owned = divide(nodes, instance_host, members, scope, algorithm)
    for node in nodes:
        if node.instance_uuid is None and scope.contains(
                node.conductor_group, node.shard):
            owners = [h for h, o in owned.items() if node.uuid in o]
            assert len(owners) == 1, (node, owners)


@pytest.mark.parametrize('algorithm', ALGORITHMS)
@settings(max_examples=150, deadline=None)
@given(fleet=fleets(), scope=scopes)
def test_b_a_node_with_an_instance_is_owned_only_by_its_instance_host(
        algorithm: str, fleet: tuple[list[Node], dict[str, str], list[str]],
        scope: partition.Scope) -> None:
    nodes, instance_host, members = fleet
    owned = divide(nodes, instance_host, members, scope, algorithm)
    for node in nodes:
        if node.instance_uuid is None:
            continue
        owners = {h for h, o in owned.items() if node.uuid in o}
        expected = {instance_host[node.instance_uuid]} & set(members)
        if not scope.contains(node.conductor_group, node.shard):
            expected = set()
        assert owners == expected


@pytest.mark.parametrize('algorithm', ALGORITHMS)
@settings(max_examples=150, deadline=None)
@given(fleet=fleets(), scope=scopes)
def test_c_out_of_scope_nodes_are_never_owned(
        algorithm: str, fleet: tuple[list[Node], dict[str, str], list[str]],
        scope: partition.Scope) -> None:
    nodes, instance_host, members = fleet
    owned = divide(nodes, instance_host, members, scope, algorithm)
    outside = {n.uuid for n in nodes
               if not scope.contains(n.conductor_group, n.shard)}
    for host_owned in owned.values():
        assert not host_owned & outside


@pytest.mark.parametrize('algorithm', ALGORITHMS)
@settings(max_examples=100, deadline=None)
@given(fleet=fleets(), scope=scopes, shuffler=st.randoms())
def test_d_input_order_never_changes_the_result(
        algorithm: str, fleet: tuple[list[Node], dict[str, str], list[str]],
        scope: partition.Scope, shuffler: random.Random) -> None:
    nodes, instance_host, members = fleet
    expected = divide(nodes, instance_host, members, scope, algorithm)
    nodes, members = list(nodes), list(members)
    shuffler.shuffle(nodes)
    shuffler.shuffle(members)
    assert divide(nodes, instance_host, members, scope,
                  algorithm) == expected


def test_division_counts_what_was_skipped() -> None:
    nodes = [Node('a'), Node('b', 'i-mine'), Node('c', 'i-other'),
             Node('d', conductor_group='elsewhere')]
    ring = rings.load('compatible', ['me'], 5)
    div = ownership.select(nodes, {'i-mine'}, ring.select, 'me',
                           partition.Scope(conductor_group=''))
    assert div.owned == {'a', 'b'}
    assert (div.with_instance, div.foreign, div.out_of_scope, div.free) == (
        1, 1, 1, 1)


def test_regression_1866380_host_name_case_does_not_split_the_ring() -> None:
    # Upstream mixed 'Host1' (nova's service host) and 'host1' in the ring:
    # two services each thought the other owned some nodes. Partition
    # resolution lower-cases this host, membership lower-cases peers, so
    # every service builds the same ring whatever case each host uses.
    nodes = [Node('%08d-0000-4000-8000-000000000000' % i) for i in range(300)]
    part_upper = partition_opts.resolve(_conf(['Host1', 'HOST2']), 'Host1')
    part_lower = partition_opts.resolve(_conf(['host1', 'host2']), 'HOST2')
    members = sorted(part_upper.peers or ())
    assert members == sorted(part_lower.peers or ()) == ['host1', 'host2']
    ring = rings.load('compatible', members, 5)
    mine1 = ownership.select(nodes, set(), ring.select, part_upper.host,
                             part_upper.scope).owned
    mine2 = ownership.select(nodes, set(), ring.select, part_lower.host,
                             part_lower.scope).owned
    assert mine1 | mine2 == {n.uuid for n in nodes}
    assert not mine1 & mine2


def _conf(peers: list[str]) -> cfg.ConfigOpts:
    from nova.conf import ironic as nova_ironic_conf

    from nova_ironic_multi import conf as nim_conf
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    conf.set_override('peer_list', peers, group='ironic_multi')
    return conf


def _managers(nodes: list[Node], instance_host: dict[str, str],
              members: list[str], algorithm: str) -> dict[str, str]:
    """node uuid -> the host that manages it (each node has at most one)."""
    managed = divide(nodes, instance_host, members, partition.Scope(),
                     algorithm)
    return {u: h for h, owned in managed.items() for u in owned}


@pytest.mark.parametrize('algorithm', ALGORITHMS)
def test_a_boot_or_delete_never_moves_another_node(algorithm: str) -> None:
    # 1000 nodes over 10 hosts, a third of them deployed: every boot and
    # every delete leaves every other node with the host it had. (With the
    # ring fed only free nodes the balanced ring moved ~1.8 nodes a boot.)
    rnd = random.Random(5)
    members = ['host%d' % i for i in range(10)]
    nodes = [Node(uuid='%032x' % rnd.getrandbits(128)) for _ in range(1000)]
    instance_host: dict[str, str] = {}
    for i in range(0, 1000, 3):
        nodes[i] = dataclasses.replace(nodes[i], instance_uuid='i-%d' % i)
        instance_host['i-%d' % i] = rnd.choice(members)
    before = _managers(nodes, instance_host, members, algorithm)
    moved = 0
    for step in range(40):
        i = rnd.randrange(len(nodes))
        node = nodes[i]
        if node.instance_uuid is None:      # boot on the node's manager
            instance = 'boot-%d' % step
            instance_host[instance] = before[node.uuid]
            nodes[i] = dataclasses.replace(node, instance_uuid=instance)
        else:                                # delete
            instance_host.pop(node.instance_uuid)
            nodes[i] = dataclasses.replace(node, instance_uuid=None)
        after = _managers(nodes, instance_host, members, algorithm)
        moved += sum(1 for u, h in before.items()
                     if u != node.uuid and u in after and after[u] != h)
        before = after
    assert moved == 0
