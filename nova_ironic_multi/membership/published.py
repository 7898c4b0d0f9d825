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
"""The settings each host divides by, published where the CLI reads them.

Hosts that divide one scope by different rings, divide modes, membership
drivers or peer lists claim nodes twice or leave them unmanaged, and a
host's files do not say what its running process applies (a reload may
have been refused). So each host of this driver publishes the settings in
force, as the marker does (:mod:`.marker`): a custom trait in placement,
attached to nothing, named after its nova-compute service's UUID and
holding the settings, base32-encoded::

    CUSTOM_NOVA_IRONIC_MULTI_CFG_<service UUID in hex>_<settings>

``nova-ironic-multi upgrade check`` reads them all with one request. A
peer list is published as a digest; a conductor group or shard too long
for a trait's 255 characters too (hosts with the same value publish the
same digest).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any
import uuid

from oslo_log import log as logging

from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi.membership import marker

LOG = logging.getLogger(__name__)

PREFIX = 'CUSTOM_NOVA_IRONIC_MULTI_CFG_'
#: The layout of the encoded settings (its first field).
LAYOUT = 1
#: Placement's longest trait name.
LONGEST = 255


def digest(text: str) -> str:
    """A short, stable digest: '#' and 16 hex digits."""
    return '#' + hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a host divides by, as it published it."""

    #: ``algorithm/2^exponent``, as the period log shows it.
    ring: str
    divide: str
    membership: str
    #: None: every group (or shard); a long value: its :func:`digest`.
    conductor_group: str | None
    shard: str | None
    #: The :func:`digest` of the sorted peer list; None without one.
    peers: str | None

    @classmethod
    def of(cls, part: partition_mod.Partition) -> Settings:
        return cls(part.ring, part.divide, part.membership_driver,
                   part.scope.conductor_group, part.scope.shard,
                   digest(','.join(sorted(part.peers)))
                   if part.peers is not None else None)

    def scope(self) -> str:
        """The nodes it divides, as the CLI names them."""
        return partition_mod.Scope(self.conductor_group,
                                   self.shard).describe()

    def division(self) -> dict[str, str]:
        """The settings hosts of one scope must share, by option."""
        return {
            '[ironic_multi] ring_algorithm/hash_partition_exponent': self.ring,
            '[ironic_multi] divide': self.divide,
            '[ironic_multi] membership_driver': self.membership,
            'peer_list': ('digest %s' % self.peers.lstrip('#')
                          if self.peers else 'none'),
        }


def _encode(fields: list[Any]) -> str:
    text = json.dumps(fields, separators=(',', ':'))
    return base64.b32encode(text.encode()).decode().rstrip('=')


def name(service_uuid: str, settings: Settings) -> str:
    """The trait that publishes ``settings`` for the service."""
    head = '%s%s_' % (PREFIX, uuid.UUID(service_uuid).hex.upper())
    fields: list[Any] = [LAYOUT, settings.ring, settings.divide,
                         settings.membership, settings.conductor_group,
                         settings.shard, settings.peers]
    trait = head + _encode(fields)
    if len(trait) > LONGEST:
        fields[4:6] = [digest(v) if v is not None else None
                       for v in fields[4:6]]
        trait = head + _encode(fields)
    return trait


def parse(trait: str) -> tuple[str, Settings] | None:
    """``(service UUID, settings)`` of a trait of ours, or None."""
    if not trait.startswith(PREFIX):
        return None
    service, _, encoded = trait[len(PREFIX):].partition('_')
    try:
        fields = json.loads(base64.b32decode(
            encoded + '=' * (-len(encoded) % 8)).decode())
        if fields[0] != LAYOUT:
            return None
        return str(uuid.UUID(service)), Settings(*fields[1:7])
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def _names(prefix: str) -> list[str]:
    resp = marker.call('get', '/traits?name=startswith:%s' % prefix)
    if resp.status_code != 200:
        raise marker.refusal(resp, 'list the published settings')
    return list(resp.json()['traits'])


def read() -> dict[str, list[Settings]]:
    """Service UUID -> the settings it published (two while it changes).

    :raises marker.MarkerError: placement cannot say.
    """
    found: dict[str, list[Settings]] = {}
    for trait in _names(PREFIX):
        parsed = parse(trait)
        if parsed is not None:
            found.setdefault(parsed[0], []).append(parsed[1])
    return found


def publish(service_uuid: str, settings: Settings) -> bool:
    """Publish ``settings`` for the service, replacing what it had.

    The new trait first, then the old ones deleted: a reader sees two for
    a moment, never none. Whether anything changed.

    :raises marker.MarkerError: placement refused or cannot be reached.
    """
    want = name(service_uuid, settings)
    had = _names('%s%s_' % (PREFIX, uuid.UUID(service_uuid).hex.upper()))
    if want not in had:
        resp = marker.call('put', '/traits/%s' % want)
        if resp.status_code not in (201, 204):
            raise marker.refusal(resp, 'create the trait %s' % want)
    for old in had:
        if old != want:
            resp = marker.call('delete', '/traits/%s' % old)
            if resp.status_code not in (204, 404):
                raise marker.refusal(resp, 'delete the trait %s' % old)
    return want not in had or len(had) > 1
