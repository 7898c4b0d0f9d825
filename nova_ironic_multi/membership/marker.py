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
"""Which nova-compute services run this driver: a marker in placement.

nova records no driver per service, and a host of this driver whose share
is empty has no compute node to tell it apart from a libvirt host that has
just started (or keeps crashing before it creates its compute node). So
each service of this driver publishes a marker: a custom trait in
placement named after the UUID of its nova-compute service record,
``CUSTOM_NOVA_IRONIC_MULTI_HOST_<UUID in hex>``. The trait is attached to
nothing (no provider, no inventory: the scheduler never sees it). Other
hypervisors never publish one, and a host name reused by a new service
record has a new UUID, so a marker left by an older service under that
name never counts (it stays, harmless; ``openstack --os-placement-api-version
1.6 trait delete NAME`` removes it).

Every peer reads all markers with one request per period.
"""

from __future__ import annotations

from typing import Any
import uuid

from keystoneauth1 import exceptions as ks_exc
from nova.scheduler.client import report
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: Every marker's name starts with this (a custom trait: placement's rules).
PREFIX = 'CUSTOM_NOVA_IRONIC_MULTI_HOST_'
#: Placement microversion: traits and their ``startswith:`` filter (1.6).
VERSION = '1.6'


class MarkerError(RuntimeError):
    """Placement cannot be read or written now."""


def _client() -> Any:
    try:
        return report.report_client_singleton()
    except ks_exc.ClientException as e:
        raise MarkerError('cannot reach placement: %s' % e) from e


def call(method: str, url: str, data: Any = None) -> Any:
    client = _client()
    try:
        if method in ('get', 'delete'):
            return getattr(client, method)(url, version=VERSION)
        return getattr(client, method)(url, data, version=VERSION)
    except ks_exc.ClientException as e:
        raise MarkerError('placement %s %s failed: %s'
                          % (method.upper(), url, e)) from e


def refusal(resp: Any, what: str) -> MarkerError:
    return MarkerError('placement refused to %s: HTTP %s %s'
                       % (what, resp.status_code, resp.text[:200]))


def name(service_uuid: str) -> str:
    """The marker of the nova-compute service ``service_uuid``."""
    return PREFIX + uuid.UUID(service_uuid).hex.upper()


def read() -> frozenset[str]:
    """The nova-compute service UUIDs that carry a marker.

    :raises MarkerError: placement cannot say.
    """
    resp = call('get', '/traits?name=startswith:%s' % PREFIX)
    if resp.status_code != 200:
        raise refusal(resp, 'list the markers')
    found = set()
    for trait in resp.json()['traits']:
        try:
            found.add(str(uuid.UUID(trait[len(PREFIX):])))
        except ValueError:
            continue        # not one of ours
    return frozenset(found)


def publish(host: str, service_uuid: str) -> None:
    """Publish the marker of the service ``service_uuid`` (idempotent).

    :raises MarkerError: placement refused or cannot be reached.
    """
    trait = name(service_uuid)
    resp = call('put', '/traits/%s' % trait)
    if resp.status_code not in (201, 204):
        raise refusal(resp, 'create the trait %s' % trait)
    LOG.info('Published this host (%(host)s) as a nova-ironic-multi peer: '
             'placement trait %(trait)s.', {'host': host, 'trait': trait})
