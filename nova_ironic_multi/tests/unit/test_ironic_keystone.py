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
"""Finding Ironic through Keystone, and what its failures become.

A real keystoneauth session and a real python-ironicclient talk to a
Keystone and an Ironic that requests-mock plays: the token comes with a
service catalog built by keystoneauth's own fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
import datetime
import json
import os
import tempfile
from typing import Any

from keystoneauth1 import fixture as ks_fixture
from nova.conf import ironic as nova_ironic_conf
from nova.conf import utils as conf_utils
from oslo_config import cfg
import pytest
import requests
import requests_mock

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic

KEYSTONE = 'http://keystone.test/identity'
AUTH_URL = KEYSTONE + '/v3'
IRONIC = 'http://ironic.test:6385'
IRONIC_PUBLIC = 'http://public.test/baremetal'
REGION = 'RegionTwo'
PASSWORD = {'auth_type': 'password', 'auth_url': AUTH_URL,
            'username': 'nova', 'password': 'secret',
            'user_domain_name': 'Default', 'project_name': 'service',
            'project_domain_name': 'Default'}


def make_conf(**ironic_opts: str) -> Iterator[cfg.ConfigOpts]:
    """nova's ``[ironic]`` from a file, as nova-compute reads it.

    A file, not overrides: the auth plugin's own options (username, ...)
    are only registered when keystoneauth loads the plugin.
    """
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    conf_utils.register_ksa_opts(conf, 'ironic', 'baremetal')
    nim_conf.register_opts(conf)
    fd, path = tempfile.mkstemp(suffix='.conf')
    with os.fdopen(fd, 'w') as f:
        f.write('[ironic]\n' + ''.join('%s = %s\n' % kv
                                       for kv in ironic_opts.items()))
    try:
        conf([], project='nova', default_config_files=[path])
        yield conf
    finally:
        os.unlink(path)


@pytest.fixture
def password_conf() -> Iterator[cfg.ConfigOpts]:
    yield from make_conf(**PASSWORD, valid_interfaces='internal',
                         region_name=REGION)


def token(services: dict[str, list[tuple[str, str, str]]],
          expires_in: int = 3600) -> ks_fixture.V3Token:
    """A project-scoped token whose catalog has ``services``.

    ``{service type: [(interface, url, region)]}``
    """
    expires = (datetime.datetime.now(datetime.UTC) +
               datetime.timedelta(seconds=expires_in))
    tok = ks_fixture.V3Token(expires=expires.replace(tzinfo=None),
                             project_name='service', user_name='nova')
    for service_type, endpoints in services.items():
        service = tok.add_service(service_type)
        for interface, url, region in endpoints:
            service.add_endpoint(interface, url, region=region)
    return tok


#: The catalog of the e2e deployment: Ironic on two interfaces, two regions.
CATALOG = {
    'compute': [('internal', 'http://nova.test/v2.1', REGION)],
    'baremetal': [('internal', IRONIC, REGION),
                  ('public', IRONIC_PUBLIC, REGION),
                  ('internal', 'http://elsewhere.test:6385', 'RegionOne')],
}


def keystone(m: requests_mock.Mocker, tok: Any = None,
             status: int = 201, exc: Any = None) -> Any:
    """Keystone's version document and its token endpoint."""
    m.get(AUTH_URL, json=ks_fixture.V3Discovery(AUTH_URL))
    m.get(KEYSTONE, json={'versions': {'values': [
        ks_fixture.V3Discovery(AUTH_URL)]}}, status_code=300)
    if exc is not None:
        return m.post(AUTH_URL + '/auth/tokens', exc=exc)
    if status != 201:
        return m.post(AUTH_URL + '/auth/tokens', status_code=status,
                      json={'error': {'code': status, 'title': 'Nope',
                                      'message': 'The request you have '
                                      'made requires authentication.'}})
    return m.post(AUTH_URL + '/auth/tokens', json=tok or token(CATALOG),
                  headers={'X-Subject-Token': 'a-token'}, status_code=201)


def ironic_api(m: requests_mock.Mocker, base: str = IRONIC) -> Any:
    """Ironic's version negotiation and an empty node listing."""
    versions = {'X-OpenStack-Ironic-API-Minimum-Version': '1.1',
                'X-OpenStack-Ironic-API-Maximum-Version': '1.99',
                'Content-Type': 'application/json'}
    m.get(base + '/v1', json={'id': 'v1'}, headers=versions)
    return m.get(base + '/v1/nodes/', json={'nodes': []}, headers=versions)


def test_finds_ironic_in_the_catalog_by_interface_and_region(
        password_conf: cfg.ConfigOpts) -> None:
    with requests_mock.Mocker() as m:
        tokens = keystone(m)
        nodes = ironic_api(m)
        client = ironic.Ironic(password_conf)
        client.connect()
        assert client.list_nodes(partition.Scope()) == []
    body = json.loads(tokens.last_request.body)['auth']
    assert body['identity']['password']['user']['name'] == 'nova'
    assert body['scope']['project']['name'] == 'service'
    # The internal endpoint of RegionTwo, with the token on it.
    assert nodes.last_request.url.startswith(IRONIC + '/v1/nodes/')
    assert nodes.last_request.headers['X-Auth-Token'] == 'a-token'


