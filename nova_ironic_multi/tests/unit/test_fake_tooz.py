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
"""The fake tooz back end answers as tooz's Redis driver does.

One scenario of calls and faults runs against a Redis server of its own
and against :mod:`fixtures.fake_tooz`; the answers must be the same. Then
the tooz plugin heals on the fake as it does on Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import time
from typing import Any, cast

from nova.conf import CONF
from nova import test
import pytest
import redis
import tooz
from tooz import coordination

from nova_ironic_multi import compat
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi import membership
from nova_ironic_multi.membership import toozgroup
from nova_ironic_multi.tests.fixtures import fake_tooz
from nova_ironic_multi.tests.fixtures import redis_server

GROUP = b'nim-contract'


class Faults:
    """How to make each fault happen on one kind of back end."""

    def __init__(self, connect: Callable[[bytes], Any],
                 expire: Callable[[bytes], object],
                 delete_group: Callable[[bytes], object],
                 flush: Callable[[], object]) -> None:
        self.connect = connect
        self.expire = expire
        self.delete_group = delete_group
        self.flush = flush


@pytest.fixture
def real() -> Iterator[Faults]:
    server = redis_server.RedisServer()
    url = server.start()
    client = redis.Redis.from_url(url)
    started: list[Any] = []

    def connect(member: bytes) -> Any:
        c = coordination.get_coordinator(url + '?membership_timeout=60',
                                         member)
        c.start(start_heart=False)
        started.append(c)
        return c
    yield Faults(connect,
                 lambda m: client.delete(b'_tooz_beats:' + m),
                 lambda g: client.delete(b'_tooz_group:' + g),
                 client.flushall)
    for c in started:
        c.stop()
    client.close()
    server.stop()


@pytest.fixture
def fake() -> Faults:
    backend = fake_tooz.Backend(membership_timeout=60)
    return Faults(backend.coordinator, backend.expire, backend.delete_group,
                  backend.flush)


def _answer(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        value = call().get()
    except tooz.ToozError as e:
        return (type(e).__name__,)
    if isinstance(value, dict):
        return ('ok', sorted(value.items()))
    return ('ok', value)


class _Read:
    """A group read as the membership plugin makes it, as a result."""

    def __init__(self, coordinator: Any, group: bytes) -> None:
        self.coordinator, self.group = coordinator, group

    def get(self) -> Any:
        return compat.members_with_capabilities(self.coordinator, self.group)


def scenario(f: Faults) -> list[tuple[Any, ...]]:
    a, b = f.connect(b'a'), f.connect(b'b')
    a.heartbeat()
    b.heartbeat()

    def members(group: bytes) -> _Read:
        return _Read(a, group)
    said = [
        _answer(lambda: members(GROUP)),
        _answer(lambda: a.create_group(GROUP)),
        _answer(lambda: b.create_group(GROUP)),
        _answer(lambda: a.join_group(GROUP, {'listing': True})),
        _answer(lambda: a.join_group(GROUP, {'listing': True})),
        _answer(lambda: b.join_group(GROUP, {'listing': False})),
        _answer(lambda: _Read(b, GROUP)),
        _answer(lambda: b.update_capabilities(GROUP, {'listing': True})),
        _answer(lambda: members(GROUP)),
    ]
    f.expire(b'b')
    said += [
        # b still counts itself; a drops it, for everyone.
        _answer(lambda: _Read(b, GROUP)),
        _answer(lambda: members(GROUP)),
        _answer(lambda: _Read(b, GROUP)),
        _answer(lambda: b.update_capabilities(GROUP, {'listing': True})),
        _answer(lambda: b.leave_group(GROUP)),
    ]
    f.delete_group(GROUP)
    said += [
        _answer(lambda: members(GROUP)),
        _answer(lambda: a.join_group(GROUP, {'listing': False})),
        _answer(lambda: a.update_capabilities(GROUP, {'listing': True})),
        _answer(lambda: a.leave_group(GROUP)),
        _answer(lambda: a.create_group(GROUP)),
        _answer(lambda: a.join_group(GROUP, {'listing': False})),
        _answer(lambda: members(GROUP)),
    ]
    f.flush()
    a.heartbeat()
    said += [
        _answer(lambda: members(GROUP)),
        _answer(lambda: a.create_group(GROUP)),
        _answer(lambda: a.join_group(GROUP, {'listing': False})),
        _answer(lambda: members(GROUP)),
    ]
    return said


def test_the_fake_answers_as_redis_does(real: Faults, fake: Faults) -> None:
    expected = scenario(real)
    # (The scenario is not empty talk: it met every error it means to.)
    assert {'GroupNotCreated', 'GroupAlreadyExist', 'MemberAlreadyExist',
            'MemberNotJoined'} <= {a[0] for a in expected}
    assert scenario(fake) == expected


def test_an_unreachable_fake_fails_as_a_connection() -> None:
    backend = fake_tooz.Backend()
    backend.down = True
    with pytest.raises(coordination.ToozConnectionError):
        backend.coordinator(b'a').heartbeat()


class FakeBackendHealingTest(test.TestCase):
    """The tooz plugin on the fake: a flushed back end heals."""

    def test_a_flushed_fake_heals(self) -> None:
        nim_conf.register_opts(CONF)
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url='redis://fake', tooz_group='g',
                   tooz_member_timeout=2, tooz_heartbeat_interval=0.1)
        backend = fake_tooz.Backend(membership_timeout=2)
        hosts = ('host1', 'host2')
        plugins = {}
        for host in hosts:
            plugin = cast(toozgroup.ToozMembership,
                          membership.load('tooz', CONF, host))
            plugin._connect = (  # type: ignore[method-assign]
                lambda url, member: backend.coordinator(member))
            plugin.start()
            self.addCleanup(plugin.stop)
            plugins[host] = plugin

        def views() -> dict[str, set[str]]:
            return {h: set(p.live_peers(partition_opts.resolve(CONF, h)))
                    for h, p in plugins.items()}

        def wait(expected: set[str], since: float) -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                fresh = all(p._reading is not None and p._reading.at > since
                            for p in plugins.values())
                # (Asked every time: the first question joins the group.)
                seen = views()
                if fresh and seen == {h: expected for h in hosts}:
                    return
                time.sleep(0.02)
            self.fail('never %s: %s' % (expected, views()))
        wait(set(hosts), 0.0)
        flushed = time.monotonic()
        backend.flush()
        wait(set(hosts), flushed)
        self.assertEqual(
            {'g'}, {g.decode() for g in backend.groups})
        self.assertIsInstance(plugins['host1'], toozgroup.ToozMembership)
