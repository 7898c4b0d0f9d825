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
"""Everything that talks to Ironic, through python-ironicclient.

* The connection reuses nova's ``[ironic]`` keystoneauth options; every
  request has a timeout (``[ironic] timeout``, else ``[ironic_multi]
  request_timeout``).
* python-ironicclient's own retries are off: it retries 409s, 503s and
  connection failures alike, so with nova's defaults one call to a dead
  Ironic would hang for minutes. Here only a 409 (node locked) is retried,
  as nova's ``[ironic] api_max_retries`` / ``api_retry_interval`` say, and
  never for the reservation, where a 409 is the answer: another instance
  holds the node. An outage fails at once, so the periodic refresh reports
  it in the same period.
* Microversions are negotiated once (1.46 at least; 1.82 when Ironic has
  it, for shards).
* The node listing pages with explicit markers and the scope filters on
  every request: Ironic's own ``next`` links drop the filters.
* Errors come out as the exceptions below, never as client or keystoneauth
  ones.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
import contextlib
import threading
import time
from typing import Any

from ironicclient import client as ir_client
from ironicclient import exc as ir_exc
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import nodeinfo
from nova_ironic_multi import partition

LOG = logging.getLogger(__name__)

GROUP = 'ironic'
MIN_VERSION = (1, 46)       # conductor_group filter and field
SHARD_VERSION = (1, 82)     # shard filter and field
NEGOTIATE = ['%d.%d' % MIN_VERSION, '%d.%d' % SHARD_VERSION]
#: Shard names per listing request: ``shard=a,b,...`` travels in the URL.
SHARDS_PER_REQUEST = 50


class IronicError(Exception):
    """A call to Ironic failed."""


class IronicUnavailable(IronicError):
    """Ironic cannot be reached, timed out, or answered with a 5xx."""


class NodeNotFound(IronicError):
    """Ironic answered 404 for the node."""


class Conflict(IronicError):
    """Ironic answered 409 (node locked or already associated)."""


class BadRequest(IronicError):
    """Ironic answered 400 (invalid request or state transition)."""


class VersionNotSupported(IronicError):
    """Ironic lacks the API microversion a feature needs."""


def version_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split('.')
    return int(major), int(minor)


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn client and keystoneauth exceptions into this module's."""
    try:
        yield
    except ir_exc.NotFound as e:
        raise NodeNotFound('%s: %s' % (what, e)) from e
    except ir_exc.Conflict as e:
        raise Conflict('%s: %s' % (what, e)) from e
    except ir_exc.BadRequest as e:
        raise BadRequest('%s: %s' % (what, e)) from e
    except ir_exc.UnsupportedVersion as e:
        raise VersionNotSupported('%s: %s' % (what, e)) from e
    except (ir_exc.HttpServerError, ir_exc.ServiceUnavailable,
            ir_exc.ConnectionRefused) as e:
        raise IronicUnavailable('%s: %s' % (what, e)) from e
    except ir_exc.ClientException as e:
        raise IronicError('%s: %s' % (what, e)) from e
    except ks_exc.ClientException as e:
        # Connection refused, timeouts, catalog and discovery failures.
        raise IronicUnavailable('%s: %s' % (what, e)) from e


