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

:class:`Ironic` holds the requests the driver, the periods and the commands
make: node reads and the listing, the reservation, provision and power
states, VIFs, consoles, ports, volume targets. How each is sent, retried
and judged after a lost answer is :mod:`.session`; reaching Ironic
(Keystone, the catalog, the API version) :mod:`.connection`; the errors
and their classification :mod:`.errors`; the listing's pages :mod:`.pages`.

* The node listing pages with explicit markers and the scope filters on
  every request: Ironic's own ``next`` links drop the filters.
* Errors come out as the exceptions of :mod:`.errors` (named here too),
  never as client or keystoneauth ones.
"""

from __future__ import annotations

from collections.abc import Sequence
import datetime
import itertools
from typing import Any

from oslo_log import log as logging

from nova_ironic_multi.division import partition
from nova_ironic_multi.ironic import acted
from nova_ironic_multi.ironic import connection
from nova_ironic_multi.ironic import errors
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import pages
from nova_ironic_multi.ironic import session

LOG = logging.getLogger(__name__)

# The names callers use, from where they live.
IronicError = errors.IronicError
IronicUnavailable = errors.IronicUnavailable
NodeNotFound = errors.NodeNotFound
Conflict = errors.Conflict
BadRequest = errors.BadRequest
VersionNotSupported = errors.VersionNotSupported
IronicMisconfigured = errors.IronicMisconfigured
is_transient = errors.is_transient
did_not_act = errors.did_not_act
is_node_locked = errors.is_node_locked
failure_kind = errors.failure_kind
translated = errors.translated
GROUP = connection.GROUP
MIN_VERSION = connection.MIN_VERSION
CONDUCTOR_VERSION = connection.CONDUCTOR_VERSION
SHARD_VERSION = connection.SHARD_VERSION
NEGOTIATE = connection.NEGOTIATE
CREDENTIAL_OPTIONS = connection.CREDENTIAL_OPTIONS
version_tuple = connection.version_tuple
Retry = session.Retry
NodePages = pages.NodePages
Changed = pages.Changed
#: Shard names per listing request: ``shard=a,b,...`` travels in the URL.
SHARDS_PER_REQUEST = 50
#: The name ``GET /v1/shards`` counts the nodes without a shard under.
UNSHARDED = 'None'


def parse_time(value: Any) -> datetime.datetime | None:
    """An Ironic timestamp (ISO 8601; naive ones are UTC), or None."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        when = value
    else:
        when = datetime.datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when


