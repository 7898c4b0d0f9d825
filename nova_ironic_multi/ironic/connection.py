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
"""Reaching Ironic: Keystone, the service catalog, the API version.

The connection reuses nova's ``[ironic]`` keystoneauth options; every
request has a timeout (``[ironic] timeout``, else ``[ironic_multi]
request_timeout``). A refusal by Keystone or a catalog without Ironic is
:class:`~nova_ironic_multi.ironic.errors.IronicMisconfigured`, naming the
options to check; Keystone down is an outage. Microversions are negotiated
(1.46 at least; 1.82 when Ironic has it, for shards), and an Ironic too old
is told which version it offers and which is needed.
"""

from __future__ import annotations

import logging as std_logging
import re
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from nova_ironic_multi.ironic import errors

GROUP = 'ironic'
MIN_VERSION = (1, 46)        # conductor_group filter and field
CONDUCTOR_VERSION = (1, 49)  # conductor field
SHARD_VERSION = (1, 82)      # shard filter and field
NEGOTIATE = ['%d.%d' % MIN_VERSION, '%d.%d' % SHARD_VERSION]


#: What an operator checks when Keystone refuses the service user.
CREDENTIAL_OPTIONS = (
    '[ironic] auth_url, auth_type, username, password, user_domain_name, '
    'project_name and project_domain_name (or application_credential_id '
    'and application_credential_secret with auth_type = '
    'v3applicationcredential)')
NO_AUTH = ('No Ironic endpoint: [ironic] has neither endpoint_override nor '
           'auth_type. Set [ironic] endpoint_override, or set %s so that '
           'the endpoint is found in the service catalog.'
           % CREDENTIAL_OPTIONS)
#: What decides which catalog endpoint is Ironic's.
CATALOG_OPTIONS = ('[ironic] service_type, valid_interfaces and region_name '
                   '(or set [ironic] endpoint_override)')


def _keystone_down(error: BaseException) -> bool:
    """Whether ``error`` comes from Keystone being unreachable or failing.

    keystoneauth reports an unreachable ``auth_url`` as a discovery failure
    when it cannot tell the API version from the URL; the connection error
    is then its context. That is an outage, not a configuration error.
    """
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, (ks_exc.ConnectionError, ks_exc.RequestTimeout,
                             ks_exc.HttpServerError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def auth_error(conf: cfg.ConfigOpts, error: Exception) -> errors.IronicError:
    """The exception of this module for a keystoneauth failure."""
    group = conf[GROUP]
    if _keystone_down(error):
        return errors.IronicUnavailable(
            'Keystone at %s cannot be reached or failed: %s'
            % (group.auth_url, error))
    if isinstance(error, (ks_exc.EndpointNotFound, ks_exc.EmptyCatalog,
                          ks_exc.CatalogException)):
        return errors.IronicMisconfigured(
            'The service catalog has no %s endpoint with interface %s in '
            'region %s (%s): check %s.'
            % (group.service_type, ','.join(group.valid_interfaces or ()),
               group.region_name, error, CATALOG_OPTIONS))
    if isinstance(error, ks_exc.MissingAuthPlugin):
        return errors.IronicMisconfigured(NO_AUTH)
    if isinstance(error, (ks_exc.OptionError, ks_exc.AuthPluginException)):
        return errors.IronicMisconfigured(
            'The [ironic] authentication options are incomplete (%s): set '
            '%s.' % (error, CREDENTIAL_OPTIONS))
    return errors.IronicMisconfigured(
        'Keystone at %s rejected the service user of [ironic] (auth_type '
        '%s): %s. Check %s.'
        % (group.auth_url, group.auth_type, error, CREDENTIAL_OPTIONS))


def session_and_endpoint(conf: cfg.ConfigOpts) -> tuple[Any, str]:
    """Authenticate and find Ironic, as nova's ``[ironic]`` says.

    Without ``endpoint_override`` the endpoint comes from the service
    catalog of the token (``service_type``, ``valid_interfaces``,
    ``region_name``), so this is also the first request to Keystone.

    :raises errors.IronicMisconfigured: Keystone refused the credentials, the
        options are incomplete, or the catalog has no matching Ironic.
    :raises errors.IronicUnavailable: Keystone cannot be reached.
    """
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(
            conf, GROUP, auth=auth)
        if not conf[GROUP].timeout:
            session.timeout = conf.ironic_multi.request_timeout
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, GROUP, session=session, auth=auth)
        endpoint = adapter.get_endpoint()
    except ks_exc.ClientException as e:
        raise auth_error(conf, e) from e
    if not endpoint:
        if auth is None:
            raise errors.IronicMisconfigured(NO_AUTH)
        raise auth_error(conf, ks_exc.EndpointNotFound())
    return session, endpoint


def version_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split('.')
    return int(major), int(minor)


#: The range in python-ironicclient's UnsupportedVersion (wrapped text).
_RANGE = re.compile(r'range\s+is:?\s+(\S+)\s+to\s+(\d+\.\d+)')


def too_old(endpoint: str, offered: Any) -> str:
    """What an Ironic too old for this driver offers, and what it needs.

    :param offered: the version negotiated, or python-ironicclient's
        ``UnsupportedVersion`` (its message holds the range Ironic offers).
    """
    m = _RANGE.search(str(offered))
    if m:
        what = 'API versions %s to %s' % m.groups()
    elif isinstance(offered, str):
        what = 'API %s at most' % offered
    else:
        what = 'no API version this driver can use (%s)' % offered
    return ('Ironic at %s offers %s; this driver needs %d.%d or newer '
            '(%d.%d for [ironic_multi] divide = shards). Fix: upgrade '
            'Ironic (nova-compute uses the new version without a restart) '
            'or point [ironic] at a newer one.'
            % ((endpoint, what) + MIN_VERSION + SHARD_VERSION))


class _ClientRetryLog(std_logging.Filter):
    """Drops python-ironicclient's own retry-loop lines.

    With its retries off, the client logs every 503 or failed connection
    at ERROR ("Attempt 1 of 1") before raising it, even when
    the session's ``_call`` then retries and succeeds; ``_call`` logs
    what really happens.
    """

    def filter(self, record: std_logging.LogRecord) -> bool:
        return not str(record.msg).startswith(
            'Error contacting Ironic server')


_CLIENT_LOG = 'ironicclient.common.http'


def quiet_client_retry_log() -> None:
    logger = std_logging.getLogger(_CLIENT_LOG)
    if not any(isinstance(f, _ClientRetryLog) for f in logger.filters):
        logger.addFilter(_ClientRetryLog())
