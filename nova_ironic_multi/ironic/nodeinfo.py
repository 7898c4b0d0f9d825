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
"""What the driver keeps of an Ironic node: small, immutable, shareable.

A service caches every node it manages, so the record holds only what the
driver reads, with repeated strings interned: a few hundred bytes a node.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import sys
import types
from typing import Any

from nova_ironic_multi.ironic import states

#: The node fields a single node read asks Ironic for.
FIELDS = ('uuid', 'instance_uuid', 'power_state', 'target_power_state',
          'provision_state', 'target_provision_state', 'maintenance',
          'resource_class', 'conductor_group', 'traits', 'properties',
          'last_error', 'reservation')
#: Needs microversion 1.82.
SHARD_FIELD = 'shard'
#: Needs microversion 1.49: the conductor serving the node, null when no
#: conductor of the node's group is alive.
CONDUCTOR_FIELD = 'conductor'
#: What the periodic listing asks for: what ownership and the resource
#: tracker read. Every field costs Ironic time on every node.
LISTING_FIELDS = ('uuid', 'instance_uuid', 'power_state', 'provision_state',
                  'maintenance', 'resource_class', 'traits', 'properties')


def listing_fields(scope: Any) -> list[str]:
    """The listing's fields, plus what checking ``scope`` needs."""
    fields = list(LISTING_FIELDS)
    if scope.conductor_group is not None:
        fields.append('conductor_group')
    if scope.shard is not None:
        fields.append(SHARD_FIELD)
    return fields


#: Node properties the driver reads (resources, scheduling stats).
PROPERTIES = ('cpu_arch', 'capabilities', 'cpus', 'memory_mb', 'local_gb')

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
_UNREAD = object()


def _intern(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) else value


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    uuid: str
    instance_uuid: str | None = None
    power_state: str | None = None
    target_power_state: str | None = None
    provision_state: str | None = None
    target_provision_state: str | None = None
    maintenance: bool = False
    resource_class: str | None = None
    conductor_group: str | None = None
    shard: str | None = None
    traits: tuple[str, ...] = ()
    properties: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: _EMPTY)
    last_error: str | None = None
    #: Ironic said no live conductor serves the node (``conductor`` asked
    #: for, and null): nothing moves it out of a state a conductor works
    #: in until one of its conductor group is back.
    unserved: bool = False
    #: Ironic said no conductor holds the node's lock (``reservation``
    #: asked for, and null): none is working on it now.
    unlocked: bool = False

    @classmethod
    def from_api(cls, node: Any) -> NodeInfo:
        """Build from a python-ironicclient node (or anything alike)."""
        props = getattr(node, 'properties', None) or {}
        kept = {k: props[k] for k in PROPERTIES if k in props}
        return cls(
            uuid=node.uuid,
            instance_uuid=getattr(node, 'instance_uuid', None),
            power_state=_intern(getattr(node, 'power_state', None)),
            target_power_state=_intern(
                getattr(node, 'target_power_state', None)),
            provision_state=_intern(getattr(node, 'provision_state', None)),
            target_provision_state=_intern(
                getattr(node, 'target_provision_state', None)),
            maintenance=bool(getattr(node, 'maintenance', False)),
            resource_class=_intern(getattr(node, 'resource_class', None)),
            conductor_group=_intern(getattr(node, 'conductor_group', None)),
            shard=_intern(getattr(node, 'shard', None)),
            traits=tuple(_intern(t) for t in
                         (getattr(node, 'traits', None) or ())),
            properties=types.MappingProxyType(kept) if kept else _EMPTY,
            last_error=getattr(node, 'last_error', None),
            unserved=getattr(node, CONDUCTOR_FIELD, _UNREAD) is None,
            unlocked=getattr(node, 'reservation', _UNREAD) is None,
        )

    @property
    def used(self) -> bool:
        """An instance is on the node (or being put on or taken off it)."""
        return self.instance_uuid is not None

    @property
    def unavailable(self) -> bool:
        """The node cannot take a new instance as it is.

        In maintenance, in a bad or unknown power state, or in any
        provision state but ``available``.
        """
        return (self.maintenance or
                self.power_state in (states.POWER_ERROR, states.NOSTATE) or
                self.provision_state not in (states.AVAILABLE,
                                             states.NOSTATE))


def idle(node: NodeInfo) -> bool:
    """Ironic is neither tearing the node down nor cleaning it now."""
    return (node.provision_state in (states.AVAILABLE, states.MANAGEABLE) and
            node.target_provision_state is None)
