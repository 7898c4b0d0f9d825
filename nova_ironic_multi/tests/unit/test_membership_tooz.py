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
"""tooz membership against the machine's real Redis."""

from __future__ import annotations

from collections.abc import Callable
import os
import signal
import subprocess
import sys
import time
from typing import Any, cast, NoReturn
import uuid

from nova.conf import CONF
from nova import context as nova_context
from nova import objects
from nova import test
import redis

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import partition
from nova_ironic_multi import membership
from nova_ironic_multi.membership import toozgroup
from nova_ironic_multi.tests.unit import test_membership

REDIS_URL = os.environ.get('NIM_REDIS_URL', 'redis://127.0.0.1:6379')

# A peer in its own process: joins the group through the plugin's background
# thread, says "ready" once it has read the group, then waits to be killed.
PEER_SCRIPT = """
import sys, time
from oslo_config import cfg
from nova_ironic_multi import conf
from nova_ironic_multi.division import partition
from nova_ironic_multi.membership import toozgroup
c = cfg.ConfigOpts()
conf.register_opts(c)
c.set_override('tooz_backend_url', sys.argv[1], 'ironic_multi')
c.set_override('tooz_group', sys.argv[2], 'ironic_multi')
c.set_override('tooz_member_timeout', 2, 'ironic_multi')
c.set_override('tooz_heartbeat_interval', 0.3, 'ironic_multi')
peer = toozgroup.ToozMembership(c, 'host2')
peer._want = toozgroup.group_name(sys.argv[2], partition.Scope())
peer.start()
while peer._reading is None:
    time.sleep(0.05)
print('ready', flush=True)
time.sleep(600)
"""


class ToozTestBase(test.TestCase):

    # nova's test classes are Any to mypy (nova has no type information):
    # fail() raises, as unittest's does.
    fail: Callable[..., NoReturn]

    def setUp(self) -> None:
        super().setUp()
        nim_conf.register_opts(CONF)
        self.group = 'nim-test-%s' % uuid.uuid4().hex
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url=REDIS_URL, tooz_group=self.group,
                   tooz_member_timeout=2, tooz_heartbeat_interval=0.3)
        self.plugins: list[membership.Membership] = []
        self.addCleanup(self._cleanup_redis)

    def _cleanup_redis(self) -> None:
        for plugin in self.plugins:
            plugin.stop()
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter('*%s*' % self.group):
            client.delete(key)
        for plugin in self.plugins:
            client.delete('_tooz_beats:%s' % plugin.host.lower())

    def member(self, host: str) -> toozgroup.ToozMembership:
        plugin = cast(toozgroup.ToozMembership,
                      membership.load('tooz', CONF, host))
        self.plugins.append(plugin)
        return plugin

    def part(self, host: str, key: str | None = None) -> partition.Partition:
        self.flags(group='ironic_multi', partition_key=key)
        return partition_opts.resolve(CONF, host)

    def wait_for(self, plugin: membership.Membership,
                 part: partition.Partition, expected: set[str],
                 timeout: float = 10.0) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if set(plugin.live_peers(part)) == expected:
                return time.monotonic() - start
            time.sleep(0.1)
        self.fail('peers never became %s, last %s'
                  % (expected, set(plugin.live_peers(part))))



