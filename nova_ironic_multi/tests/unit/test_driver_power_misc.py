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
"""Power, networks, consoles and volumes against a fake Ironic."""

from __future__ import annotations

from typing import Any

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from nova.network import model as network_model

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import fake_ironic


class InstanceOnNode(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node(provision_state=states.ACTIVE,
                                         power_state=states.POWER_ON)
        self.instance = self.fake_instance(self.node)
        self.ironic.nodes[self.node]['instance_uuid'] = self.instance.uuid

    def power_calls(self) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.ironic.calls_to('set_power_state')]


class PowerTest(InstanceOnNode):

    def test_hard_reboot(self) -> None:
        self.driver.reboot(self.ctxt, self.instance, None, 'HARD')
        self.assertEqual([('reboot', False, None)], self.power_calls())

    def test_soft_reboot(self) -> None:
        self.driver.reboot(self.ctxt, self.instance, None, 'SOFT')
        self.assertEqual([('reboot', True, None)], self.power_calls())

    def test_soft_reboot_unsupported_falls_back_to_hard(self) -> None:
        self.ironic.fail('set_power_state',
                         ironic.BadRequest('soft reboot not supported'))
        self.driver.reboot(self.ctxt, self.instance, None, 'SOFT')
        self.assertEqual([('reboot', True, None), ('reboot', False, None)],
                         self.power_calls())

    def test_soft_reboot_that_hangs_falls_back_to_hard(self) -> None:
        self.flags(power_timeout=1, group='ironic_multi')
        real = self.ironic.set_power_state

        def soft_hangs(node: str, target: str, soft: bool = False,
                       timeout: Any = None) -> None:
            real(node, target, soft, timeout)
            if soft:
                self.ironic.nodes[node]['_pending']['left'] = 10 ** 6

        self.ironic.set_power_state = soft_hangs  # type: ignore
        self.driver.reboot(self.ctxt, self.instance, None, 'SOFT')
        self.assertEqual(('reboot', False, None), self.power_calls()[-1])

    def test_reboot_failure(self) -> None:
        self.ironic.fail('set_power_state', ironic.IronicUnavailable('503'))
        self.assertRaises(exception.InstanceRebootFailure,
                          self.driver.reboot, self.ctxt, self.instance, None,
                          'HARD')

    def test_reboot_of_an_instance_on_no_node(self) -> None:
        self.assertRaises(exception.InstanceNotFound, self.driver.reboot,
                          self.ctxt, self.fake_instance(self.node), None,
                          'HARD')

    def test_power_off_hard_without_timeout(self) -> None:
        self.driver.power_off(self.instance)
        self.assertEqual([('off', False, None)], self.power_calls())
        self.assertEqual(states.POWER_OFF,
                         self.ironic.nodes[self.node]['power_state'])

    def test_power_off_soft_with_timeout(self) -> None:
        self.driver.power_off(self.instance, timeout=30)
        self.assertEqual([('off', True, 30)], self.power_calls())

    def test_soft_power_off_failing_then_hard(self) -> None:
        self.ironic.fail('set_power_state', ironic.BadRequest('no soft'))
        self.driver.power_off(self.instance, timeout=30)
        self.assertEqual([('off', True, 30), ('off', False, None)],
                         self.power_calls())

    def test_power_off_that_does_not_stick(self) -> None:
        real = self.ironic.set_power_state

        def stays_on(node: str, target: str, soft: bool = False,
                     timeout: Any = None) -> None:
            real(node, target, soft, timeout)
            self.ironic.nodes[node]['_pending']['final'].update(
                power_state=states.POWER_ON, last_error='BMC said no')

        self.ironic.set_power_state = stays_on  # type: ignore
        exc = self.assertRaises(exception.InstancePowerOffFailure,
                                self.driver.power_off, self.instance)
        self.assertIn('BMC said no', str(exc))

    def test_power_on(self) -> None:
        self.ironic.nodes[self.node]['power_state'] = states.POWER_OFF
        self.driver.power_on(self.ctxt, self.instance, None)
        self.assertEqual(states.POWER_ON,
                         self.ironic.nodes[self.node]['power_state'])
        self.ironic.fail('set_power_state', ironic.Conflict('locked'))
        self.assertRaises(exception.InstancePowerOnFailure,
                          self.driver.power_on, self.ctxt, self.instance,
                          None)

    def test_power_update_event(self) -> None:
        self.instance.task_state = task_states.POWERING_OFF
        self.driver.power_update_event(self.instance, 'POWER_OFF')
        self.assertEqual((power_state.SHUTDOWN, vm_states.STOPPED, None),
                         (self.instance.power_state, self.instance.vm_state,
                          self.instance.task_state))
        self.instance.save.assert_called_with(
            expected_task_state=task_states.POWERING_OFF)
        self.driver.power_update_event(self.instance, 'POWER_ON')
        self.assertEqual((power_state.RUNNING, vm_states.ACTIVE),
                         (self.instance.power_state, self.instance.vm_state))
        self.instance.save.assert_called_with(
            expected_task_state=task_states.POWERING_ON)

    def test_crash_dump(self) -> None:
        self.driver.trigger_crash_dump(self.instance)
        self.assertEqual([(self.node,)], self.ironic.calls_to('inject_nmi'))
        self.ironic.fail('inject_nmi', ironic.BadRequest('not supported'))
        self.assertRaises(exception.TriggerCrashDumpNotSupported,
                          self.driver.trigger_crash_dump, self.instance)
        self.ironic.fail('inject_nmi', ironic.IronicUnavailable('down'))
        self.assertRaises(exception.NovaException,
                          self.driver.trigger_crash_dump, self.instance)


