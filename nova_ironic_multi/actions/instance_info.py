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
"""The node's ``instance_info``: what Ironic needs to deploy an instance.

Written as one JSON PATCH before deploy and rebuild. The keys are the ones
Ironic's deploy interfaces and nova's in-tree driver agree on, so images,
flavors and traits behave the same after a migration to this driver.
"""

from __future__ import annotations

import re
from typing import Any

from oslo_serialization import jsonutils

from nova_ironic_multi.ironic import nodeinfo


# A trait extra spec as nova's scheduler and flavor API read it: ``trait``,
# an optional request-group suffix of 1 to 64 letters, digits, ``_`` or
# ``-`` (``trait1``, ``trait_FOO``, ``trait-x``), a colon, the trait name.
# The placement query required exactly these traits, so exactly these go to
# Ironic: the group does not matter to Ironic's deploy templates.
_TRAIT_KEY = re.compile(r'^trait(?:[a-zA-Z0-9_-]{1,64})?:(.*)$')


def _add(key: str, value: Any) -> dict[str, Any]:
    return {'op': 'add', 'path': '/instance_info/%s' % key, 'value': value}


def flavor_requests(extra_specs: dict[str, str],
                    image_traits: list[str]) -> tuple[dict[str, str],
                                                      list[str]]:
    """Capabilities and required traits asked for by flavor and image.

    ``capabilities:KEY = VALUE`` extra specs become capabilities;
    ``trait[SUFFIX]:NAME = required`` become traits, for every request-group
    suffix nova accepts (``trait1``, ``trait_FOO``, ``trait-x``), in the
    flavor's order and followed by the image's required traits, as nova's
    in-tree driver sends them. Forbidden traits are not sent: the scheduler
    already kept them out, and Ironic only matches required ones.
    """
    capabilities: dict[str, str] = {}
    traits: list[str] = []
    for key, value in extra_specs.items():
        prefix, sep, name = key.partition(':')
        if not sep:
            continue
        if prefix == 'capabilities':
            capabilities[name] = value
            continue
        match = _TRAIT_KEY.match(key)
        if match and value == 'required':
            traits.append(match.group(1))
    traits.extend(image_traits)
    return capabilities, traits


def _ips(network_info: Any, kind: str) -> list[Any]:
    if network_info is None:
        return []
    ips: list[Any] = getattr(network_info, kind)()
    return ips


def deploy_patch(node: nodeinfo.NodeInfo, instance: Any, image_meta: Any,
                 flavor: Any, metadata: Any, *,
                 boot_from_volume: bool = False,
                 preserve_ephemeral: bool | None = None,
                 ephemeral_format: str | None = None) -> list[dict[str, Any]]:
    """The JSON PATCH that puts an instance's deploy data on a node.

    :param metadata: nova's ``InstanceDriverMetadata`` for the instance.
    """
    patch = []
    if not boot_from_volume:
        patch.append(_add('image_source', image_meta.id))
    patch += [
        _add('root_gb', str(flavor.root_gb)),
        _add('swap_mb', str(flavor.swap)),
        _add('display_name', instance.display_name),
        _add('vcpus', str(flavor.vcpus)),
        _add('nova_host_id', instance.get('host')),
        _add('memory_mb', str(flavor.memory_mb)),
        _add('local_gb', str(node.properties.get('local_gb', 0))),
        _add('project_id', str(metadata.owner.projectid)),
        _add('project_name', str(metadata.owner.projectname)),
        _add('user_id', str(metadata.owner.userid)),
        _add('user_name', str(metadata.owner.username)),
        _add('flavor_name', str(metadata.flavor.name)),
        _add('fixed_ips', str(_ips(metadata.network_info, 'fixed_ips'))),
        _add('floating_ips',
             str(_ips(metadata.network_info, 'floating_ips'))),
    ]
    if flavor.ephemeral_gb:
        patch.append(_add('ephemeral_gb', str(flavor.ephemeral_gb)))
        if ephemeral_format:
            patch.append(_add('ephemeral_format', ephemeral_format))
    if preserve_ephemeral is not None:
        patch.append(_add('preserve_ephemeral', str(preserve_ephemeral)))
    image_traits = list(image_meta.properties.get('traits_required', []))
    capabilities, traits = flavor_requests(
        dict(flavor.extra_specs or {}), image_traits)
    if capabilities:
        patch.append(_add('capabilities', jsonutils.dumps(capabilities)))
    if traits:
        # A list, not JSON text: Ironic matches it against node traits.
        patch.append(_add('traits', traits))
    return patch