class ToozMembershipTest(ToozTestBase):

    def test_members_see_each_other_lower_cased(self) -> None:
        one, two = self.member('Host1'), self.member('host2')
        self.assertEqual({'host1'}, set(one.live_peers(self.part('Host1'))))
        two.live_peers(self.part('host2'))
        self.wait_for(one, self.part('Host1'), {'host1', 'host2'})

    def test_an_observer_reads_the_group_but_never_joins_it(self) -> None:
        # The CLI looks with observer=True: a member it joined would be
        # handed nodes by every service during that moment.
        one = self.member('host1')
        one.live_peers(self.part('host1'))
        cli = membership.load('tooz', CONF, 'cli', observer=True)
        self.plugins.append(cli)
        self.assertEqual({'host1'}, set(cli.observe(self.part('cli'))))
        # An observer that joined did so before its reading, so before
        # host2 joins now: once host1 sees host2, it would see the CLI.
        self.member('host2').live_peers(self.part('host2'))
        self.wait_for(one, self.part('host1'), {'host1', 'host2'})

    def test_a_killed_member_leaves_within_the_member_timeout(self) -> None:
        one = self.member('host1')
        # host2 is a separate process, killed with SIGKILL: no goodbye.
        child = subprocess.Popen(
            [sys.executable, '-c', PEER_SCRIPT, REDIS_URL, self.group],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        assert child.stdout is not None
        self.assertEqual('ready', child.stdout.readline().strip())
        self.wait_for(one, self.part('host1'), {'host1', 'host2'})
        child.send_signal(signal.SIGKILL)
        took = self.wait_for(one, self.part('host1'), {'host1'})
        # tooz_member_timeout is 2 s; allow for polling and heartbeats.
        self.assertLess(took, 2 + 2 * 0.3 + 1.5)

    def test_groups_are_per_conductor_group(self) -> None:
        one, two = self.member('host1'), self.member('host2')
        two.live_peers(self.part('host2', key='rack-b'))
        # host2 joined rack-b before host3 joins rack-a: once host1 sees
        # host3 there, it would see host2 too if the groups were one.
        self.member('host3').live_peers(self.part('host3', key='rack-a'))
        self.wait_for(one, self.part('host1', key='rack-a'),
                      {'host1', 'host3'})
        # A reload that moves host1 to rack-b moves it to that group.
        self.wait_for(one, self.part('host1', key='rack-b'),
                      {'host1', 'host2'})
        self.assertEqual(
            '%s/cg=rack-b' % self.group,
            toozgroup.group_name(self.group,
                                 partition.Scope(conductor_group='rack-b')))

    def test_disabled_self_is_not_a_member(self) -> None:
        ctxt = nova_context.get_admin_context()
        objects.Service(ctxt, host='host1', binary='nova-compute',
                        topic='compute', disabled=True).create()
        one, two = self.member('host1'), self.member('host2')
        two.live_peers(self.part('host2'))
        self.wait_for(one, self.part('host1'), {'host2'})

    def test_disabled_and_forced_down_members_are_dropped_by_everyone(
            self) -> None:
        # Heartbeats alone kept a disabled host in its peers' rings while it
        # left its own: its share was managed by nobody (81 of 300 nodes).
        hosts = ('host1', 'host2', 'host3', 'host4')
        ctxt = nova_context.get_admin_context()
        for host in hosts:
            # (tooz's members are the group's: no placement marker.)
            test_membership.make_service(
                ctxt, host, marked=False, disabled=(host == 'host2'),
                forced_down=(host == 'host3'))
        plugins = {h: self.member(h) for h in hosts}
        for host, plugin in plugins.items():
            plugin.live_peers(self.part(host))
        for plugin in plugins.values():
            self.wait_for_reading(plugin, set(hosts))
        views = {h: set(p.live_peers(self.part(h)))
                 for h, p in plugins.items()}
        self.assertEqual({h: {'host1', 'host4'} for h in hosts}, views)
        test_membership.assert_every_free_node_has_one_manager(self, views)

    def wait_for_reading(self, plugin: Any, expected: set[str],
                         timeout: float = 10.0) -> None:
        """Until the raw group (before nova's facts) holds ``expected``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reading = plugin._reading
            if reading is not None and reading.members == expected:
                return
            time.sleep(0.1)
        self.fail('group never held %s' % expected)

    def test_unreachable_backend_is_reported_not_hidden(self) -> None:
        self.flags(group='ironic_multi',
                   tooz_backend_url='redis://127.0.0.1:1?socket_timeout=1')
        plugin = self.member('host1')
        start = time.monotonic()
        exc = self.assertRaises(membership.MembershipUnavailable,
                                plugin.live_peers, self.part('host1'))
        self.assertIn('no fresh reading of tooz group', str(exc))
        # The caller is not held for tooz's minute of retries.
        self.assertLess(time.monotonic() - start,
                        toozgroup.FIRST_READING_WAIT + 2)

    def test_missing_backend_url_names_the_option(self) -> None:
        self.flags(group='ironic_multi', tooz_backend_url=None)
        exc = self.assertRaises(membership.MembershipUnavailable,
                                self.member('host1').live_peers,
                                self.part('host1'))
        self.assertIn('[ironic_multi] tooz_backend_url', str(exc))

    def test_backend_url_gets_the_member_timeout(self) -> None:
        self.assertEqual('redis://h:1?membership_timeout=7',
                         toozgroup.backend_url('redis://h:1', 7))
        self.assertEqual('redis://h:1?membership_timeout=3',
                         toozgroup.backend_url(
                             'redis://h:1?membership_timeout=3', 7))


class StepAsideTest(ToozTestBase):
    """A host that cannot list Ironic gives its share away (issue 22.4)."""

    HOSTS = ('host1', 'host2', 'host3')

    def setUp(self) -> None:
        super().setUp()
        self.three = {h: self.member(h) for h in self.HOSTS}
        self.period({h: True for h in self.HOSTS})
        self.assertEqual({h: set(self.HOSTS) for h in self.HOSTS},
                         self.views())

    def views(self) -> dict[str, set[str]]:
        return {h: set(p.live_peers(self.part(h)))
                for h, p in self.three.items()}

    def period(self, listed: dict[str, bool]) -> None:
        """One period of every host, until each sees what the others said."""
        for host, ok in listed.items():
            self.three[host].listed(ok)
        for plugin in self.three.values():
            plugin.live_peers(self.part(plugin.host))
        members = {h for h, p in self.three.items() if p._taking_part}
        expected = {h for h, ok in listed.items() if ok} & members
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            readings = [p._reading for p in self.three.values()]
            if all(r is not None and r.members == members and
                   r.listing == expected for r in readings):
                return
            time.sleep(0.05)
        self.fail('the hosts never read who lists Ironic (%s): %s'
                  % (sorted(expected), readings))

    def test_a_host_that_cannot_list_leaves_and_comes_back(self) -> None:
        two = self.three['host2']
        for _ in range(toozgroup.STEP_ASIDE_AFTER - 1):
            self.period({'host1': True, 'host2': False, 'host3': True})
        self.assertEqual({h: set(self.HOSTS) for h in self.HOSTS},
                         self.views())
        with self.assertLogs('nova_ironic_multi.membership.toozgroup',
                             'WARNING') as logs:
            two.listed(False)
        self.assertIn('it leaves its tooz group', '\n'.join(logs.output))
        # Its peers take its free nodes; it claims none (were it asked).
        self.wait_for(self.three['host1'], self.part('host1'),
                      {'host1', 'host3'})
        self.wait_for(self.three['host3'], self.part('host3'),
                      {'host1', 'host3'})
        views = self.views()
        self.assertEqual({'host1', 'host3'}, views['host2'])
        test_membership.assert_every_free_node_has_one_manager(self, views)
        # Its next good listing brings it back.
        two.listed(True)
        for host in self.HOSTS:
            self.wait_for(self.three[host], self.part(host), set(self.HOSTS))

    def test_nobody_leaves_when_ironic_is_down_for_everyone(self) -> None:
        # Leaving would leave nobody to serve, and hosts coming back one by
        # one would pass the free nodes around.
        for _ in range(toozgroup.STEP_ASIDE_AFTER + 2):
            self.period({h: False for h in self.HOSTS})
        for plugin in self.three.values():
            self.assertTrue(plugin._taking_part)
            assert plugin._reading is not None
            self.assertEqual(set(self.HOSTS), set(plugin._reading.members))
        self.period({h: True for h in self.HOSTS})
        self.assertEqual({h: set(self.HOSTS) for h in self.HOSTS},
                         self.views())
        self.assertEqual([0, 0, 0], [p.rejoins for p in self.three.values()])