class PowerSyncTest(InstanceOnNode):
    """nova's power sync reads get_info from the cache (use_cache=True).

    Found by the e2e tier: a stop, then the sync (before the next period)
    read the node still on from the cache, and nova called the stop API
    again ("Instance is not stopped"), so the user's start got a 409.
    """

    def setUp(self) -> None:
        super().setUp()
        # A period of this host lists the node as its own: a live Ironic
        # service, and the instance in nova's database.
        self.make_service(self.HOST)
        self.fleet_drivers([self.HOST])
        self.instance = self.make_instance()
        self.instance.node = self.node      # (nova's row needs compute_id)
        self.ironic.nodes[self.node]['instance_uuid'] = self.instance.uuid
        self.driver.get_available_nodes(refresh=True)
        cached = self.driver._inventory.cached()
        self.assertEqual(self.node, cached.by_instance[self.instance.uuid])

    def cached_state(self) -> int:
        return self.driver.get_info(self.instance).state

    def test_the_cache_has_this_hosts_own_power_changes_at_once(
            self) -> None:
        self.driver.get_available_nodes(refresh=True)
        self.assertEqual(power_state.RUNNING, self.cached_state())
        self.driver.power_off(self.instance)
        self.assertEqual(power_state.SHUTDOWN, self.cached_state())
        self.driver.power_on(self.ctxt, self.instance, None)
        self.assertEqual(power_state.RUNNING, self.cached_state())
        self.driver.power_off(self.instance, timeout=5)
        self.assertEqual(power_state.SHUTDOWN, self.cached_state())
        self.driver.reboot(self.ctxt, self.instance, None, 'HARD')
        self.assertEqual(power_state.RUNNING, self.cached_state())

    def test_a_listing_begun_before_a_power_change_keeps_the_change(
            self) -> None:
        self.driver.get_available_nodes(refresh=True)
        real = self.ironic.list_nodes

        def listed_then_stopped(*args: Any, **kwargs: Any) -> Any:
            # Ironic answers the period's listing (the node on), then the
            # user's stop runs before the period installs it.
            nodes = real(*args, **kwargs)
            self.driver.power_off(self.instance)
            return nodes

        self.ironic.list_nodes = listed_then_stopped  # type: ignore
        self.driver.get_available_nodes(refresh=True)
        self.ironic.list_nodes = real  # type: ignore
        self.assertEqual(states.POWER_OFF,
                         self.ironic.nodes[self.node]['power_state'])
        self.assertEqual(power_state.SHUTDOWN, self.cached_state())
        # The next listing has the change itself.
        self.driver.get_available_nodes(refresh=True)
        self.assertEqual(power_state.SHUTDOWN, self.cached_state())


