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
"""tooz membership heals from the faults of a real Redis and a real etcd.

Three hosts' plugins share a server this test starts for itself (so it
can delete its keys, flush it and restart it): Redis, and etcd through
``etcd3gw`` (devstack's ``etcd3`` service, the coordination back end most
OpenStack deployments run). After each fault, within a bounded time, every
host reads the same members and every free node has exactly one manager.
The time each fault took to heal is printed (the operations guide quotes
it).
"""

from __future__ import annotations

from collections.abc import Callable
import threading
import time
from typing import Any

import etcd3gw
from nova.conf import CONF
from nova import test
import redis

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import partition
from nova_ironic_multi import membership
from nova_ironic_multi.membership import toozgroup
from nova_ironic_multi.tests.fixtures import etcd_server
from nova_ironic_multi.tests.fixtures import redis_server
from nova_ironic_multi.tests.unit import test_membership

HOSTS = ('host1', 'host2', 'host3')
GROUP = 'nim-faults'
HEARTBEAT = 0.2
MEMBER_TIMEOUT = 2
#: The bound on healing: a member timeout and a few heartbeats, with room
#: for a busy test machine.
HEAL_BOUND = MEMBER_TIMEOUT + 10 * HEARTBEAT + 5.0


class Gate:
    """Holds a plugin's background thread at one tooz call while closed.

    Wraps the real coordinator; every other call goes straight through.
    """

    def __init__(self, coordinator: Any, held: str) -> None:
        self._coordinator = coordinator
        self._held = held
        self.open = threading.Event()
        self.open.set()
        #: Set once the thread waits at the gate.
        self.waiting = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._coordinator, name)
        if name != self._held:
            return attr

        def held(*args: Any, **kwargs: Any) -> Any:
            if not self.open.is_set():
                self.waiting.set()
                self.open.wait()
            return attr(*args, **kwargs)
        return held


class ToozFaults(test.TestCase):
    """The faults and their healing, on the back end a subclass starts."""

    __test__ = False

    #: How the back end comes back from a restart (for the printed line).
    RESTARTED = ''

    def start_backend(self) -> str:
        """Start the back end; its tooz URL."""
        raise NotImplementedError

    def lose_group(self) -> None:
        """Delete the group's keys, members and all."""
        raise NotImplementedError

    def flush(self) -> None:
        """Delete every key the back end holds."""
        raise NotImplementedError

    def restart(self) -> float:
        """Stop the back end and start it again; seconds it was away."""
        raise NotImplementedError

    def setUp(self) -> None:
        super().setUp()
        nim_conf.register_opts(CONF)
        url = self.start_backend()
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url=url, tooz_group=GROUP,
                   tooz_member_timeout=MEMBER_TIMEOUT,
                   tooz_heartbeat_interval=HEARTBEAT)
        self.gates: dict[str, Gate] = {}
        self.plugins = {h: self._plugin(h) for h in HOSTS}
        self.heal(set(HOSTS), 'start', time.monotonic())

    def _plugin(self, host: str) -> toozgroup.ToozMembership:
        plugin = membership.load('tooz', CONF, host)
        assert isinstance(plugin, toozgroup.ToozMembership)
        connect = plugin._connect

        def gated(url: str, member: bytes) -> Any:
            gate = Gate(connect(url, member), self.held.get(host, ''))
            self.gates[host] = gate
            return gate
        plugin._connect = gated  # type: ignore[method-assign]
        plugin.start()
        self.addCleanup(plugin.stop)
        return plugin

    #: Host -> the tooz call its gate can hold.
    held = {'host2': 'heartbeat'}

    def part(self, host: str) -> partition.Partition:
        return partition_opts.resolve(CONF, host)

    def views(self) -> dict[str, set[str] | None]:
        """What each host counts now (None: it cannot tell)."""
        views: dict[str, set[str] | None] = {}
        for host, plugin in self.plugins.items():
            try:
                views[host] = set(plugin.live_peers(self.part(host)))
            except membership.MembershipUnavailable:
                views[host] = None
        return views

    def wait(self, condition: Callable[[], bool],
             what: Callable[[], str]) -> float:
        """Poll ``condition`` until it holds (bounded); the time it took."""
        began = time.monotonic()
        while not condition():
            if time.monotonic() - began > HEAL_BOUND:
                self.fail('%s: not within %.1fs' % (what(), HEAL_BOUND))
            time.sleep(0.02)
        return time.monotonic() - began

    def heal(self, expected: set[str], fault: str, since: float,
             but: dict[str, Callable[[set[str] | None], bool]] | None = None
             ) -> float:
        """Until every host counts ``expected``; prints the time it took.

        Only views from readings taken after ``since`` (the fault) count:
        one before it says nothing about healing. ``but`` holds what the
        view of a host must satisfy instead.
        """
        seen: list[dict[str, set[str] | None]] = [{}]
        wanted = {h: (but or {}).get(h, lambda v: v == expected)
                  for h in HOSTS}

        def healed() -> bool:
            after = all(p._reading is not None and p._reading.at > since
                        for p in self.plugins.values())
            views = self.views()
            seen.append(views)
            return after and all(wanted[h](v) for h, v in views.items())
        self.wait(healed, lambda: '%s: every host counting %s (last %s)'
                  % (fault, sorted(expected), seen[-1]))
        took = time.monotonic() - since
        views = {h: v for h, v in seen[-1].items() if v is not None}
        test_membership.assert_every_free_node_has_one_manager(self, views)
        print('tooz fault %r healed in %.2fs' % (fault, took))
        return took

    def raw(self, host: str) -> frozenset[str]:
        reading = self.plugins[host]._reading
        return reading.members if reading is not None else frozenset()

    def test_a_stalled_host_rejoins_and_everyone_converges(self) -> None:
        # Its heartbeats held past the member timeout (a long GC pause, a
        # stopped process): its peers drop it, as they should.
        gate = self.gates['host2']
        gate.open.clear()
        self.assertTrue(gate.waiting.wait(HEAL_BOUND))
        self.wait(lambda: all('host2' not in self.raw(h)
                              for h in ('host1', 'host3')),
                  lambda: 'peers dropping the stalled host2')
        rejoins = self.plugins['host2'].rejoins
        resumed = time.monotonic()
        gate.open.set()
        # Before the fix host2 never rejoined: it counted {host1, host2}
        # and the others {host1, host3}.
        self.heal(set(HOSTS), 'heartbeats stalled past the member timeout',
                  resumed)
        self.assertGreater(self.plugins['host2'].rejoins, rejoins)

    def test_a_lost_group_is_created_again(self) -> None:
        # What a Redis restart without persistence does to the group.
        lost = time.monotonic()
        self.lose_group()
        self.heal(set(HOSTS), 'group key deleted', lost)

    def test_a_host_counts_itself_out_until_it_is_back(self) -> None:
        # host2 cannot join again for a while: it reads that it is missing
        # and claims no free node; its peers divide without it. Nobody
        # manages a node twice meanwhile.
        self.held = {'host2': 'join_group'}
        self.plugins['host2'].stop()
        self.plugins['host2'] = self._plugin('host2')
        self.heal(set(HOSTS), 'host2 restarted', time.monotonic())
        gate = self.gates['host2']
        gate.open.clear()
        lost = time.monotonic()
        self.lose_group()
        self.assertTrue(gate.waiting.wait(HEAL_BOUND))
        # Its last reading did not show it: it counts itself out, never in.
        self.heal({'host1', 'host3'}, 'host2 held out of the lost group',
                  lost, but={'host2': lambda v: v is not None and
                             'host2' not in v})
        back = time.monotonic()
        gate.open.set()
        self.heal(set(HOSTS), 'host2 let back in', back)

    def test_a_flushed_backend_heals(self) -> None:
        flushed = time.monotonic()
        self.flush()
        self.heal(set(HOSTS), 'every key deleted', flushed)

    def test_a_restarted_backend_heals(self) -> None:
        stopped = time.monotonic()
        away = self.restart()
        print('the back end was away for %.2fs' % away)
        self.heal(set(HOSTS), 'restarted %s' % self.RESTARTED, stopped)


