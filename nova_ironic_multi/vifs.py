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


def plug(client: ironic.Ironic, node_uuid: str,
         network_info: Iterable[Any] | None) -> None:
    """Attach every VIF; one already attached (409) is fine.

    :raises nova.exception.VirtualInterfacePlugException: Ironic refused.
    """
    for vif in _ids(network_info):
        try:
            client.vif_attach(node_uuid, vif)
        except ironic.Conflict:
            LOG.debug('VIF %(vif)s already attached to node %(node)s',
                      {'vif': vif, 'node': node_uuid})
        except ironic.IronicError as e:
            raise exception.VirtualInterfacePlugException(
                'Cannot attach VIF %s to node %s: %s'
                % (vif, node_uuid, e)) from e


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