class NetworkTest(InstanceOnNode):

    def test_attach_and_detach_interface(self) -> None:
        vif = self.network_info('vif-1')[0]
        self.driver.attach_interface(self.ctxt, self.instance, None, vif)
        self.assertEqual(['vif-1'], self.ironic.vifs[self.node])
        # Already attached is fine.
        self.driver.attach_interface(self.ctxt, self.instance, None, vif)
        self.driver.detach_interface(self.ctxt, self.instance, vif)
        self.assertEqual([], self.ironic.vifs[self.node])
        # Not attached is fine too.
        self.driver.detach_interface(self.ctxt, self.instance, vif)

    def test_attach_refused(self) -> None:
        self.ironic.fail('vif_attach', ironic.BadRequest('no free port'))
        exc = self.assertRaises(
            exception.VirtualInterfacePlugException,
            self.driver.attach_interface, self.ctxt, self.instance, None,
            self.network_info('vif-1')[0])
        self.assertIn('no free port', str(exc))

    def test_networks_before_block_devices_and_their_cleanup(self) -> None:
        nw = self.network_info('a', 'b')
        self.driver.prepare_networks_before_block_device_mapping(
            self.instance, nw)
        self.assertEqual(['a', 'b'], self.ironic.vifs[self.node])
        self.ironic.fail('vif_detach', ironic.IronicUnavailable('down'))
        # The clean-up after a failed build tries, fails, and does not
        # raise: nova is already handling the build's own failure.
        self.driver.clean_networks_preparation(self.instance, nw)
        # (Whether it goes on to the next VIF after a failure is not pinned
        # here; that the failed one stays attached is.)
        self.assertEqual((self.node, 'a'),
                         self.ironic.calls_to('vif_detach')[0])
        self.assertIn('a', self.ironic.vifs[self.node])
        self.driver.clean_networks_preparation(self.instance, nw)
        self.assertEqual([], self.ironic.vifs[self.node])
        # Detaching again is fine: Ironic's 400 means "not attached".
        self.driver.unplug_vifs(self.instance, nw)
        self.assertEqual([], self.ironic.vifs[self.node])

    def test_detach_during_an_outage_is_a_nova_error(self) -> None:
        self.driver.attach_interface(self.ctxt, self.instance, None,
                                     self.network_info('vif-1')[0])
        self.ironic.fail('vif_detach', ironic.IronicUnavailable('down'))
        exc = self.assertRaises(
            exception.VirtualInterfaceUnplugException,
            self.driver.detach_interface, self.ctxt, self.instance,
            self.network_info('vif-1')[0])
        self.assertIn('vif-1', str(exc))
        self.assertEqual(['vif-1'], self.ironic.vifs[self.node])

    def test_attach_answered_409_is_success_only_if_the_vif_is_there(
            self) -> None:
        vif = self.network_info('vif-1')[0]
        self.ironic.vifs[self.node].append('vif-1')
        self.driver.attach_interface(self.ctxt, self.instance, None, vif)
        self.assertEqual([(self.node,)], self.ironic.calls_to('vif_list'))
        self.assertEqual(['vif-1'], self.ironic.vifs[self.node])

    def test_attach_answered_another_409_is_an_error_naming_node_and_vif(
            self) -> None:
        self.ironic.fail('vif_attach', ironic.Conflict(
            'Unable to attach VIF because VIF vif-1 is already attached to '
            'Ironic port p-1'))
        exc = self.assertRaises(
            exception.VirtualInterfacePlugException,
            self.driver.attach_interface, self.ctxt, self.instance, None,
            self.network_info('vif-1')[0])
        self.assertIn('vif-1', str(exc))
        self.assertIn(self.node, str(exc))
        self.assertIn('already attached to Ironic port p-1', str(exc))
        self.assertEqual(1, len(self.ironic.calls_to('vif_attach')))

    def test_attach_to_a_node_that_stays_locked_is_an_error(self) -> None:
        # Ironic.vif_attach retried the lock (test_ironic_client); what is
        # left is an error that says so, never a silent success.
        self.flags(api_max_retries=2, api_retry_interval=0, group='ironic')
        self.ironic.fail('vif_attach', ironic.Conflict(
            fake_ironic.locked(self.node)))
        exc = self.assertRaises(
            exception.VirtualInterfacePlugException,
            self.driver.attach_interface, self.ctxt, self.instance, None,
            self.network_info('vif-1')[0])
        self.assertIn('stayed locked', str(exc))
        self.assertIn('api_max_retries = 2', str(exc))
        self.assertIn('vif-1', str(exc))
        self.assertEqual([], self.ironic.vifs[self.node])

    def test_attach_409_whose_vifs_cannot_be_listed_is_an_error(
            self) -> None:
        self.ironic.fail('vif_attach', ironic.Conflict('conflict'))
        self.ironic.fail('vif_list', ironic.IronicUnavailable('down'))
        exc = self.assertRaises(
            exception.VirtualInterfacePlugException,
            self.driver.prepare_networks_before_block_device_mapping,
            self.instance, self.network_info('vif-1'))
        self.assertIn('cannot be listed: down', str(exc))

    def stale(self) -> str:
        """The node now holds another instance: the record is stale."""
        self.ironic.nodes[self.node]['instance_uuid'] = 'other-instance'
        self.ironic.vifs[self.node] = ['other-vif']
        return 'does not hold instance %s (it holds other-instance)' % (
            self.instance.uuid)

    def test_vif_calls_never_touch_a_node_that_holds_another_instance(
            self) -> None:
        why = self.stale()
        vif = self.network_info('other-vif')[0]
        for error, call, args in [
                (exception.VirtualInterfacePlugException,
                 self.driver.attach_interface,
                 (self.ctxt, self.instance, None, vif)),
                (exception.VirtualInterfacePlugException,
                 self.driver.prepare_networks_before_block_device_mapping,
                 (self.instance, [vif])),
                (exception.VirtualInterfaceUnplugException,
                 self.driver.detach_interface, (self.ctxt, self.instance,
                                                vif)),
                (exception.VirtualInterfaceUnplugException,
                 self.driver.unplug_vifs, (self.instance, [vif]))]:
            exc = self.assertRaises(error, call, *args)
            self.assertIn(why, str(exc))
            self.assertIn(self.node, str(exc))
        self.assertEqual([], self.ironic.calls_to('vif_attach'))
        self.assertEqual([], self.ironic.calls_to('vif_detach'))
        self.assertEqual(['other-vif'], self.ironic.vifs[self.node])

    def test_unplug_after_a_failed_build_released_the_node(self) -> None:
        self.ironic.vifs[self.node] = ['a']
        self.ironic.nodes[self.node]['instance_uuid'] = None
        self.driver.unplug_vifs(self.instance, self.network_info('a'))
        self.assertEqual([], self.ironic.vifs[self.node])
        exc = self.assertRaises(
            exception.VirtualInterfaceUnplugException,
            self.driver.detach_interface, self.ctxt, self.instance,
            self.network_info('a')[0])
        self.assertIn('(it holds none)', str(exc))

    def test_unplug_for_a_build_that_never_got_a_node(self) -> None:
        calls = len(self.ironic.calls)
        self.driver.unplug_vifs(self.fake_instance(None),
                                self.network_info('a'))
        self.driver.clean_networks_preparation(self.fake_instance(None),
                                               self.network_info('a'))
        self.assertEqual(calls, len(self.ironic.calls))

    def test_plug_vifs_leaves_vifs_to_the_node_life(self) -> None:
        calls = len(self.ironic.calls)
        self.driver.plug_vifs(self.instance, self.network_info('a'))
        self.assertEqual(calls, len(self.ironic.calls))

    def test_port_binding_is_left_to_ironic(self) -> None:
        # The test checks the answer is None, all the method is declared
        # to return (ignored: mypy flags using such a value).
        self.assertIsNone(self.driver.network_binding_host_id(  # type: ignore[func-returns-value]
            self.ctxt, self.instance))
        self.assertTrue(self.driver.manages_network_binding_host_id())


