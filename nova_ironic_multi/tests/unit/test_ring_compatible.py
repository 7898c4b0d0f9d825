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
"""The compatible ring is nova's in-tree mapping, node for node."""

from __future__ import annotations

import random
import uuid

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest
from tooz import hashring

from nova_ironic_multi.rings import compatible

SAMPLE = 100_000


def random_uuids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4))
            for _ in range(n)]


@pytest.fixture(scope='module')
def sample() -> list[str]:
    return random_uuids(SAMPLE, seed=20161107)


def tooz_owner(ring: hashring.HashRing, node: str) -> str:
    (owner,) = ring.get_nodes(node.encode('utf-8'))
    return str(owner)


@pytest.mark.parametrize('exponent', [5, 6, 7, 8])
@pytest.mark.parametrize('n_members', [1, 2, 3, 10, 57, 200])
def test_identical_to_tooz_on_100k_uuids(
        sample: list[str], n_members: int, exponent: int) -> None:
    members = ['compute-%03d.example.org' % i for i in range(n_members)]
    reference = hashring.HashRing(members, partitions=2 ** exponent)
    ours = compatible.CompatibleRing(members, exponent).assign(sample)
    mismatches = [n for n in sample if ours[n] != tooz_owner(reference, n)]
    assert mismatches == []


def test_in_tree_driver_mapping_at_its_default_exponent() -> None:
    # nova's driver: HashRing(services, partitions=2**5), lower-cased hosts,
    # and "host in ring.get_nodes(node.uuid.encode('utf-8'))".
    hosts = {'host1', 'host2', 'host3'}
    reference = hashring.HashRing(hosts, partitions=32)
    ring = compatible.CompatibleRing(hosts, 5)
    nodes = random_uuids(3000, seed=5)
    for host in hosts:
        in_tree = [n for n in nodes
                   if host in reference.get_nodes(n.encode('utf-8'))]
        assert ring.select(nodes, host) == in_tree


@settings(max_examples=200, deadline=None)
@given(members=st.sets(st.text(min_size=1, max_size=20), min_size=1,
                       max_size=12),
       node=st.uuids().map(str),
       exponent=st.integers(min_value=1, max_value=6),
       replicas=st.integers(min_value=1, max_value=14))
def test_owners_are_tooz_replicas_in_ring_order(
        members: set[str], node: str, exponent: int, replicas: int) -> None:
    reference = hashring.HashRing(members, partitions=2 ** exponent)
    ring = compatible.CompatibleRing(members, exponent)
    owners = ring.owners(node, replicas)
    assert len(owners) == min(replicas, len(members))
    assert len(set(owners)) == len(owners)
    assert set(owners) == reference.get_nodes(node.encode('utf-8'),
                                              replicas=replicas)
    assert owners[0] == ring.assign([node])[node]


@settings(max_examples=100, deadline=None)
@given(node=st.text(min_size=1, max_size=40))
def test_any_node_name_maps_like_tooz(node: str) -> None:
    members = ['a', 'b', 'c', 'd']
    reference = hashring.HashRing(members, partitions=32)
    ring = compatible.CompatibleRing(members, 5)
    assert ring.assign([node])[node] == tooz_owner(reference, node)


def test_no_members_manage_nothing() -> None:
    ring = compatible.CompatibleRing([], 5)
    assert ring.assign(['a', 'b']) == {}
    assert ring.owners('a', 3) == []
    assert ring.select(['a'], 'x') == []


def test_select_for_a_stranger_is_empty() -> None:
    ring = compatible.CompatibleRing(['a', 'b'], 5)
    assert ring.select(random_uuids(10, 1), 'c') == []


def test_owners_returns_at_most_n() -> None:
    ring = compatible.CompatibleRing(['h1', 'h2', 'h3'], 5)
    node = '2e3c6a3a-2f7e-4a4b-9d5c-0d1b5c8e7f60'
    assert ring.owners(node, 0) == []
    assert len(ring.owners(node, 2)) == 2
    assert sorted(ring.owners(node, 9)) == ['h1', 'h2', 'h3']
