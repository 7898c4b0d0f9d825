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
"""The nova compute driver: adapts nova's ComputeDriver API, delegates."""

from __future__ import annotations

from typing import Any

from nova import exception
from nova.virt import driver as virt_driver
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi import partition

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
        self._host = CONF.host

    def init_host(self, host: str) -> None:
        self._host = host
        try:
            part = partition.resolve(CONF, host)
        except partition.InvalidPartition as e:
            LOG.error('Refusing to start: %s', e)
            raise exception.InvalidConfiguration(str(e)) from e
        LOG.info('nova-ironic-multi on %(host)s: %(part)s',
                 {'host': host, 'part': part.summary()})