class ConsoleTest(InstanceOnNode):

    def console(self, **fields: Any) -> dict[str, Any]:
        console: dict[str, Any] = self.ironic.nodes[self.node]['console']
        console.update(fields)
        return console

    def test_vnc_enables_the_console_and_uses_the_real_server(self) -> None:
        self.console(console_info={'type': 'vnc', 'url': 'http://proxy'})
        self.ironic.nodes[self.node]['driver_internal_info'] = {
            'vnc_host': '10.0.0.5', 'vnc_port': 5901}
        vnc = self.driver.get_vnc_console(self.ctxt, self.instance)
        self.assertEqual(('10.0.0.5', 5901), (vnc.host, vnc.port))
        self.assertEqual([(self.node, True)],
                         self.ironic.calls_to('set_console_mode'))

    def test_vnc_unavailable(self) -> None:
        self.console(console_enabled=True,
                     console_info={'type': 'socat', 'url': 'tcp://h:1'})
        self.assertRaises(exception.ConsoleTypeUnavailable,
                          self.driver.get_vnc_console, self.ctxt,
                          self.instance)
        self.console(console_info={'type': 'vnc', 'url': 'http://proxy'})
        self.assertRaises(exception.ConsoleTypeUnavailable,
                          self.driver.get_vnc_console, self.ctxt,
                          self.instance)

    def test_serial_console_is_reset_for_its_one_user(self) -> None:
        self.console(console_enabled=True,
                     console_info={'type': 'socat',
                                   'url': 'tcp://10.0.0.5:8023'})
        serial = self.driver.get_serial_console(self.ctxt, self.instance)
        self.assertEqual(('10.0.0.5', 8023), (serial.host, serial.port))
        self.assertEqual([(self.node, False), (self.node, True)],
                         self.ironic.calls_to('set_console_mode'))

    def test_serial_console_unavailable(self) -> None:
        self.assertRaises(exception.ConsoleTypeUnavailable,
                          self.driver.get_serial_console, self.ctxt,
                          self.instance)
        for url in ('udp://h:1', 'tcp://h', 'tcp://h:notaport'):
            self.console(console_enabled=True,
                         console_info={'type': 'socat', 'url': url})
            self.assertRaises(exception.ConsoleTypeUnavailable,
                              self.driver.get_serial_console, self.ctxt,
                              self.instance)

    def test_console_that_never_enables(self) -> None:
        self.vnc_console_wait(1)
        real = self.ironic.set_console_mode
        self.ironic.set_console_mode = (  # type: ignore
            lambda node_uuid, enabled: real(node_uuid, False))
        self.assertRaises(exception.ConsoleTypeUnavailable,
                          self.driver.get_vnc_console, self.ctxt,
                          self.instance)


