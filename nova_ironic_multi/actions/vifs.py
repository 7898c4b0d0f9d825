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
"""Attaching neutron ports (VIFs) to nodes through Ironic."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nova import exception
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import ironic

LOG = logging.getLogger(__name__)


def _ids(network_info: Iterable[Any] | None) -> list[str]:
    return [str(vif['id']) for vif in (network_info or [])]


def vif_of(port: Any) -> str | None:
    """The VIF attached to an Ironic port or port group, if any."""
    internal = getattr(port, 'internal_info', None) or {}
    extra = getattr(port, 'extra', None) or {}
    vif: str | None = (internal.get('tenant_vif_port_id') or
                       extra.get('vif_port_id'))
    return vif


def plug_error(reason: str) -> Exception:
    error: Exception = exception.VirtualInterfacePlugException(reason)
    return error


def unplug_error(reason: str) -> Exception:
    error: Exception = exception.VirtualInterfaceUnplugException(
        reason=reason)
    return error


def plug(client: ironic.Ironic, node_uuid: str,
         network_info: Iterable[Any] | None) -> None:
    """Attach every VIF.

    A 409 is success only when the VIF is already attached to this node.
    A locked node is retried as nova's ``[ironic] api_max_retries`` and
    ``api_retry_interval`` say; any other refusal is an error.

    :raises nova.exception.VirtualInterfacePlugException: Ironic refused.
    """
    for vif in _ids(network_info):
        _attach(client, node_uuid, vif)


def _attach(client: ironic.Ironic, node_uuid: str, vif: str) -> None:
    # Ironic.vif_attach already retried a locked node.
    try:
        client.vif_attach(node_uuid, vif)
        return
    except ironic.Conflict as e:
        conflict = e
    except ironic.IronicError as e:
        raise plug_error('cannot attach VIF %s to node %s: %s'
                         % (vif, node_uuid, e)) from e
    if _attached(client, node_uuid, vif, conflict):
        LOG.debug('VIF %(vif)s already attached to node %(node)s',
                  {'vif': vif, 'node': node_uuid})
        return
    if ironic.is_node_locked(conflict):
        raise plug_error('cannot attach VIF %s to node %s: the node stayed '
                         'locked through [ironic] api_max_retries = %d '
                         'retries: %s'
                         % (vif, node_uuid,
                            cfg.CONF[ironic.GROUP].api_max_retries,
                            conflict)) from conflict
    raise plug_error('Ironic refused to attach VIF %s to node %s (it is not '
                     'attached there): %s'
                     % (vif, node_uuid, conflict)) from conflict


def _attached(client: ironic.Ironic, node_uuid: str, vif: str,
              conflict: ironic.Conflict) -> bool:
    """Whether Ironic lists ``vif`` on the node (after a 409)."""
    try:
        return vif in client.vif_list(node_uuid)
    except ironic.IronicError as e:
        raise plug_error('attaching VIF %s to node %s was refused (%s) and '
                         'its VIFs cannot be listed: %s'
                         % (vif, node_uuid, conflict, e)) from e


def unplug(client: ironic.Ironic, node_uuid: str,
           network_info: Iterable[Any] | None) -> None:
    """Detach every VIF; one not attached (400) is fine.

    :raises nova.exception.VirtualInterfaceUnplugException: Ironic failed.
    """
    for vif in _ids(network_info):
        try:
            client.vif_detach(node_uuid, vif)
        except ironic.BadRequest:
            LOG.debug('VIF %(vif)s is not attached to node %(node)s',
                      {'vif': vif, 'node': node_uuid})
        except ironic.IronicError as e:
            raise exception.VirtualInterfaceUnplugException(
                reason='cannot detach VIF %s from node %s: %s'
                % (vif, node_uuid, e)) from e
