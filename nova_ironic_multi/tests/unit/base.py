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
"""A driver on nova's test database with a fake Ironic behind it."""

from __future__ import annotations

import os
import sys
from typing import Any
from unittest import mock
import uuid

import fixtures
from nova.compute import vm_states
from nova.conf import CONF
from nova import context as nova_context
from nova.network import model as network_model
from nova import objects
from nova import test
from nova.tests.unit import fake_instance
from nova.virt import virtapi

from nova_ironic_multi import compat
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi import driver
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import published
from nova_ironic_multi import metrics
from nova_ironic_multi.tests.unit import fake_ironic


def ironic_compute_node(ctxt: Any, host: str, node: str,
                        node_uuid: str | None = None) -> None:
    """An Ironic compute node record of ``host`` for ``node``."""
    objects.ComputeNode(
        ctxt, host=host, hypervisor_hostname=node,
        uuid=node_uuid or str(uuid.uuid4()), hypervisor_type='ironic',
        hypervisor_version=1, vcpus=0, memory_mb=0, local_gb=0,
        vcpus_used=0, memory_mb_used=0, local_gb_used=0,
        cpu_info='', disk_available_least=0, free_ram_mb=0,
        free_disk_gb=0, current_workload=0, running_vms=0).create()


def seed_compute_nodes(ctxt: Any, hosts: Any) -> None:
    """One Ironic compute node per host, so servicegroup counts each."""
    for host in hosts:
        ironic_compute_node(ctxt, host, 'seed-' + host)



def metric(name: str, **labels: str) -> float:
    """A sample of this process's metrics now (0 if never set)."""
    found = metrics.REGISTRY.get_sample_value(
        'nova_ironic_multi_' + name, labels or None)
    return 0.0 if found is None else found


class FakeMarkers(fixtures.Fixture):
    """This driver's markers in placement, in memory (membership.marker).

    A service whose host has an Ironic compute node has published its
    marker (every Ironic host does in its first period); others only once
    they call :func:`marker.publish`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.published: set[str] = set()
        #: The settings each service published (membership.published).
        self.settings: dict[str, published.Settings] = {}

    def _setUp(self) -> None:
        self.useFixture(fixtures.MockPatchObject(marker, 'read', self.read))
        self.useFixture(fixtures.MockPatchObject(marker, 'publish',
                                                 self.publish))
        self.useFixture(fixtures.MockPatchObject(
            published, 'read',
            lambda: {k: [v] for k, v in self.settings.items()}))
        self.useFixture(fixtures.MockPatchObject(
            published, 'publish', self.publish_settings))

    def publish_settings(self, service_uuid: str,
                         settings: published.Settings) -> bool:
        changed = self.settings.get(service_uuid) != settings
        self.settings[service_uuid] = settings
        return changed

    def read(self) -> frozenset[str]:
        ctxt = nova_context.get_admin_context()
        ironic = {cn.host for cn in objects.ComputeNodeList.get_all(ctxt)
                  if cn.hypervisor_type == 'ironic'}
        return frozenset(self.published | {
            svc.uuid for svc in objects.ServiceList.get_by_binary(
                ctxt, 'nova-compute', include_disabled=True)
            if svc.host in ironic})

    def publish(self, host: str, service_uuid: str) -> None:
        self.published.add(service_uuid)


class DriverTestCase(test.TestCase):
    """``self.driver`` runs as ``host1`` against ``self.ironic``."""

    HOST = 'host1'

    def fleet_drivers(self, hosts: Any) -> dict[str, Any]:
        """This driver as hosts[0] and a started driver per other host.

        Each host gets an Ironic compute node, so servicegroup counts it.
        """
        drivers = {hosts[0]: self.driver}
        for host in hosts[1:]:
            drv = driver.IronicDriver(virtapi.VirtAPI())
            drv.init_host(host)
            drivers[host] = drv
        seed_compute_nodes(self.ctxt, hosts)
        return drivers

    def vnc_console_wait(self, seconds: int) -> None:
        """Bound VNC console changes as the running nova lets one."""
        if compat.defines(CONF, 'ironic', 'vnc_console_state_timeout'):
            self.flags(vnc_console_state_timeout=seconds, group='ironic')
        else:
            # nova 32: only the deprecated option of ours bounds it.
            self.flags(console_timeout=seconds, group='ironic_multi')

    def setUp(self) -> None:
        super().setUp()
        nim_conf.register_opts(CONF)
        self.flags(state_file=os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'state.json'),
            group='ironic_multi')
        self.flags(poll_interval=0.1, deploy_timeout=5,
                   unprovision_timeout=5, power_timeout=5, rescue_timeout=5,
                   group='ironic_multi')
        # The in-tree tear-down wait, (0 + 1) x 0 s, never lengthens ours.
        self.flags(serial_console_state_timeout=5, api_max_retries=0,
                   api_retry_interval=0, group='ironic')
        self.vnc_console_wait(5)
        # Config drives need an ISO 9660 tool; nova's default is the
        # genisoimage binary, pycdlib (an Ironic dependency) ships one.
        self.flags(mkisofs_cmd=os.path.join(os.path.dirname(sys.executable),
                                            'pycdlib-genisoimage'))
        self.ironic = fake_ironic.FakeIronic()
        self.useFixture(fixtures.MockPatch(
            'nova_ironic_multi.ironic.Ironic', return_value=self.ironic))
        self.ctxt = nova_context.get_admin_context()
        self.markers = self.useFixture(FakeMarkers())
        self.driver = driver.IronicDriver(virtapi.VirtAPI())
        self.driver.init_host(self.HOST)

    def make_service(self, host: str, **fields: Any) -> None:
        objects.Service(self.ctxt, host=host, binary='nova-compute',
                        topic='compute', **fields).create()

    def make_instance(self, host: str | None = HOST,
                      **fields: Any) -> objects.Instance:
        """An instance row in nova's database (of ``host``)."""
        inst = objects.Instance(
            self.ctxt, uuid=str(uuid.uuid4()), host=host,
            project_id='p', user_id='u',
            vm_state=fields.pop('vm_state', vm_states.ACTIVE),
            display_name=fields.pop('display_name', 'vm'), **fields)
        inst.create()
        return inst

    def fake_instance(self, node: str | None, **updates: Any) -> Any:
        """An instance object for driver calls that do not need the DB."""
        inst = fake_instance.fake_instance_obj(
            self.ctxt, node=node, host=self.HOST,
            uuid=str(uuid.uuid4()), **updates)
        inst.system_metadata = {}
        inst.refresh = mock.Mock()
        inst.save = mock.Mock()
        return inst

    @staticmethod
    def network_info(*vif_ids: str) -> network_model.NetworkInfo:
        """One VIF per id, each with an IPv4 address on 192.0.2.0/24."""
        return network_model.NetworkInfo([
            network_model.VIF(
                id=v, address='52:54:00:00:00:%02x' % i,
                network=network_model.Network(id='net', subnets=[
                    network_model.Subnet(
                        cidr='192.0.2.0/24', version=4,
                        ips=[network_model.FixedIP(
                            address='192.0.2.%d' % (i + 10))])]))
            for i, v in enumerate(vif_ids)])