class VolumeConnectorTest(InstanceOnNode):

    def connector(self, kind: str, value: str) -> None:
        self.ironic.connectors[self.node].append(
            type('C', (), {'type': kind, 'connector_id': value}))

    def test_ip_and_iqn(self) -> None:
        self.connector('ip', '192.0.2.10')
        self.connector('iqn', 'iqn.2026-11.org:node')
        props = self.driver.get_volume_connector(self.instance)
        self.assertEqual({'ip': '192.0.2.10', 'host': '192.0.2.10',
                          'initiator': 'iqn.2026-11.org:node',
                          'platform': 'x86_64', 'os_type': 'baremetal',
                          'multipath': False}, props)

    def test_ip_found_through_the_mac_of_a_vif(self) -> None:
        self.connector('mac', '52:54:00:00:00:01')
        self.connector('wwpn', '5000')
        self.ironic.ports_of[self.node].append(fake_ironic.Port(
            uuid='p1', address='52:54:00:00:00:01',
            internal_info={'tenant_vif_port_id': 'vif-2'}))
        subnet = network_model.Subnet(
            cidr='198.51.100.0/24',
            ips=[network_model.FixedIP(address='198.51.100.7')])
        nw = network_model.NetworkInfo([
            network_model.VIF(id='vif-1', network=network_model.Network(
                id='n', subnets=[network_model.Subnet(
                    cidr='203.0.113.0/24', ips=[network_model.FixedIP(
                        address='203.0.113.9')])])),
            network_model.VIF(id='vif-2', network=network_model.Network(
                id='n', subnets=[subnet]))])
        self.instance.get_network_info = lambda: nw
        props = self.driver.get_volume_connector(self.instance)
        self.assertEqual('198.51.100.7', props['ip'])
        self.assertEqual(['5000'], props['wwpns'])

    def test_no_address_uses_the_hostname(self) -> None:
        self.instance.get_network_info = lambda: network_model.NetworkInfo()
        props = self.driver.get_volume_connector(self.instance)
        self.assertEqual(self.instance.hostname, props['host'])
        self.assertNotIn('ip', props)

    def test_ironic_down(self) -> None:
        self.ironic.fail('volume_connectors', ironic.IronicUnavailable('x'))
        self.assertRaises(exception.NovaException,
                          self.driver.get_volume_connector, self.instance)


