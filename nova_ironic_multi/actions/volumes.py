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
"""Boot from volume: Ironic volume targets and the node's connector."""

from __future__ import annotations

from typing import Any

from nova import block_device
from nova import exception
from nova.virt import driver as virt_driver
from oslo_log import log as logging
from oslo_serialization import jsonutils

from nova_ironic_multi.actions import vifs
from nova_ironic_multi import ironic

LOG = logging.getLogger(__name__)


def boots_from_volume(block_device_info: Any) -> bool:
    mapping = virt_driver.block_device_info_get_mapping(block_device_info)
    return block_device.get_root_bdm(mapping) is not None


def root_is_volume(block_device_info: Any, bdms: Any = None) -> bool:
    """Whether the instance's root disk is a volume.

    Decided from what the instance really has (the volume mapped at boot
    index 0 in ``block_device_info``, or a root BDM whose destination is a
    volume), never from the API's ``reimage_boot_volume`` flag, which nova
    sets on every rebuild from compute API 2.93.
    """
    if boots_from_volume(block_device_info):
        return True
    return any(bdm.is_root and bdm.is_volume for bdm in bdms or ())


def volume_ids(block_device_info: Any) -> set[str]:
    """The IDs of the volumes mapped in ``block_device_info``."""
    return {bdm['volume_id'] for bdm in
            virt_driver.block_device_info_get_mapping(block_device_info)
            if bdm.get('volume_id')}


def add_targets(client: ironic.Ironic, node_uuid: str,
                block_device_info: Any) -> None:
    """Record each attached volume on the node as a volume target.

    :raises nova.exception.InstanceDeployFailure: Ironic refused or failed.
    """
    for bdm in virt_driver.block_device_info_get_mapping(block_device_info):
        if not bdm.is_volume:
            continue
        info = jsonutils.loads(bdm._bdm_obj.connection_info)
        try:
            client.create_volume_target(
                node_uuid=node_uuid,
                volume_type=info['driver_volume_type'],
                properties=info['data'],
                boot_index=bdm._bdm_obj.boot_index,
                volume_id=bdm._bdm_obj.volume_id)
        except ironic.IronicError as e:
            raise exception.InstanceDeployFailure(
                reason='cannot add volume target of volume %s to node %s: '
                '%s' % (bdm._bdm_obj.volume_id, node_uuid, e)) from e


def remove_targets(client: ironic.Ironic, node_uuid: str,
                   volume_ids: set[str] | None = None) -> bool:
    """Remove the node's volume targets; failures are logged, not raised.

    With ``volume_ids``, only the targets of those volumes.

    :returns: whether every one of them is gone.
    """
    removed = True
    for target in client.volume_targets(node_uuid):
        if volume_ids is not None and target.volume_id not in volume_ids:
            continue
        try:
            client.delete_volume_target(target.uuid)
        except ironic.NodeNotFound:
            pass
        except ironic.IronicError as e:
            LOG.warning('Cannot remove volume target %(target)s of volume '
                        '%(volume)s from node %(node)s: %(error)s',
                        {'target': target.uuid, 'volume': target.volume_id,
                         'node': node_uuid, 'error': e})
            removed = False
    return removed


def has_targets(client: ironic.Ironic, node_uuid: str,
                volume_ids: set[str]) -> bool:
    """Whether the node has a volume target of one of ``volume_ids``."""
    return any(t.volume_id in volume_ids
               for t in client.volume_targets(node_uuid))


def remove_stale_targets(client: ironic.Ironic, node_uuid: str) -> None:
    """Before a deploy, remove every volume target already on the node.

    The node is reserved for the instance being deployed, whose own targets
    are (re)created from its current connection info right after: whatever
    is there belongs to no instance of this node (a previous tenant's, left
    when its tear-down ran into cleaning, or a failed attempt's).

    :raises nova.exception.InstanceDeployFailure: one cannot be removed;
        deploying would attach a volume that is not this instance's.
    """
    try:
        for target in client.volume_targets(node_uuid):
            LOG.info('Removing stale volume target %(target)s of volume '
                     '%(volume)s from node %(node)s before its deploy',
                     {'target': target.uuid, 'volume': target.volume_id,
                      'node': node_uuid})
            try:
                client.delete_volume_target(target.uuid)
            except ironic.NodeNotFound:
                pass
    except ironic.IronicError as e:
        raise exception.InstanceDeployFailure(
            reason='cannot remove the stale volume targets of node %s: %s'
            % (node_uuid, e)) from e


def _vif_for_macs(client: ironic.Ironic, node_uuid: str,
                  macs: list[str]) -> str | None:
    for mac in macs:
        for port in (client.portgroups(node_uuid, address=mac) +
                     client.ports(node_uuid, address=mac)):
            vif = vifs.vif_of(port)
            if vif:
                return vif
    return None


def _ip(client: ironic.Ironic, instance: Any, node_uuid: str,
        values: dict[str, list[str]]) -> str | None:
    if values.get('ip'):
        return values['ip'][0]
    vif = _vif_for_macs(client, node_uuid, values.get('mac', []))
    fixed = [ip for v in instance.get_network_info()
             if vif is None or v['id'] == vif for ip in v.fixed_ips()]
    v4 = [ip for ip in fixed if ip['version'] == 4]
    chosen = (v4 or fixed or [None])[0]
    return chosen['address'] if chosen else None


def connector(client: ironic.Ironic, instance: Any,
              arch: str | None) -> dict[str, Any]:
    """Cinder connector properties from the node's volume connectors."""
    node_uuid = instance.node
    values: dict[str, list[str]] = {}
    for conn in client.volume_connectors(node_uuid):
        values.setdefault(conn.type, []).append(conn.connector_id)
    props: dict[str, Any] = {}
    ip = _ip(client, instance, node_uuid, values)
    if ip:
        props['ip'] = props['host'] = ip
    if values.get('iqn'):
        props['initiator'] = values['iqn'][0]
    if values.get('wwpn'):
        props['wwpns'] = values['wwpn']
    if values.get('wwnn'):
        props['wwnns'] = values['wwnn']
    props['platform'] = arch
    props['os_type'] = 'baremetal'
    # cinder drivers log the host; without an IP, use the instance's name.
    props.setdefault('host', instance.hostname)
    props['multipath'] = False
    return props