class Ironic:
    """A thread-safe, lazily connected Ironic API client."""

    def __init__(self, conf: cfg.ConfigOpts,
                 sleep: Any = time.sleep) -> None:
        self._conf = conf
        self._lock = threading.Lock()
        self._client: Any = None
        self._version: tuple[int, int] | None = None
        self._sleep = sleep
        #: Requests sent, by kind; read by benchmarks and logs.
        self.requests: collections.Counter[str] = collections.Counter()

    # Connection ---------------------------------------------------------

    def _session_and_endpoint(self) -> tuple[Any, str]:
        conf = self._conf
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(conf, GROUP,
                                                            auth=auth)
        if not conf[GROUP].timeout:
            session.timeout = conf.ironic_multi.request_timeout
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, GROUP, session=session, auth=auth)
        hint = ('set [ironic] endpoint_override, or the [ironic] auth '
                'options so that the endpoint can be found in the service '
                'catalog')
        try:
            endpoint = adapter.get_endpoint()
        except ks_exc.ClientException as e:
            raise IronicUnavailable('No Ironic endpoint (%s): %s'
                                    % (e, hint)) from e
        if not endpoint:
            raise IronicUnavailable('No Ironic endpoint: %s' % hint)
        return session, endpoint

    def _connect(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            with translated('connecting to Ironic'):
                session, endpoint = self._session_and_endpoint()
                client = ir_client.get_client(
                    '1', session=session, endpoint=endpoint,
                    # A list negotiates the highest version both sides know.
                    os_ironic_api_version=NEGOTIATE,  # type: ignore[arg-type]
                    max_retries=0, retry_interval=0)
                negotiated = client.negotiate_api_version()
                self.requests['version'] += 1
            version = version_tuple(negotiated)
            if version < MIN_VERSION:
                raise VersionNotSupported(
                    'Ironic API %s is older than %d.%d, the oldest this '
                    'driver supports.' % ((negotiated,) + MIN_VERSION))
            self._client, self._version = client, version
            LOG.info('Connected to Ironic at %(url)s, API %(version)s',
                     {'url': endpoint, 'version': negotiated})
            return client

    @property
    def version(self) -> tuple[int, int]:
        self._connect()
        assert self._version is not None
        return self._version

    def _call(self, what: str, method: str, *args: Any, retry: bool = True,
              manager: str = 'node', **kwargs: Any) -> Any:
        """One API call; a 409 is retried only when ``retry``."""
        call = getattr(getattr(self._connect(), manager), method)
        attempts = 1 + (self._conf[GROUP].api_max_retries if retry else 0)
        for attempt in range(1, attempts + 1):
            self.requests[what] += 1
            try:
                with translated(what):
                    return call(*args, **kwargs)
            except Conflict as e:
                if attempt == attempts:
                    raise
                LOG.debug('%(what)s: %(error)s; retry %(n)d of %(max)d',
                          {'what': what, 'error': e, 'n': attempt,
                           'max': attempts - 1})
                self._sleep(self._conf[GROUP].api_retry_interval)

    # Reading nodes ------------------------------------------------------

    def _fields(self) -> list[str]:
        """Every field a single node read may need."""
        fields = list(nodeinfo.FIELDS)
        if self.version >= SHARD_VERSION:
            fields.append(nodeinfo.SHARD_FIELD)
        return fields

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False) -> list[nodeinfo.NodeInfo]:
        """Every node in ``scope``, one page per request.

        ``shards`` narrows the listing to the nodes of those shards (an
        empty sequence lists nothing, never everything) and ``sharded =
        False`` to the nodes without a shard; both need API 1.82 and add
        the ``shard`` field (``with_shard`` asks for it alone), so the caller
        can check each node. Many shard
        names are listed a batch at a time, so a request's URL stays short.

        Pages until Ironic returns an empty page, so the page size is
        whatever Ironic's ``[api] max_limit`` allows; duplicates (pages
        shifting under concurrent changes) are dropped. Only the fields a
        period needs are asked for: Ironic's time to serve them bounds the
        refresh. Scope is only a request here: the caller re-checks every
        node.

        :raises VersionNotSupported: the scope needs a filter Ironic lacks;
            managing every node instead would be wrong, so nothing is
            listed.
        """
        by_shard = shards is not None or sharded is not None or with_shard
        if by_shard:
            self.require_shards('Listing nodes by shard')
        if shards is not None:
            names = sorted(set(shards))
            found: list[nodeinfo.NodeInfo] = []
            for start in range(0, len(names), SHARDS_PER_REQUEST):
                found.extend(self._list_pages(
                    scope, by_shard, sharded=sharded,
                    shards=names[start:start + SHARDS_PER_REQUEST]))
            return found
        return self._list_pages(scope, by_shard, sharded=sharded)

    def _list_pages(self, scope: partition.Scope, with_shard: bool,
                    sharded: bool | None = None,
                    shards: list[str] | None = None
                    ) -> list[nodeinfo.NodeInfo]:
        fields = nodeinfo.listing_fields(scope)
        filters: dict[str, Any] = {'fields': fields}
        if with_shard:
            if nodeinfo.SHARD_FIELD not in fields:
                fields.append(nodeinfo.SHARD_FIELD)
            if shards is not None:
                filters['shards'] = shards
            if sharded is not None:
                filters['sharded'] = sharded
        if scope.conductor_group is not None:
            filters['conductor_group'] = scope.conductor_group
        if scope.shard is not None:
            if self.version < SHARD_VERSION:
                raise VersionNotSupported(
                    'Ironic API %d.%d cannot filter by shard (needs %d.%d); '
                    'refusing to manage nodes of every shard instead.'
                    % (self.version + SHARD_VERSION))
            filters['shards'] = [scope.shard]
        seen: set[str] = set()
        found: list[nodeinfo.NodeInfo] = []
        marker = None
        while True:
            # limit=None: exactly one request, never a followed "next".
            page = self._call('list', 'list', retry=False, marker=marker,
                              limit=None, **filters)
            if not page:
                return found
            for node in page:
                if node.uuid not in seen:
                    seen.add(node.uuid)
                    found.append(nodeinfo.NodeInfo.from_api(node))
            marker = page[-1].uuid

    def require_shards(self, why: str) -> None:
        """Fail closed when Ironic cannot filter or count by shard.

        :param why: the option that needs shards, for the message.
        :raises VersionNotSupported: Ironic's API is older than 1.82.
        """
        if self.version < SHARD_VERSION:
            raise VersionNotSupported(
                '%s needs Ironic API %d.%d (node shards); this Ironic offers '
                'at most %d.%d. Refusing to divide the listing (it would '
                'mean listing every node on every host). Fix: upgrade Ironic, '
                'or set [ironic_multi] divide = nodes.'
                % ((why,) + SHARD_VERSION + self.version))

    def shards(self) -> dict[str, int]:
        """Every shard name with its node count (``GET /v1/shards``).

        One grouped count on Ironic's side. Nodes without a shard are
        counted under the name ``'None'`` (Ironic writes ``str(None)``); a
        shard really called so cannot be told apart, so that name is kept:
        listing it by name returns only the nodes labelled ``None``.

        :raises VersionNotSupported: Ironic lacks API 1.82.
        """
        self.require_shards('Listing shards')
        found = self._call('shards', 'list', manager='shard')
        return {str(s.name): int(s.count) for s in found}

    def get_node(self, node_uuid: str) -> nodeinfo.NodeInfo:
        return nodeinfo.NodeInfo.from_api(
            self._call('get', 'get', node_uuid, fields=self._fields()))

    def node_for_instance(self,
                          instance_uuid: str) -> nodeinfo.NodeInfo | None:
        """The node an instance is on, or None if Ironic knows of none."""
        try:
            node = self._call('get', 'get_by_instance_uuid', instance_uuid,
                              fields=self._fields())
        except NodeNotFound:
            return None
        return nodeinfo.NodeInfo.from_api(node)

    def get_fields(self, node_uuid: str, fields: list[str]) -> Any:
        """Raw fields of a node (for the rare reads that need more)."""
        return self._call('get', 'get', node_uuid, fields=fields)

    # Changing nodes -----------------------------------------------------

    def reserve(self, node_uuid: str, instance_uuid: str) -> None:
        """Associate the node with the instance; never retried.

        :raises Conflict: another instance holds the node.
        """
        self._call('reserve', 'update', node_uuid,
                   [{'op': 'add', 'path': '/instance_uuid',
                     'value': instance_uuid}], retry=False)

    def release(self, node_uuid: str) -> None:
        """Drop the node's instance association and instance_info."""
        self._call('patch', 'update', node_uuid,
                   [{'op': 'remove', 'path': '/instance_uuid'},
                    {'op': 'remove', 'path': '/instance_info'}])

    def patch(self, node_uuid: str, patch: list[dict[str, Any]]) -> None:
        self._call('patch', 'update', node_uuid, patch)

    def validate(self, node_uuid: str) -> dict[str, dict[str, Any]]:
        """Interface name -> ``{'result': bool, 'reason': str}``."""
        result = self._call('validate', 'validate', node_uuid)
        raw = result.to_dict() if hasattr(result, 'to_dict') else result
        return {k: v for k, v in dict(raw).items() if isinstance(v, dict)}

    def set_provision_state(self, node_uuid: str, target: str,
                            **kwargs: Any) -> None:
        self._call('provision', 'set_provision_state', node_uuid, target,
                   **kwargs)

    def set_power_state(self, node_uuid: str, target: str,
                        soft: bool = False,
                        timeout: int | None = None) -> None:
        self._call('power', 'set_power_state', node_uuid, target, soft=soft,
                   timeout=timeout)

    def inject_nmi(self, node_uuid: str) -> None:
        self._call('nmi', 'inject_nmi', node_uuid)

    def vif_attach(self, node_uuid: str, vif_id: str) -> None:
        self._call('vif', 'vif_attach', node_uuid, vif_id, retry=False)

    def vif_detach(self, node_uuid: str, vif_id: str) -> None:
        self._call('vif', 'vif_detach', node_uuid, vif_id)

    def get_console(self, node_uuid: str) -> dict[str, Any]:
        console: dict[str, Any] = self._call('console', 'get_console',
                                             node_uuid)
        return console

    def set_console_mode(self, node_uuid: str, enabled: bool) -> None:
        self._call('console', 'set_console_mode', node_uuid, enabled)

    # Ports and volumes ---------------------------------------------------

    def ports(self, node_uuid: str, address: str | None = None) -> list[Any]:
        ports: list[Any] = self._call('ports', 'list', manager='port',
                                      node=node_uuid, address=address,
                                      detail=True)
        return ports

    def portgroups(self, node_uuid: str,
                   address: str | None = None) -> list[Any]:
        groups: list[Any] = self._call('ports', 'list', manager='portgroup',
                                       node=node_uuid, address=address,
                                       detail=True)
        return groups

    def volume_targets(self, node_uuid: str) -> list[Any]:
        targets: list[Any] = self._call('volumes', 'list',
                                        manager='volume_target',
                                        node=node_uuid, detail=True)
        return targets

    def create_volume_target(self, **fields: Any) -> None:
        self._call('volumes', 'create', manager='volume_target', **fields)

    def delete_volume_target(self, target_uuid: str) -> None:
        self._call('volumes', 'delete', target_uuid,
                   manager='volume_target')

    def volume_connectors(self, node_uuid: str) -> list[Any]:
        connectors: list[Any] = self._call('volumes', 'list',
                                           manager='volume_connector',
                                           node=node_uuid, detail=True)
        return connectors
