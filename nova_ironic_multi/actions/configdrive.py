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
"""The config drive of a bare-metal instance, and its network metadata.

The drive is built by nova's own builder, gzipped and base64-encoded, and
handed to Ironic as *bytes*: python-ironicclient takes a ``str`` config
drive for a file path.
"""

from __future__ import annotations

import base64
import gzip
import os
import tempfile
from typing import Any

from nova.api.metadata import base as instance_metadata
from nova.virt import configdrive as nova_configdrive
from nova.virt import netutils

from nova_ironic_multi.actions import vifs
from nova_ironic_multi import ironic


def required(instance: Any) -> bool:
    return bool(nova_configdrive.required_by(instance))


def network_metadata(client: ironic.Ironic, node_uuid: str,
                     network_info: Any) -> dict[str, Any] | None:
    """``network_data.json``, with Ironic's port groups shown as bonds.

    A VIF attached to a port group is a bond of that group's ports, with
    the group's mode and properties (``bond_*``); a VIF attached to a port
    gets that port's MAC address.
    """
    metadata: dict[str, Any] | None = netutils.get_network_metadata(
        network_info)
    if metadata is None:
        # No network at all: no network_data.json either.
        return None
    ports = client.ports(node_uuid)
    groups = client.portgroups(node_uuid)
    by_vif_port = {v: p for p in ports if (v := vifs.vif_of(p))}
    by_vif_group = {v: g for g in groups if (v := vifs.vif_of(g))}
    extra_links = []
    for link in metadata['links']:
        vif = link['vif_id']
        group = by_vif_group.get(vif)
        if group is not None:
            members = [p for p in ports
                       if getattr(p, 'portgroup_uuid', None) == group.uuid]
            link.update({'type': 'bond', 'bond_mode': group.mode,
                         'bond_links': [p.uuid for p in members]})
            if group.address:
                link['ethernet_mac_address'] = group.address
            for key, value in (group.properties or {}).items():
                link[key if key.startswith('bond') else 'bond_' + key] = (
                    value)
            extra_links += [{'id': p.uuid, 'type': 'phy',
                             'ethernet_mac_address': p.address}
                            for p in members]
        elif vif in by_vif_port:
            link.update({'type': 'phy', 'ethernet_mac_address':
                         by_vif_port[vif].address})
    metadata['links'].extend(extra_links)
    return metadata


def build(client: ironic.Ironic, instance: Any, node_uuid: str,
          network_info: Any, admin_password: str | None,
          injected_files: Any) -> bytes:
    """The gzipped, base64-encoded ISO of the instance's config drive."""
    extra_md = {'admin_pass': admin_password} if admin_password else {}
    md = instance_metadata.InstanceMetadata(
        instance, content=injected_files, extra_md=extra_md,
        network_info=network_info,
        network_metadata=network_metadata(client, node_uuid, network_info))
    with tempfile.TemporaryDirectory() as tmp:
        iso = os.path.join(tmp, 'configdrive')
        with nova_configdrive.ConfigDriveBuilder(instance_md=md) as builder:
            builder.make_drive(iso)
        with open(iso, 'rb') as f:
            return base64.b64encode(gzip.compress(f.read()))
