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
"""Server actions through nova's API on the real Ironic.

Each test boots one server and runs several actions on it, checking after
each what nova shows and what Ironic holds: a fresh cell and Ironic per
action would cost minutes. Microversion ``latest`` unless a test says
otherwise.
"""

from __future__ import annotations

import copy
import time
from typing import Any
from unittest import mock

import fixtures
from nova import objects
from nova.tests.functional.api import client as api_client

from nova_ironic_multi import driver
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.functional import base

#: A whole-disk image, as Glance would describe one to Ironic.
WHOLE_DISK_IMAGE = {
    'id': '8f1c2a4e-2b6e-4d55-9a51-0f4c3c7d9e21',
    'name': 'whole-disk',
    'status': 'active',
    'visibility': 'public',
    'container_format': 'bare',
    'disk_format': 'raw',
    'size': 25165824,
    'min_ram': 0,
    'min_disk': 0,
    'properties': {'img_type': 'whole-disk', 'architecture': 'x86_64'},
}
#: A second one, to rebuild onto.
OTHER_IMAGE = dict(WHOLE_DISK_IMAGE,
                   id='3d0b9f57-6a1e-4b8f-8c0e-5b7e2f9a4c16',
                   name='whole-disk-2')


def image_type(image: dict[str, Any]) -> str:
    """The image type Ironic derives from a Glance image's properties.

    ``img_type`` when set; otherwise a partition image if it names a
    kernel and a ramdisk, else a whole-disk image.
    """
    props = image.get('properties', {})
    if props.get('img_type'):
        return str(props['img_type'])
    if props.get('kernel_id') and props.get('ramdisk_id'):
        return 'partition'
    return 'whole-disk'


class ActionsTestBase(base.IronicCellTestCase):

    NODES = 4

    def setUp(self) -> None:
        super().setUp()
        for image in (WHOLE_DISK_IMAGE, OTHER_IMAGE):
            self.glance.create(None, dict(image))
        self.flavor = self.baremetal_flavor()
        self.unbinding_an_unbound_port_is_fine()

    def unbinding_an_unbound_port_is_fine(self) -> None:
        """Let nova's neutron fixture unbind a port that has no binding.

        Ironic binds ports itself, so the driver gives neutron no binding
        host (``binding:host_id`` None), as nova's in-tree driver does.
        Neutron takes that for an unbound port; the fixture raises KeyError.
        """
        neutron = self.neutron
        real = neutron.update_port

        def update_port(port_id: str, body: Any = None) -> Any:
            req = (body or {}).get('port', {})
            if ('binding:host_id' in req and req['binding:host_id'] is None
                    and neutron._get_active_binding(port_id)[0] is None):
                neutron._ports[port_id].update(copy.deepcopy(req))
                return {'port': copy.deepcopy(neutron._ports[port_id])}
            return real(port_id, body)

        self.useFixture(fixtures.MonkeyPatch(
            'nova.tests.fixtures.neutron.NeutronFixture.update_port',
            lambda _self, *a, **kw: update_port(*a, **kw)))

    def ironic_node(self, node: str) -> dict[str, Any]:
        got = self.ironic.wait_idle(node)
        return {'instance_uuid': got.instance_uuid,
                'provision_state': got.provision_state,
                'power_state': got.power_state}

    def deployed(self, server: dict[str, Any], power: Any = mock.ANY,
                 provision: str = states.ACTIVE) -> dict[str, Any]:
        """The node as it should be.

        fake-hardware's deploy leaves the power as it was (off), so the
        power is checked where it matters.
        """
        return {'instance_uuid': server['id'], 'provision_state': provision,
                'power_state': power}

    def boot_whole_disk(self) -> tuple[dict[str, Any], str]:
        server = self.boot(self.flavor, imageRef=WHOLE_DISK_IMAGE['id'])
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.glance_told_ironic(node, WHOLE_DISK_IMAGE)
        return server, node

    def glance_told_ironic(self, node: str, image: dict[str, Any]) -> None:
        """What Ironic stores after asking Glance about a deployed image.

        Ironic reads the image's properties from Glance at deploy time and
        keeps the type it finds in ``instance_info/image_type``. This
        Ironic has no Glance to ask (nova's Glance is a test fixture), so
        the test stores what Glance would have given it. Without it, Ironic
        39's rebuild fails with HTTP 500 (an Ironic bug: ``auto_lessee`` is
        read unbound in ``conductor/deployments.py``).
        """
        self.ironic.client.node.update(node, [
            {'op': 'add', 'path': '/instance_info/image_type',
             'value': image_type(image)}])

    def driver_of(self, server: dict[str, Any]) -> Any:
        return self.computes[server['OS-EXT-SRV-ATTR:host']].manager.driver

    def wait_for(self, what: str, read: Any,
                 timeout: float = base.PATIENCE) -> Any:
        """Poll ``read()`` until it returns something true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = read()
            if got:
                return got
            time.sleep(0.2)
        self.fail('no %s within %ss' % (what, timeout))

    def migration(self, server: dict[str, Any], kind: str,
                  status: str) -> dict[str, Any]:
        """Wait for the server's migration of ``kind`` to reach ``status``."""
        def read() -> dict[str, Any] | None:
            for m in self.admin_api.api_get(
                    '/os-migrations?instance_uuid=%s&migration_type=%s'
                    % (server['id'], kind)).body['migrations']:
                if m['status'] == status:
                    return dict(m)
            return None
        migration: dict[str, Any] = self.wait_for(
            '%s migration in %s' % (kind, status), read)
        return migration

    def event(self, server: dict[str, Any], action: str,
              event: str) -> dict[str, Any]:
        """Wait for the finished ``event`` of the server's ``action``."""
        def read() -> dict[str, Any] | None:
            for a in self.api.get_instance_actions(server['id']):
                if a['action'] != action:
                    continue
                for e in self.api.get_instance_action_details(
                        server['id'], a['request_id'])['events']:
                    if e['event'] == event and e['finish_time']:
                        return dict(e)
            return None
        found: dict[str, Any] = self.wait_for('%s event' % event, read)
        return found


