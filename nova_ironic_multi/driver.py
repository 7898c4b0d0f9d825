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
"""The nova compute driver: adapts nova's ComputeDriver API, delegates.

No ring maths and no HTTP here. The node cache and the division live in
:mod:`inventory`, Ironic calls in :mod:`ironic`, state machines in
:mod:`provision` and :mod:`power`, consoles in :mod:`consoles`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.objects import external_event as external_event_obj
from nova.virt import driver as virt_driver
from nova.virt import hardware
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.actions import consoles
from nova_ironic_multi.actions import power
from nova_ironic_multi.actions import provision
from nova_ironic_multi.actions import resources
from nova_ironic_multi.actions import vifs
from nova_ironic_multi.actions import volumes
from nova_ironic_multi import compat
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import restart
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.period import inventory
from nova_ironic_multi.service import startup

LOG = logging.getLogger(__name__)
CONF = cfg.CONF


class IronicDriver(virt_driver.ComputeDriver):
    """Ironic bare metal, divided between several nova-compute services."""

    capabilities: dict[str, bool] = {
        'has_imagecache': False,
        'supports_evacuate': False,
        'supports_migrate_to_same_host': False,
        'supports_attach_interface': True,
        'supports_multiattach': False,
        'supports_trusted_certs': False,
        'supports_pcpus': False,
        'supports_accelerators': False,
        'supports_remote_managed_ports': False,
        'supports_address_space_passthrough': False,
        'supports_address_space_emulated': False,
        'supports_stateless_firmware': False,
        'supports_virtio_fs': False,
        'supports_mem_backing_file': False,
        'supports_image_type_aki': False,
        'supports_image_type_ami': True,
        'supports_image_type_ari': False,
        'supports_image_type_iso': False,
        'supports_image_type_qcow2': True,
        'supports_image_type_raw': True,
        'supports_image_type_vdi': False,
        'supports_image_type_vhd': False,
        'supports_image_type_vhdx': False,
        'supports_image_type_vmdk': False,
        'supports_image_type_ploop': False,
    }

    # Nodes move between services when the ring changes.
    rebalances_nodes = True

    def __init__(self, virtapi: Any, read_only: bool = False) -> None:
        super().__init__(virtapi)
        nim_conf.register_opts(CONF)
        self._ironic = ironic.Ironic(CONF)
        self._inventory = inventory.Inventory(CONF, self._ironic, CONF.host)
        self._provision = provision.Provisioner(
            CONF, self._ironic, self._inventory, self._inventory.followups)
        self._power = power.Power(CONF, self._ironic, self._provision)
        self._consoles = consoles.Consoles(CONF, self._ironic,
                                           self._provision)
        self._drain = drain.Drain(CONF, self._inventory.handover,
                                  self._inventory.building_here)
        #: From init_host until the first period after nova has looked at
        #: this host's instances: nova's start, which asks each request once.
        self._starting = False
        self._instances_processed = False

    # Service life ---------------------------------------------------------

    def init_host(self, host: str) -> None:
        # In-process test cells run several services with one CONF: the
        # host nova passes here is the one that counts.
        self._inventory.host = host
        self._starting, self._instances_processed = True, False
        startup.start(host, self._inventory, self._ironic, self.virtapi,
                      self)

    def process_instances_at_startup(self, context: Any,
                                     instances: Any) -> Any:
        # nova calls this once at start, before it looks at each instance
        # (get_info): the start ends with the period that follows.
        self._instances_processed = True
        # nova puts a build this host's death cut short in ERROR next,
        # without a fault: record why.
        restart.record_faults(context, self._inventory.host, instances)
        return instances

    def _start_or_period(self) -> Any:
        """Fail fast while nova starts the service (see ``_starting``).

        nova's start runs alone (no RPC, no periodic task yet), so the
        flag needs no lock.
        """
        if self._starting:
            return self._ironic.fail_fast()
        return contextlib.nullcontext()

    def _on_sigterm(self) -> None:
        """SIGTERM arrived: begin a drain (:mod:`drain`).

        With drain_on_stop, no new builds from now on.
        """
        self._drain.begin(self._inventory.host)

    def cleanup_host(self, host: str) -> None:
        # nova has waited for the operations under way and runs no more
        # periodic tasks: with drain_on_stop, hand the instances over.
        try:
            self._drain.run(host)
        finally:
            self._inventory.stop()

    # The division -----------------------------------------------------------

    def _refresh(self) -> inventory.Snapshot:
        try:
            return self._inventory.refresh()
        except inventory.NotReady as e:
            LOG.warning('Ironic nodes not refreshed, keeping the last known '
                        'state: %s', e)
            raise exception.VirtDriverNotReady() from e

    def _current(self) -> inventory.Snapshot:
        try:
            return self._inventory.current()
        except inventory.NotReady as e:
            raise exception.VirtDriverNotReady() from e

    def get_available_nodes(self, refresh: bool = False) -> list[str]:
        # Refreshed every call: the resource tracker calls this once a
        # period without refresh=True. (The refresh asks Ironic once per
        # request: an outage is NotReady in this period.)
        if self._instances_processed:
            # The first period after nova looked at the instances: the
            # start is over.
            self._starting = False
        try:
            return list(self._refresh().nodes)
        finally:
            if self._starting and compat.lists_nodes_before_instances():
                # A nova that never calls process_instances_at_startup:
                # its start's node listing is this one, and the instances
                # come next.
                self._instances_processed = True

    def get_nodenames_by_uuid(self, refresh: bool = False) -> dict[str, str]:
        # Node UUIDs are both the compute node UUIDs and their names.
        return {n: n for n in self.get_available_nodes(refresh=refresh)}

    def node_is_available(self, nodename: str) -> bool:
        # Unknown is not gone: keep tracking it.
        return (nodename in self._inventory.cached().nodes or
                self._ironic.node_exists(nodename) is not False)

    def is_node_deleted(self, nodename: str) -> bool:
        # Only Ironic's own 404 says a node is gone; an outage says nothing
        # (nova bug 1750450: every compute node deleted on an outage).
        return self._ironic.node_exists(nodename) is False

    def _node(self, nodename: str,
              period: bool = False) -> nodeinfo.NodeInfo:
        """The cached node, else read; ``period``: asked once."""
        node = self._current().nodes.get(nodename)
        if node is not None:
            return node
        try:
            with (self._ironic.fail_fast() if period
                  else contextlib.nullcontext()):
                return self._ironic.get_node(nodename)
        except ironic.IronicError as e:
            raise exception.NovaException(
                'Cannot read Ironic node %s: %s' % (nodename, e)) from e

    # Resources ------------------------------------------------------------

    def update_provider_tree(self, provider_tree: Any, nodename: str,
                             allocations: Any = None) -> None:
        # (The resource tracker's period: never held by retries.)
        node = self._node(nodename, period=True)
        reserve_in_use = not CONF.workarounds.skip_reserve_in_use_ironic_nodes
        provider_tree.update_inventory(
            nodename, resources.inventory(node, reserve_in_use))
        provider_tree.update_traits(nodename, list(node.traits))

    def get_available_resource(self, nodename: str) -> dict[str, Any]:
        return resources.available_resource(self._node(nodename,
                                                       period=True))

    # Instances --------------------------------------------------------------

    def get_info(self, instance: Any,
                 use_cache: bool = True) -> hardware.InstanceInfo:
        node = None
        if use_cache:
            node = self._current().node_for_instance(instance.uuid)
        if node is None:
            # nova's start asks this of every instance of the host.
            with self._start_or_period():
                node = self._provision.find_instance_node(instance)
        if node is None:
            return hardware.InstanceInfo(state=power_state.NOSTATE)
        return hardware.InstanceInfo(state=resources.power(node.power_state))

    def instance_exists(self, instance: Any) -> bool:
        try:
            self._provision.instance_node(instance)
        except exception.InstanceNotFound:
            return False
        return True

    def list_instance_uuids(self) -> list[str]:
        # Only this service's share (nova bug 2043036).
        return list(self._current().by_instance)

    def list_instances(self) -> list[str]:
        uuids = self.list_instance_uuids()
        if not uuids:
            return []
        found = objects.InstanceList.get_by_filters(
            nova_context.get_admin_context(), {'uuid': uuids},
            expected_attrs=[])
        return [inst.name for inst in found]

    def get_num_instances(self) -> int:
        return len(self.list_instance_uuids())

    # Deploy and delete ------------------------------------------------------

    def prepare_for_spawn(self, instance: Any) -> None:
        self._provision.reserve(instance)

    def failed_spawn_cleanup(self, instance: Any) -> None:
        self._provision.teardown(instance, network_info=None)

    def spawn(self, context: Any, instance: Any, image_meta: Any,
              injected_files: Any, admin_password: Any, allocations: Any,
              network_info: Any = None, block_device_info: Any = None,
              power_on: bool = True, accel_info: Any = None) -> None:
        metadata = self.get_instance_driver_metadata(instance, network_info)
        self._provision.spawn(context, instance, image_meta, injected_files,
                              admin_password, network_info,
                              block_device_info, metadata)

    def destroy(self, context: Any, instance: Any, network_info: Any,
                block_device_info: Any = None, destroy_disks: bool = True,
                destroy_secrets: bool = True) -> None:
        self._provision.teardown(instance, network_info, block_device_info)

    def _here(self, instance: Any) -> None:
        """Act only on an instance of this host (see takeover.ensure_here).

        :raises takeover.MovedAway:
        """
        takeover.ensure_here(instance, self._inventory.host)

    def rebuild(self, context: Any, instance: Any, image_meta: Any,
                injected_files: Any, admin_password: Any, allocations: Any,
                bdms: Any, detach_block_devices: Any,
                attach_block_devices: Any, network_info: Any = None,
                evacuate: bool = False, block_device_info: Any = None,
                preserve_ephemeral: bool = False, accel_uuids: Any = None,
                reimage_boot_volume: bool = False) -> None:
        self._here(instance)
        # nova's API asks to re-image the boot volume on every rebuild from
        # microversion 2.93, so the instance's own root device decides.
        if volumes.root_is_volume(block_device_info, bdms):
            # Nothing was changed yet: nova keeps the server as it was.
            raise exception.InstanceFaultRollback(
                inner_exception=exception.NovaException(
                    'Rebuild is not supported for instance %s: it boots '
                    'from a volume, and Ironic can only rebuild bare metal '
                    'deployed from an image.' % instance.uuid))
        metadata = self.get_instance_driver_metadata(instance, network_info)
        self._provision.rebuild(context, instance, image_meta,
                                injected_files, admin_password, network_info,
                                preserve_ephemeral, metadata)

    def rescue(self, context: Any, instance: Any, network_info: Any,
               image_meta: Any, rescue_password: Any,
               block_device_info: Any, share_info: Any) -> None:
        self._here(instance)
        self._provision.rescue(instance, rescue_password)

    def unrescue(self, context: Any, instance: Any) -> None:
        self._here(instance)
        self._provision.unrescue(instance)

    # Migration --------------------------------------------------------------

    def check_can_live_migrate_destination(
            self, context: Any, instance: Any, src_compute_info: Any,
            dst_compute_info: Any, block_migration: bool = False,
            disk_over_commit: bool = False) -> Any:
        # A pre-check error keeps the server as it is; anything else (the
        # base class's NotImplementedError) puts it in ERROR.
        raise exception.MigrationPreCheckError(
            reason='live migration is not supported for Ironic bare metal '
            'instances (instance %s)' % instance.uuid)

    # Power ----------------------------------------------------------------

    def reboot(self, context: Any, instance: Any, network_info: Any,
               reboot_type: str, block_device_info: Any = None,
               bad_volumes_callback: Any = None, accel_info: Any = None,
               share_info: Any = None) -> None:
        self._here(instance)
        self._power.reboot(instance, soft=(reboot_type == 'SOFT'))

    def power_off(self, instance: Any, timeout: int = 0,
                  retry_interval: int = 0) -> None:
        self._here(instance)
        self._power.power_off(instance, timeout)

    def power_on(self, context: Any, instance: Any, network_info: Any,
                 block_device_info: Any = None, accel_info: Any = None,
                 share_info: Any = None) -> None:
        self._here(instance)
        self._power.power_on(instance)

    def power_update_event(self, instance: Any,
                           target_power_state: str) -> None:
        # Ironic tells nova of power changes it made itself.
        LOG.info('Ironic reports power %s', target_power_state,
                 instance=instance)
        if target_power_state == external_event_obj.POWER_ON:
            instance.power_state = power_state.RUNNING
            instance.vm_state = vm_states.ACTIVE
            expected = task_states.POWERING_ON
        else:
            instance.power_state = power_state.SHUTDOWN
            instance.vm_state = vm_states.STOPPED
            expected = task_states.POWERING_OFF
        instance.task_state = None
        instance.save(expected_task_state=expected)

    def trigger_crash_dump(self, instance: Any) -> None:
        self._here(instance)
        self._power.crash_dump(instance)

    # Networks -------------------------------------------------------------

    def plug_vifs(self, instance: Any, network_info: Any) -> None:
        # Ironic attaches VIFs as part of a node's life (see
        # prepare_networks_before_block_device_mapping and
        # attach_interface); nova's in-tree driver does nothing here too.
        LOG.debug('plug_vifs: VIFs of Ironic nodes are attached at deploy '
                  'and by attach_interface', instance=instance)

    def unplug_vifs(self, instance: Any, network_info: Any) -> None:
        if not instance.get('node'):
            # A build rescheduled before it got a node: nothing attached.
            LOG.debug('No node for the instance; no VIF to detach',
                      instance=instance)
            return
        # (After a failed build the node may already be released.)
        node = self._provision.held_node(instance, vifs.unplug_error,
                                         or_free=True)
        vifs.unplug(self._ironic, node.uuid, network_info)

    def attach_interface(self, context: Any, instance: Any, image_meta: Any,
                         vif: Any) -> None:
        node = self._provision.held_node(instance, vifs.plug_error)
        vifs.plug(self._ironic, node.uuid, [vif])

    def detach_interface(self, context: Any, instance: Any,
                         vif: Any) -> None:
        node = self._provision.held_node(instance, vifs.unplug_error)
        vifs.unplug(self._ironic, node.uuid, [vif])

    def prepare_networks_before_block_device_mapping(
            self, instance: Any, network_info: Any) -> None:
        # Attached before block devices so a volume connector on a MAC
        # can learn its IP address.
        node = self._provision.held_node(instance, vifs.plug_error)
        vifs.plug(self._ironic, node.uuid, network_info)

    def clean_networks_preparation(self, instance: Any,
                                   network_info: Any) -> None:
        try:
            self.unplug_vifs(instance, network_info)
        except Exception as e:
            LOG.warning('Detaching VIFs after a failed build failed: %s', e,
                        instance=instance)

    def network_binding_host_id(self, context: Any, instance: Any) -> None:
        # Ironic binds ports itself once the node is wired, so that tenant
        # networks never reach a machine still running the deploy ramdisk.
        return None

    def manages_network_binding_host_id(self) -> bool:
        return True

    # Consoles and volumes -------------------------------------------------

    def get_vnc_console(self, context: Any, instance: Any) -> Any:
        return self._consoles.vnc(instance)

    def get_serial_console(self, context: Any, instance: Any) -> Any:
        return self._consoles.serial(instance)

    def get_volume_connector(self, instance: Any) -> dict[str, Any]:
        node = self._node(provision.node_uuid_of(instance))
        try:
            return volumes.connector(self._ironic, instance,
                                     resources.cpu_arch(node))
        except ironic.IronicError as e:
            raise exception.NovaException(
                'Cannot read the volume connectors of Ironic node %s: %s'
                % (node.uuid, e)) from e
