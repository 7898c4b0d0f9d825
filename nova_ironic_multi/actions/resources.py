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
"""What a node is worth to nova: resources, inventory, traits, power.

A bare-metal node is one indivisible unit of one custom resource class, so
its inventory is ``total: 1``, reserved while it cannot take a new
instance. VCPU, memory and disk are reported as zero, as nova expects of
Ironic.
"""

from __future__ import annotations

from typing import Any

from nova.compute import power_state
from nova import exception
from nova.objects import fields as obj_fields
from nova import utils as nova_utils
from oslo_log import log as logging

from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)

HYPERVISOR_TYPE = 'ironic'
HYPERVISOR_VERSION = 1

_POWER: dict[str | None, int] = {
    states.POWER_ON: power_state.RUNNING,
    states.POWER_OFF: power_state.SHUTDOWN,
    states.NOSTATE: power_state.NOSTATE,
}


def power(state: str | None) -> int:
    """nova's power state for an Ironic power state."""
    try:
        return _POWER[state]
    except KeyError:
        LOG.warning('Unknown Ironic power state %r', state)
        nostate: int = power_state.NOSTATE
        return nostate


def cpu_arch(node: nodeinfo.NodeInfo) -> str | None:
    raw = node.properties.get('cpu_arch')
    try:
        arch: str | None = obj_fields.Architecture.canonicalize(raw)
    except exception.InvalidArchitectureName:
        arch = None
    if not arch:
        LOG.debug('Node %s has no usable cpu_arch (%r)', node.uuid, raw)
    return arch


def stats(node: nodeinfo.NodeInfo) -> dict[str, Any]:
    """Scheduler stats: the raw cpu_arch and the node's capabilities.

    ``capabilities`` is ``"k1:v1,k2:v2"`` in Ironic; each pair becomes a
    stat the ComputeCapabilitiesFilter can match.
    """
    result: dict[str, Any] = {'cpu_arch': node.properties.get('cpu_arch')}
    capabilities = node.properties.get('capabilities')
    if capabilities:
        for item in str(capabilities).split(','):
            key, sep, value = item.partition(':')
            if sep and key.strip() and value and ':' not in value:
                result[key.strip()] = value
            else:
                LOG.warning('Node %(node)s: ignoring malformed capability '
                            '%(cap)r, expected "key:value"',
                            {'node': node.uuid, 'cap': item})
    return result


def available_resource(node: nodeinfo.NodeInfo) -> dict[str, Any]:
    """The dictionary nova's resource tracker records for the node."""
    arch = cpu_arch(node)
    supported = ([(arch, obj_fields.HVType.BAREMETAL, obj_fields.VMMode.HVM)]
                 if arch else [])
    return {
        'uuid': node.uuid,
        'hypervisor_hostname': node.uuid,
        'hypervisor_type': HYPERVISOR_TYPE,
        'hypervisor_version': HYPERVISOR_VERSION,
        'resource_class': node.resource_class,
        # Every node is a different machine: no CPU model for the "host".
        'cpu_info': None,
        'vcpus': 0,
        'vcpus_used': 0,
        'local_gb': 0,
        'local_gb_used': 0,
        'disk_available_least': 0,
        'memory_mb': 0,
        'memory_mb_used': 0,
        'supported_instances': supported,
        'stats': stats(node),
        'numa_topology': None,
    }


def reserved(node: nodeinfo.NodeInfo, reserve_in_use: bool) -> bool:
    """Whether the node's one unit is reserved in placement.

    Unavailable nodes (maintenance, bad power, not ``available``) always
    are; nodes with an instance are too unless the operator set nova's
    ``[workarounds] skip_reserve_in_use_ironic_nodes``: when the instance
    goes, the node stays reserved until it is really available again.
    """
    return node.unavailable or (node.used and reserve_in_use)


def inventory(node: nodeinfo.NodeInfo,
              reserve_in_use: bool) -> dict[str, dict[str, Any]]:
    """Placement inventory of the node: one unit of its resource class.

    :raises nova.exception.NoResourceClass: the node has none.
    """
    if not node.resource_class:
        raise exception.NoResourceClass(node=node.uuid)
    name = nova_utils.normalize_rc_name(node.resource_class)
    return {name: {
        'total': 1,
        'reserved': int(reserved(node, reserve_in_use)),
        'min_unit': 1,
        'max_unit': 1,
        'step_size': 1,
        'allocation_ratio': 1.0,
    }}