class PowerAndConsoleTest(ActionsTestBase):

    def test_reboot_stop_start_power_sync_console_and_interfaces(
            self) -> None:
        server, node = self.boot_whole_disk()
        host = server['OS-EXT-SRV-ATTR:host']

        # Soft, then hard reboot: ACTIVE again, the node on and deployed.
        for hard in (False, True):
            server = self._reboot_server(server, hard=hard)
            self.assertEqual('ACTIVE', server['status'])
            self.assertEqual(self.deployed(server, states.POWER_ON),
                             self.ironic_node(node))

        # Stop and start.
        server = self._stop_server(server)
        self.assertEqual(self.deployed(server, states.POWER_OFF),
                         self.ironic_node(node))
        server = self._start_server(server)
        self.assertEqual(self.deployed(server, states.POWER_ON),
                         self.ironic_node(node))

        # Right after the start, before any period, nova's power sync
        # sees the node on (it reads the driver's cache): nothing changes.
        # (One instance's sync, which _sync_power_states runs in a thread.)
        with self.cell() as cctxt:
            self.computes[host].manager._query_driver_power_state_and_sync(
                cctxt, objects.Instance.get_by_uuid(cctxt, server['id']))
        server = self.api.get_server(server['id'])
        self.assertEqual(('ACTIVE', None, 1), (
            server['status'], server['OS-EXT-STS:task_state'],
            server['OS-EXT-STS:power_state']))

        # Powered off behind nova's back: after the next period's listing,
        # nova's power sync stops it.
        self.ironic.client.node.set_power_state(node, 'off')
        self.ironic.wait_idle(node)
        self._run_periodics()
        with self.cell() as cctxt:
            self.computes[host].manager._sync_power_states(cctxt)
        server = self._wait_for_state_change(server, 'SHUTOFF')
        self.assertEqual(4, server['OS-EXT-STS:power_state'])  # SHUTDOWN
        self.assertEqual(self.deployed(server, states.POWER_OFF),
                         self.ironic_node(node))
        server = self._start_server(server)
        self.assertEqual(self.deployed(server, states.POWER_ON),
                         self.ironic_node(node))

        # The VNC console: Ironic's fake console interface is enabled on
        # request but offers no VNC server, which nova reports clearly.
        exc = self.assertRaises(
            api_client.OpenStackApiException, self.api.api_post,
            '/servers/%s/remote-consoles' % server['id'],
            {'remote_console': {'protocol': 'vnc', 'type': 'novnc'}})
        self.assertEqual(400, exc.response.status_code)
        self.assertIn('Unavailable console type vnc', str(exc))
        self.assertTrue(self.ironic.client.node.get_console(node)[
            'console_enabled'])
        # The serial console, enabled in nova: the driver resets Ironic's
        # console for its one user, finds no socat server, and says so.
        self.flags(enabled=True, group='serial_console')
        exc = self.assertRaises(
            api_client.OpenStackApiException, self.api.api_post,
            '/servers/%s/remote-consoles' % server['id'],
            {'remote_console': {'protocol': 'serial', 'type': 'serial'}})
        self.assertEqual(400, exc.response.status_code)
        self.assertIn('Unavailable console type serial', str(exc))
        self.assertTrue(self.ironic.client.node.get_console(node)[
            'console_enabled'])

        # Interface attach and detach (nova's neutron fixture), through
        # Ironic's VIF API. Ironic's noop network interface accepts VIFs
        # and lists none, so Ironic's answers are what is checked.
        ironic_client = self.driver_of(server)._ironic
        port = self.neutron.port_1['id']
        with mock.patch.object(ironic_client, 'vif_attach',
                               wraps=ironic_client.vif_attach) as attach:
            self._attach_interface(server, port)
        attach.assert_called_once_with(node, port)
        self.assertEqual([port], [
            i['port_id'] for i in self.api.get_port_interfaces(server['id'])])
        with mock.patch.object(ironic_client, 'vif_detach',
                               wraps=ironic_client.vif_detach) as detach:
            self._detach_interface(server, port)
        detach.assert_called_once_with(node, port)
        self.assertEqual([], self.api.get_port_interfaces(server['id']))
        server = self.api.get_server(server['id'])
        self.assertEqual('ACTIVE', server['status'])
        self.assertEqual(self.deployed(server), self.ironic_node(node))


