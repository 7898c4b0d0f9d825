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
"""Rings are cached per member set; a steady period reuses its answer."""

from __future__ import annotations

import threading
import uuid

import pytest

from nova_ironic_multi import loader
from nova_ironic_multi import rings
from nova_ironic_multi.rings import compatible


def test_same_members_in_any_order_reuse_one_ring() -> None:
    cache = rings.RingCache()
    ring = cache.get('compatible', ['b', 'a'], 5)
    assert cache.get('compatible', ('a', 'b'), 5) is ring
    assert cache.get('compatible', {'a', 'b', 'c'}, 5) is not ring
    assert cache.get('compatible', ['a', 'b'], 6) is not ring
    assert cache.get('balanced', ['a', 'b'], 5) is not ring
    assert isinstance(ring, compatible.CompatibleRing)


def test_cache_is_bounded() -> None:
    cache = rings.RingCache(size=2)
    first = cache.get('compatible', ['a'], 5)
    cache.get('compatible', ['b'], 5)
    cache.get('compatible', ['c'], 5)
    assert cache.get('compatible', ['a'], 5) is not first


def test_unknown_algorithm_names_the_option_and_the_choices() -> None:
    with pytest.raises(loader.PluginNotFound) as e:
        rings.RingCache().get('roundrobin', ['a'], 5)
    msg = str(e.value)
    assert '[ironic_multi] ring_algorithm' in msg
    assert 'balanced' in msg and 'compatible' in msg


def test_steady_period_is_served_from_the_memo() -> None:
    nodes = [str(uuid.uuid4()) for _ in range(50_000)]
    members = ['host%d' % i for i in range(100)]
    cache = rings.RingCache()
    first = cache.select('compatible', members, 5, nodes, 'host7')
    again = [str(uuid.UUID(n)) for n in nodes]  # equal, not identical
    second = cache.select('compatible', members, 5, again, 'host7')
    # The very same list object: nothing was recomputed.
    assert second is first


def test_a_changed_node_set_is_recomputed() -> None:
    cache = rings.RingCache()
    nodes = [str(uuid.uuid4()) for _ in range(100)]
    first = cache.select('compatible', ['a', 'b'], 5, nodes, 'a')
    more = nodes + [str(uuid.uuid4()) for _ in range(100)]
    second = cache.select('compatible', ['a', 'b'], 5, more, 'a')
    # Adding nodes never moves existing ones on the compatible ring.
    assert set(first) <= set(second)
    assert second == compatible.CompatibleRing(['a', 'b'], 5).select(
        more, 'a')


def test_concurrent_readers_get_one_ring_per_member_set() -> None:
    cache = rings.RingCache()
    seen: list[object] = []
    barrier = threading.Barrier(8)

    def reader() -> None:
        barrier.wait()
        for _ in range(50):
            seen.append(cache.get('balanced', ['x', 'y', 'z'], 4))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in seen}) == 1