def test_valid_interfaces_pick_the_endpoint() -> None:
    for conf in make_conf(**PASSWORD, valid_interfaces='public',
                          region_name=REGION):
        with requests_mock.Mocker() as m:
            keystone(m)
            nodes = ironic_api(m, IRONIC_PUBLIC)
            ironic.Ironic(conf).list_nodes(partition.Scope())
        assert nodes.called


def test_an_application_credential_works_the_same() -> None:
    for conf in make_conf(auth_type='v3applicationcredential',
                          auth_url=AUTH_URL,
                          application_credential_id='cred-id',
                          application_credential_secret='cred-secret',
                          valid_interfaces='internal', region_name=REGION):
        with requests_mock.Mocker() as m:
            tokens = keystone(m)
            nodes = ironic_api(m)
            ironic.Ironic(conf).connect()
            ironic.Ironic(conf).list_nodes(partition.Scope())
        identity = json.loads(tokens.last_request.body)['auth']['identity']
        assert identity['methods'] == ['application_credential']
        assert identity['application_credential'] == {
            'id': 'cred-id', 'secret': 'cred-secret'}
        assert nodes.called


def test_wrong_password_names_the_options_to_fix(
        password_conf: cfg.ConfigOpts) -> None:
    with requests_mock.Mocker() as m:
        keystone(m, status=401)
        with pytest.raises(ironic.IronicMisconfigured) as e:
            ironic.Ironic(password_conf).connect()
    text = str(e.value)
    assert 'Keystone at %s rejected the service user' % AUTH_URL in text
    for option in ('[ironic] auth_url', 'username', 'password',
                   'project_name', 'application_credential_id'):
        assert option in text, text


@pytest.mark.parametrize('catalog', [
    # No Ironic at all.
    {'compute': CATALOG['compute']},
    # Ironic, but only on an interface nova is not told to use.
    {'baremetal': [('public', IRONIC_PUBLIC, REGION)]},
    # Ironic, but only in another region.
    {'baremetal': [('internal', IRONIC, 'RegionOne')]},
], ids=['no-baremetal', 'other-interface', 'other-region'])
def test_catalog_without_ironic_names_the_options_to_fix(
        password_conf: cfg.ConfigOpts,
        catalog: dict[str, list[tuple[str, str, str]]]) -> None:
    with requests_mock.Mocker() as m:
        keystone(m, tok=token(catalog))
        with pytest.raises(ironic.IronicMisconfigured) as e:
            ironic.Ironic(password_conf).connect()
    text = str(e.value)
    assert ('no baremetal endpoint with interface internal in region '
            'RegionTwo' in text), text
    for option in ('[ironic] service_type', 'valid_interfaces',
                   'region_name', 'endpoint_override'):
        assert option in text, text


def test_incomplete_auth_options_name_the_options_to_fix() -> None:
    for conf in make_conf(auth_type='password', username='nova'):
        with pytest.raises(ironic.IronicMisconfigured,
                           match=r'\[ironic\] authentication options are '
                           r'incomplete .*auth.url.*: set \[ironic\] '
                           r'auth_url'):
            ironic.Ironic(conf).connect()


@pytest.mark.parametrize('auth_url', [AUTH_URL, KEYSTONE])
def test_keystone_down_at_connect_is_an_outage_not_a_misconfiguration(
        auth_url: str) -> None:
    # Without /v3 keystoneauth must discover the version first, and
    # reports the refused connection as a discovery failure.
    opts = dict(PASSWORD, auth_url=auth_url)
    for conf in make_conf(**opts, valid_interfaces='internal',
                          region_name=REGION):
        with requests_mock.Mocker() as m:
            m.get(auth_url, exc=requests.exceptions.ConnectionError)
            m.post(AUTH_URL + '/auth/tokens',
                   exc=requests.exceptions.ConnectionError)
            with pytest.raises(ironic.IronicUnavailable) as e:
                ironic.Ironic(conf).connect()
        assert not isinstance(e.value, ironic.IronicMisconfigured)
        assert 'cannot be reached' in str(e.value)


def test_keystone_failing_is_an_outage(
        password_conf: cfg.ConfigOpts) -> None:
    with requests_mock.Mocker() as m:
        keystone(m, status=503)
        with pytest.raises(ironic.IronicUnavailable):
            ironic.Ironic(password_conf).connect()


def test_keystone_outage_during_a_period_is_an_outage(
        password_conf: cfg.ConfigOpts) -> None:
    """Connected earlier; the token must be renewed while Keystone is down.

    The listing fails as an outage (the driver's period then reports
    VirtDriverNotReady) instead of returning no nodes, and works again
    once Keystone is back.
    """
    with requests_mock.Mocker() as m:
        # keystoneauth renews a token that expires within two minutes.
        tokens = keystone(m, tok=token(CATALOG, expires_in=60))
        nodes = ironic_api(m)
        client = ironic.Ironic(password_conf)
        client.connect()
        listed = nodes.call_count
        m.post(AUTH_URL + '/auth/tokens',
               exc=requests.exceptions.ConnectionError)
        with pytest.raises(ironic.IronicUnavailable):
            client.list_nodes(partition.Scope())
        assert nodes.call_count == listed
        tokens = keystone(m, tok=token(CATALOG, expires_in=60))
        assert client.list_nodes(partition.Scope()) == []
        assert tokens.called