class RebuildRescueTest(ActionsTestBase):

    def test_rebuild_at_latest_and_2_92_then_rescue_and_unrescue(
            self) -> None:
        server, node = self.boot_whole_disk()

        # At the latest microversion nova asks to re-image the boot volume
        # on every rebuild; this server boots from an image: it rebuilds.
        server = self._rebuild_server(server, OTHER_IMAGE['id'])
        self.assertEqual(OTHER_IMAGE['id'], server['image']['id'])
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertEqual(OTHER_IMAGE['id'],
                         self.ironic.instance_info(node)['image_source'])

        self.api.microversion = '2.92'
        server = self._rebuild_server(server, WHOLE_DISK_IMAGE['id'])
        self.api.microversion = 'latest'
        self.assertEqual(WHOLE_DISK_IMAGE['id'], server['image']['id'])
        self.assertEqual(self.deployed(server), self.ironic_node(node))
        self.assertEqual(WHOLE_DISK_IMAGE['id'],
                         self.ironic.instance_info(node)['image_source'])

        server = self._rescue_server(server)
        self.assertEqual(self.deployed(server, provision=states.RESCUE),
                         self.ironic_node(node))
        server = self._unrescue_server(server)
        self.assertEqual(self.deployed(server), self.ironic_node(node))


class RefusedActionsTest(ActionsTestBase):

    def test_snapshot_resize_and_live_migration_are_refused(self) -> None:
        server, node = self.boot_whole_disk()
        host = server['OS-EXT-SRV-ATTR:host']
        # Running, as a snapshot expects (fake-hardware deploys leave the
        # node off).
        server = self._reboot_server(server, hard=True)
        untouched = self.ironic_node(node)

        def unchanged() -> dict[str, Any]:
            got = self._wait_for_server_parameter(
                server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
            self.assertEqual((host, node),
                             (got['OS-EXT-SRV-ATTR:host'],
                              got['OS-EXT-SRV-ATTR:hypervisor_hostname']))
            self.assertEqual(untouched, self.ironic_node(node))
            return got

        # Snapshot: nova's compute finds the driver cannot, deletes the
        # image it made, and leaves the server as it was.
        resp = self.api.post_server_action(
            server['id'], {'createImage': {'name': 'snap'}})
        image_id = resp['image_id']

        def image_gone() -> bool:
            try:
                self.api.get_image(image_id)
            except api_client.OpenStackApiNotFoundException:
                return True
            return False

        self.wait_for('deleted snapshot image', image_gone)
        unchanged()

        # Resize: the driver cannot move a disk; the migration errors and
        # the server stays ACTIVE on its node.
        bigger = self._create_flavor(
            name='baremetal-2', memory_mb=2048, vcpu=2, disk=20,
            extra_spec={'resources:CUSTOM_BAREMETAL': '1',
                        'resources:VCPU': '0', 'resources:MEMORY_MB': '0',
                        'resources:DISK_GB': '0'})
        self.api.post_server_action(server['id'],
                                    {'resize': {'flavorRef': bigger}})
        self.migration(server, 'resize', 'error')
        got = unchanged()
        self.assertEqual('baremetal', got['flavor']['original_name'])

        # Live migration: every destination fails nova's pre-check, so no
        # host is found; the server stays ACTIVE where it was.
        asked = []
        real = driver.IronicDriver.check_can_live_migrate_destination

        def check(self_: Any, *args: Any, **kwargs: Any) -> Any:
            asked.append(self_._inventory.host)
            return real(self_, *args, **kwargs)

        with mock.patch.object(driver.IronicDriver,
                               'check_can_live_migrate_destination', check):
            self.api.post_server_action(
                server['id'],
                {'os-migrateLive': {'host': None,
                                    'block_migration': 'auto'}})
            self.migration(server, 'live-migration', 'error')
        unchanged()
        # Each other host was asked, and each refused.
        self.assertEqual({'host1', 'host2', 'host3'} - {host}, set(asked))
