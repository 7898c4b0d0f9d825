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
"""A rolling migration from nova's in-tree Ironic driver, and back.

host1 runs nova 34's own ``ironic.IronicDriver``, host2 and host3 this
driver with the ``compatible`` ring, all against the same real Ironic.
host1 is restarted with this driver, then with nova's again. After each
step every node is reported by exactly one host, and the compute node rows
and placement providers are the same rows (ids, creation times, UUIDs):
nothing was deleted and created again. Every server is then rebooted and
deleted through nova's API.
"""

from __future__ import annotations

from typing import Any

import fixtures
from keystoneauth1 import loading as ks_loading
from nova.conf import CONF

from nova_ironic_multi.tests.functional import base

IN_TREE = 'ironic.IronicDriver'
OURS = 'nova_ironic_multi.IronicDriver'


class HostConf:
    """nova's CONF, but ``host`` is ``host1``, for nova's driver only.

    The services of an in-process cell share one CONF whose ``host`` is
    the last started service's; nova's driver reads ``CONF.host`` for its
    ring (this driver takes the host nova passes to ``init_host``). Only
    host1 ever runs nova's driver here.
    """

    def __init__(self, host: str) -> None:
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return self._host if name == 'host' else getattr(CONF, name)


class RollingMigrationTest(base.IronicCellTestCase):

    START_COMPUTES = False
    NODES = 9

    def configure(self) -> None:
        # nova's driver (openstacksdk) needs an auth plugin to take an
        # endpoint; Ironic here runs without Keystone: ``none`` with its
        # fixed endpoint, which this driver reads the same way.
        CONF.register_opts(ks_loading.get_auth_plugin_conf_options('none'),
                           group='ironic')
        self.flags(auth_type='none', endpoint=self.ironic.url,
                   group='ironic')
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.ironic.driver.CONF', HostConf('host1')))
        self.flags(compute_driver=IN_TREE)
        self._start_compute('host1')
        self.flags(compute_driver=OURS)
        for host in ('host2', 'host3'):
            self._start_compute(host)
        self.settle()

    def settle(self) -> None:
        for _ in range(2):
            self._run_periodics()

    def restart(self, host: str, driver: str) -> None:
        self.flags(compute_driver=driver)
        self.computes[host] = self.restart_compute_service(
            self.computes[host], keep_hypervisor_state=False)
        self.settle()

    def drivers(self) -> dict[str, str]:
        return {h: type(c.manager.driver).__module__
                for h, c in self.computes.items()}

    def assert_each_node_once(self) -> dict[str, set[str]]:
        reported = self.reported()
        seen: list[str] = [n for nodes in reported.values() for n in nodes]
        self.assertEqual(sorted(self.node_uuids), sorted(seen), reported)
        self.assert_no_duplicates()
        self.assertEqual(reported, self.db_division())
        return reported

    def test_host1_to_this_driver_and_back(self) -> None:
        self.assertEqual('nova.virt.ironic.driver', self.drivers()['host1'])
        flavor = self.baremetal_flavor()
        servers: list[dict[str, Any]] = [
            self.boot(flavor, host=h) for h in ('host1', 'host2', 'host3')]
        self.settle()
        division = self.assert_each_node_once()
        before = self.records()

        self.restart('host1', OURS)
        self.assertEqual('nova_ironic_multi.driver', self.drivers()['host1'])
        self.assertEqual(division, self.assert_each_node_once())
        self.assert_same_records(before, self.records())

        self.restart('host1', IN_TREE)
        self.assertEqual('nova.virt.ironic.driver', self.drivers()['host1'])
        self.assertEqual(division, self.assert_each_node_once())
        self.assert_same_records(before, self.records())

        for server in servers:
            self.assertEqual(server['OS-EXT-SRV-ATTR:host'],
                             self.instance_host(server['id']))
            self._reboot_server(server, hard=True)
        for server in servers:
            self._delete_server(server)
        self.settle()
        self.assert_each_node_once()

    def test_a_disabled_host_while_the_drivers_are_mixed(self) -> None:
        # Both drivers leave a disabled host out of their rings, but nova's
        # driver always counts itself: disabled, host1 keeps claiming its
        # free share while host2 and host3 (this driver) take it over too.
        # (Disabled, this driver claims no free node.)
        before = self.assert_each_node_once()
        self.admin_api.put_service(self.service('host1')['id'],
                                   {'status': 'disabled'})
        self.settle()
        reported = self.reported()
        self.assertEqual(before['host1'], reported['host1'])
        twice = reported['host1'] & (reported['host2'] | reported['host3'])
        self.assertEqual(before['host1'], twice)
        self.assertEqual(set(self.node_uuids),
                         reported['host2'] | reported['host3'])

        self.admin_api.put_service(self.service('host1')['id'],
                                   {'status': 'enabled'})
        self.settle()
        self.assertEqual(before, self.assert_each_node_once())