class Ironic(session.Session):
    """Ironic's API as this driver uses it; thread-safe."""

    # Reading nodes ------------------------------------------------------

    def _fields(self, conductor: bool = False) -> list[str]:
        """Every field a single node read may need.

        ``conductor`` (a read of one node by UUID only: Ironic 39 answers
        500 to a listing asked for it) adds the conductor serving it.
        """
        fields = list(nodeinfo.FIELDS)
        if conductor and self.version >= CONDUCTOR_VERSION:
            fields.append(nodeinfo.CONDUCTOR_FIELD)
        if self.version >= SHARD_VERSION:
            fields.append(nodeinfo.SHARD_FIELD)
        return fields

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False,
                   with_group: bool = False) -> list[nodeinfo.NodeInfo]:
        """Every node in ``scope``, one page per request.

        ``shards`` narrows the listing to the nodes of those shards (an
        empty sequence lists nothing, never everything) and ``sharded =
        False`` to the nodes without a shard; both need API 1.82 and add
        the ``shard`` field (``with_shard`` asks for it alone), so the caller
        can check each node; ``with_group`` adds ``conductor_group``. Many
        shard names are listed a batch at a time, so a request's URL stays
        short.

        Pages until Ironic says there is no more (a page without a
        ``next`` link, or an empty page), so the page size is whatever
        Ironic's ``[api] max_limit`` allows and a listing that fits one
        page is one request; duplicates (pages shifting under concurrent
        changes) are dropped. Only the fields a
        period needs are asked for: Ironic's time to serve them bounds the
        refresh. Scope is only a request here: the caller re-checks every
        node.

        :raises VersionNotSupported: the scope needs a filter Ironic lacks;
            managing every node instead would be wrong, so nothing is
            listed.
        """
        return self._listing(scope, shards, sharded, with_shard, with_group)

    def _listing(self, scope: partition.Scope,
                 shards: Sequence[str] | None, sharded: bool | None,
                 with_shard: bool, with_group: bool,
                 uuids_only: bool = False) -> list[nodeinfo.NodeInfo]:
        by_shard = shards is not None or sharded is not None or with_shard
        if by_shard:
            self.require_shards('Listing nodes by shard')
        if shards is not None:
            names = sorted(set(shards))
            found: list[nodeinfo.NodeInfo] = []
            for start in range(0, len(names), SHARDS_PER_REQUEST):
                found.extend(self._list_pages(
                    scope, by_shard, sharded=sharded,
                    shards=names[start:start + SHARDS_PER_REQUEST],
                    with_group=with_group, uuids_only=uuids_only))
            return found
        return self._list_pages(scope, by_shard, sharded=sharded,
                                with_group=with_group, uuids_only=uuids_only)

    def _list_pages(self, scope: partition.Scope, with_shard: bool,
                    sharded: bool | None = None,
                    shards: list[str] | None = None,
                    with_group: bool = False,
                    uuids_only: bool = False
                    ) -> list[nodeinfo.NodeInfo]:
        fields = ['uuid'] if uuids_only else nodeinfo.listing_fields(scope)
        if with_group and not uuids_only and 'conductor_group' not in fields:
            fields.append('conductor_group')
        filters: dict[str, Any] = {'fields': fields}
        if with_shard:
            if not uuids_only and nodeinfo.SHARD_FIELD not in fields:
                fields.append(nodeinfo.SHARD_FIELD)
            if shards is not None:
                filters['shards'] = shards
            if sharded is not None:
                filters['sharded'] = sharded
        if scope.conductor_group is not None:
            filters['conductor_group'] = scope.conductor_group
        if scope.shard is not None:
            if not self.offers(SHARD_VERSION):
                raise VersionNotSupported(
                    'Ironic API %d.%d cannot filter by shard (needs %d.%d); '
                    'refusing to manage nodes of every shard instead.'
                    % (self.version + SHARD_VERSION))
            filters['shards'] = [scope.shard]
        seen: set[str] = set()
        found: list[nodeinfo.NodeInfo] = []
        marker = None
        for requests in itertools.count(1):
            # limit=None: exactly one request, never a followed "next".
            # Not retried: the next period is the retry, and an outage
            # must not hold nova's resource tracker for minutes.
            page, more = self._call('list', 'page', retry=Retry.NEVER,
                                    manager='node_pages', marker=marker,
                                    limit=None, **filters)
            for node in page:
                if node.uuid not in seen:
                    seen.add(node.uuid)
                    found.append(nodeinfo.NodeInfo.from_api(node))
            if not page or not more:
                LOG.debug('Listed %(n)d Ironic nodes in %(pages)d '
                          'request(s) (%(filters)s)',
                          {'n': len(found), 'pages': requests,
                           'filters': pages.Filters(filters)})
                return found
            marker = page[-1].uuid
        raise AssertionError('unreachable')

    def changed_nodes(self, limit: int,
                      marker: str | None = None) -> pages.Changed:
        """A page of every node, most recently changed first.

        Sorted by ``updated_at`` descending (Ironic cannot filter on it nor
        serve it among ``fields``), with no scope filter: a change that
        moved a node out of a scope must be seen too. The nodes carry
        ``conductor_group`` and, on API 1.82, ``shard``. Never retried.
        """
        fields = list(nodeinfo.LISTING_FIELDS) + ['conductor_group']
        if self.version >= SHARD_VERSION:
            fields.append(nodeinfo.SHARD_FIELD)
        found, more = self._call(
            'list', 'page', retry=Retry.NEVER, manager='node_pages',
            marker=marker, limit=limit, sort_key='updated_at',
            sort_dir='desc', fields=fields)
        answered = getattr(self._client, 'node_pages', None)
        return pages.Changed(
            [nodeinfo.NodeInfo.from_api(n) for n in found], bool(more),
            answered.clock() if answered is not None else None)

    def updated_at(self, node_uuid: str) -> datetime.datetime | None:
        """When Ironic last changed the node (None: never since enrolled).

        One request, never retried.

        :raises NodeNotFound: the node is gone.
        """
        # A whole read: Ironic 39 refuses updated_at among ``fields`` (400
        # "Field updated_at is not a valid field"), of one node too.
        node = self._call('get', 'get', node_uuid, retry=Retry.NEVER)
        return parse_time(getattr(node, 'updated_at', None))

    def node_uuids(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None) -> set[str]:
        """The UUIDs :meth:`list_nodes` would list, read with only ``uuid``.

        The same filters and pages; never retried.
        """
        return {n.uuid for n in self._listing(scope, shards, sharded,
                                              False, False, uuids_only=True)}

    def require_shards(self, why: str) -> None:
        """Fail closed when Ironic cannot filter or count by shard.

        :param why: the option that needs shards, for the message.
        :raises VersionNotSupported: Ironic's API is older than 1.82 (asked
            again each time, so an upgraded Ironic is enough).
        """
        if not self.offers(SHARD_VERSION):
            raise VersionNotSupported(
                '%s needs Ironic API %d.%d (node shards); this Ironic does '
                'not offer it (API %d.%d in use). Refusing to divide the '
                'listing (it would mean listing every node on every host). '
                'Fix: upgrade Ironic, or set [ironic_multi] divide = nodes.'
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

    def get_node(self, node_uuid: str,
                 once: bool = False) -> nodeinfo.NodeInfo:
        """The node; with ``once``, asked once, never retried."""
        return nodeinfo.NodeInfo.from_api(
            self._call('get', 'get', node_uuid,
                       fields=self._fields(conductor=True),
                       retry=Retry.NEVER if once else Retry.ALWAYS))

    def node_exists(self, node_uuid: str) -> bool | None:
        """Whether Ironic has the node; None when Ironic cannot say.

        One request, never retried: nova asks this for every compute node
        no host reports, inside the resource-tracker period, and an answer
        of None (keep the record) is already the safe one. Retrying would
        hold the period for ``api_max_retries`` x ``api_retry_interval``
        seconds per such node during an outage.
        """
        try:
            self._call('get', 'get', node_uuid, retry=Retry.NEVER,
                       fields=['uuid'])
        except NodeNotFound:
            return False
        except IronicError:
            return None
        return True

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

    def _node_fields(self, node_uuid: str, fields: list[str]) -> Any:
        """A read for judging a lost answer (retried like any read)."""
        return self._call('get', 'get', node_uuid, fields=fields)

    def reserve(self, node_uuid: str, instance_uuid: str) -> None:
        """Associate the node with the instance; never retried.

        An answer lost after sending is judged from the node: the node
        holding this instance is a reservation made.

        :raises Conflict: another instance holds the node.
        """
        self._call('reserve', 'update', node_uuid,
                   [{'op': 'add', 'path': '/instance_uuid',
                     'value': instance_uuid}], retry=Retry.NEVER,
                   acted=lambda: self._node_fields(
                       node_uuid, ['instance_uuid']).instance_uuid ==
                   instance_uuid)

    def release(self, node_uuid: str) -> None:
        """Drop the node's instance association and instance_info.

        Not repeated once Ironic may have done it (a repeat is a 400: the
        paths are gone).
        """
        self._call('patch', 'update', node_uuid,
                   [{'op': 'remove', 'path': '/instance_uuid'},
                    {'op': 'remove', 'path': '/instance_info'}],
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: self._node_fields(
                       node_uuid, ['instance_uuid']).instance_uuid is None)

    def patch(self, node_uuid: str, patch: list[dict[str, Any]]) -> None:
        self._call('patch', 'update', node_uuid, patch)

    def validate(self, node_uuid: str) -> dict[str, dict[str, Any]]:
        """Interface name -> ``{'result': bool, 'reason': str}``."""
        result = self._call('validate', 'validate', node_uuid)
        raw = result.to_dict() if hasattr(result, 'to_dict') else result
        return {k: v for k, v in dict(raw).items() if isinstance(v, dict)}

    def set_provision_state(self, node_uuid: str, target: str,
                            **kwargs: Any) -> None:
        """Ask for a provision-state change (deploy, rebuild, ...).

        Retried only when Ironic surely did not act; an answer lost after
        sending is judged from the node's provision state (a repeat would
        be a 400 that fails a deploy under way). A rebuild ends where it
        starts, so the node is read first for it.
        """
        before = (self._node_fields(node_uuid, acted.PROVISION_FIELDS)
                  if acted.needs_before(target) else None)
        self._call('provision', 'set_provision_state', node_uuid, target,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: acted.provision(
                       target, self._node_fields(node_uuid,
                                                 acted.PROVISION_FIELDS),
                       before), **kwargs)

    def set_power_state(self, node_uuid: str, target: str,
                        soft: bool = False,
                        timeout: int | None = None) -> None:
        """Power on, off or reboot.

        On and off end the same however often asked (retried as reads
        are); a reboot is not
        repeated once Ironic may have taken it (the node is read first,
        and a lost answer is judged from its writes since).
        """
        if target == 'reboot':
            # (Whole reads: Ironic serves no updated_at among ``fields``.)
            before = self._call('get', 'get', node_uuid)
            self._call('power', 'set_power_state', node_uuid, target,
                       soft=soft, timeout=timeout, retry=Retry.ONCE_ACTED,
                       acted=lambda: acted.power(
                           target, self._call('get', 'get', node_uuid),
                           before))
            return
        self._call('power', 'set_power_state', node_uuid, target, soft=soft,
                   timeout=timeout)

    def inject_nmi(self, node_uuid: str) -> None:
        # Not idempotent, and it leaves no trace on the node: retried only
        # when Ironic surely did not get it, never after a lost answer.
        self._call('nmi', 'inject_nmi', node_uuid, retry=Retry.ONCE_ACTED)

    def vif_attach(self, node_uuid: str, vif_id: str) -> None:
        # A locked node is retried; any other 409 is an answer (see
        # vifs.plug). An answer lost after sending: the node's VIFs say.
        self._call('vif', 'vif_attach', node_uuid, vif_id,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: vif_id in self.vif_list(node_uuid))

    def vif_detach(self, node_uuid: str, vif_id: str) -> None:
        self._call('vif', 'vif_detach', node_uuid, vif_id,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: vif_id not in self.vif_list(node_uuid))

    def vif_list(self, node_uuid: str) -> list[str]:
        """The IDs of the VIFs attached to the node."""
        vifs: list[Any] = self._call('vif', 'vif_list', node_uuid)
        return [str(v.id) for v in vifs]

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

    def volume_targets(self, node_uuid: str,
                       once: bool = False) -> list[Any]:
        """The node's volume targets; with ``once``, never retried."""
        targets: list[Any] = self._call(
            'volumes', 'list', manager='volume_target', node=node_uuid,
            detail=True, retry=Retry.NEVER if once else Retry.ALWAYS)
        return targets

    def create_volume_target(self, **fields: Any) -> None:
        """Record a volume on the node; never created twice.

        A repeat after a lost answer would be a 409 that fails the build:
        the node's targets say whether Ironic created it.
        """
        node = fields['node_uuid']
        self._call('volumes', 'create', manager='volume_target',
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: acted.volume_target(
                       fields, self.volume_targets(node)), **fields)

    def delete_volume_target(self, target_uuid: str,
                             once: bool = False) -> None:
        """Delete a volume target; with ``once``, never retried."""
        self._call('volumes', 'delete', target_uuid,
                   manager='volume_target',
                   retry=Retry.NEVER if once else Retry.ALWAYS)

    def volume_connectors(self, node_uuid: str) -> list[Any]:
        connectors: list[Any] = self._call('volumes', 'list',
                                           manager='volume_connector',
                                           node=node_uuid, detail=True)
        return connectors