class NetworkMetadataTest(InstanceOnNode):

    def test_port_groups_become_bonds(self) -> None:
        from nova_ironic_multi.actions import configdrive
        group = type('G', (), {'uuid': 'pg1', 'mode': '802.3ad',
                               'address': '52:54:00:aa:aa:aa',
                               'properties': {'miimon': '100',
                                              'bond_xmit_hash_policy':
                                                  'layer3+4'},
                               'internal_info': {
                                   'tenant_vif_port_id': 'vif-1'},
                               'extra': {}})
        self.ironic.groups_of[self.node].append(group)
        for i in (1, 2):
            self.ironic.ports_of[self.node].append(fake_ironic.Port(
                uuid='p%d' % i, address='52:54:00:00:00:0%d' % i,
                portgroup_uuid='pg1'))
        self.ironic.ports_of[self.node].append(fake_ironic.Port(
            uuid='p3', address='52:54:00:00:00:03',
            extra={'vif_port_id': 'vif-2'}))
        md = configdrive.network_metadata(
            self.driver._ironic, self.node, self.network_info('vif-1',
                                                              'vif-2'))
        assert md is not None
        links = {link['id']: link for link in md['links']}
        bond = next(lk for lk in md['links'] if lk.get('type') == 'bond')
        self.assertEqual(['p1', 'p2'], bond['bond_links'])
        self.assertEqual('802.3ad', bond['bond_mode'])
        self.assertEqual('100', bond['bond_miimon'])
        self.assertEqual('layer3+4', bond['bond_xmit_hash_policy'])
        self.assertEqual('52:54:00:aa:aa:aa', bond['ethernet_mac_address'])
        self.assertEqual('phy', links['p1']['type'])
        phy = next(lk for lk in md['links'] if lk.get('vif_id') == 'vif-2')
        self.assertEqual('52:54:00:00:00:03', phy['ethernet_mac_address'])


class MigrationTest(InstanceOnNode):

    def test_live_migration_fails_its_pre_check(self) -> None:
        # nova's conductor keeps the server ACTIVE on a pre-check error;
        # NotImplementedError there would put it in ERROR.
        before = len(self.ironic.calls)
        exc = self.assertRaises(
            exception.MigrationPreCheckError,
            self.driver.check_can_live_migrate_destination,
            self.ctxt, self.instance, {}, {})
        self.assertIn('live migration is not supported', str(exc))
        self.assertEqual(before, len(self.ironic.calls))