class RedisFaultsTest(ToozFaults):

    __test__ = True

    RESTARTED = 'empty (from its stop)'

    def start_backend(self) -> str:
        self.redis = redis_server.RedisServer()
        url = self.redis.start()
        self.addCleanup(self.redis.stop)
        self.client = redis.Redis.from_url(url)
        self.addCleanup(self.client.close)
        return url

    def lose_group(self) -> None:
        keys = list(self.client.scan_iter('*%s*' % GROUP))
        self.assertTrue(keys)
        self.client.delete(*keys)

    def flush(self) -> None:
        self.client.flushall()

    def restart(self) -> float:
        return self.redis.restart()


class EtcdFaultsTest(ToozFaults):

    __test__ = True

    RESTARTED = 'on its data'
    #: Where tooz's etcd driver keeps the group's members.
    PREFIX = 'tooz/groups/%s/' % GROUP

    def start_backend(self) -> str:
        self.etcd = etcd_server.EtcdServer()
        self.addCleanup(self.etcd.discard)
        url = self.etcd.start()
        self.client = etcd3gw.client(host='127.0.0.1', port=self.etcd.port)
        return url

    def lose_group(self) -> None:
        self.assertTrue(self.client.get_prefix(self.PREFIX))
        self.client.delete_prefix(self.PREFIX)

    def flush(self) -> None:
        self.client.delete_prefix('tooz/')

    def restart(self) -> float:
        return self.etcd.restart()

    def test_a_revoked_lease_heals(self) -> None:
        # etcd's own way to lose a member: its lease revoked (or expired
        # while the member was cut off); its keys go with it.
        (_, meta), = [m for m in self.client.get_prefix(self.PREFIX)
                      if m[1]['key'].endswith(b'host2')]
        revoked = time.monotonic()
        etcd3gw.Lease(int(meta['lease']), self.client).revoke()
        self.heal(set(HOSTS), 'host2\'s lease revoked', revoked)
