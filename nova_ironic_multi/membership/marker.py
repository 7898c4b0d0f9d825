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
each service of this driver publishes a marker: a resource provider whose
UUID is the UUID of its nova-compute service record, named
``nova-ironic-multi <host> <UUID>``, with the trait :data:`TRAIT`, and with no
inventory (the scheduler never offers it). Other hypervisors never publish
one, and a host name reused by a new service record has a new UUID, so a
marker left by an older service under that name never counts (it stays,
harmless: it has no inventory; ``openstack resource provider delete``
removes it).

Every peer reads all markers with one request per period.
"""

from __future__ import annotations

from typing import Any

from keystoneauth1 import exceptions as ks_exc
from nova.scheduler.client import report
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: The trait every marker carries (a custom trait: placement's rules).
TRAIT = 'CUSTOM_NOVA_IRONIC_MULTI_HOST'
#: Placement microversion: ``required`` on listings (1.18), a created
#: provider in the answer (1.20).
VERSION = '1.20'


class MarkerError(RuntimeError):
    """Placement cannot be read or written now."""


def _client() -> Any:
    try:
        return report.report_client_singleton()
    except ks_exc.ClientException as e:
        raise MarkerError('cannot reach placement: %s' % e) from e


def _call(method: str, url: str, data: Any = None) -> Any:
    client = _client()
    try:
        if method == 'get':
            return client.get(url, version=VERSION)
        return getattr(client, method)(url, data, version=VERSION)
    except ks_exc.ClientException as e:
        raise MarkerError('placement %s %s failed: %s'
                          % (method.upper(), url, e)) from e


def _fail(resp: Any, what: str) -> MarkerError:
    return MarkerError('placement refused to %s: HTTP %s %s'
                       % (what, resp.status_code, resp.text[:200]))


def name(host: str, service_uuid: str) -> str:
    """The marker's provider name (unique, as placement requires)."""
    return 'nova-ironic-multi %s %s' % (host, service_uuid)


def read() -> frozenset[str]:
    """The nova-compute service UUIDs that carry a marker.

    :raises MarkerError: placement cannot say.
    """
    resp = _call('get', '/resource_providers?required=%s' % TRAIT)
    if resp.status_code == 400 and not _trait_exists():
        return frozenset()      # no host has published one yet
    if resp.status_code != 200:
        raise _fail(resp, 'list the markers')
    return frozenset(p['uuid'] for p in resp.json()['resource_providers'])


def _trait_exists() -> bool:
    resp = _call('get', '/traits?name=in:%s' % TRAIT)
    if resp.status_code != 200:
        raise _fail(resp, 'list the traits')
    return TRAIT in resp.json()['traits']


def publish(host: str, service_uuid: str) -> None:
    """Publish (or repair) the marker of the service ``service_uuid``.

    Idempotent: a marker already there is left as it is.

    :raises MarkerError: placement refused or cannot be reached.
    """
    url = '/resource_providers/%s' % service_uuid
    resp = _call('get', url)
    if resp.status_code == 404:
        resp = _call('post', '/resource_providers',
                     {'uuid': service_uuid,
                      'name': name(host, service_uuid)})
    if resp.status_code not in (200, 201):
        raise _fail(resp, 'create the marker %s' % service_uuid)
    generation = resp.json()['generation']
    resp = _call('put', '/traits/%s' % TRAIT)
    if resp.status_code not in (201, 204):
        raise _fail(resp, 'create the trait %s' % TRAIT)
    resp = _call('put', url + '/traits',
                 {'traits': [TRAIT],
                  'resource_provider_generation': generation})
    if resp.status_code != 200:
        raise _fail(resp, 'set %s on the marker %s' % (TRAIT, service_uuid))
    LOG.info('Published this host (%(host)s) as a nova-ironic-multi peer: '
             'placement provider %(uuid)s with trait %(trait)s.',
             {'host': host, 'uuid': service_uuid, 'trait': TRAIT})
