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
"""An in-memory stand-in for :class:`nova_ironic_multi.ironic.Ironic`.

It keeps nodes as dictionaries and moves them through Ironic's states the
way a fake-hardware conductor does: a requested provision or power change
takes ``steps`` reads to finish. Every call is recorded in ``calls``;
``failures`` makes a named method raise (once per queued exception).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
import contextlib
import dataclasses
import datetime
from typing import Any
import uuid as uuidlib

from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import pages
from nova_ironic_multi.ironic import states
from nova_ironic_multi.tests.fixtures import change_feed

#: Ironic 39's provision state machine, as this fake's own table (written
#: from ``ironic/common/state_machine.py``, never imported): for each state,
#: the events the API may ask for and where each leads. Events only a
#: conductor raises (done, fail, wait, resume, hold, clean after delete)
#: are left out: no API request can ask for them.
MACHINE: dict[str | None, dict[str, str]] = {
    states.ENROLL: {'manage': 'verifying'},
    states.MANAGEABLE: {'provide': states.CLEANING,
                        'clean': states.CLEANING,
                        'inspect': 'inspecting', 'adopt': 'adopting'},
    states.AVAILABLE: {'deploy': states.DEPLOYING,
                       'manage': states.MANAGEABLE},
    states.ACTIVE: {'rebuild': states.DEPLOYING, 'delete': states.DELETING,
                    'rescue': states.RESCUING, 'service': states.SERVICING},
    # Nothing may be asked of a node while Ironic deploys it.
    states.DEPLOYING: {},
    states.DEPLOYWAIT: {'delete': states.DELETING,
                        'abort': states.DEPLOYFAIL},
    states.DEPLOYHOLD: {'unhold': states.DEPLOYWAIT,
                        'abort': states.DEPLOYFAIL},
    states.DEPLOYFAIL: {'rebuild': states.DEPLOYING,
                        'deploy': states.DEPLOYING,
                        'delete': states.DELETING},
    states.ERROR: {'rebuild': states.DEPLOYING, 'delete': states.DELETING},
    states.DELETING: {},
    states.CLEANING: {'manage': states.MANAGEABLE},
    states.CLEANWAIT: {'abort': states.CLEANFAIL},
    states.CLEANHOLD: {'abort': states.CLEANFAIL,
                       'unhold': states.CLEANWAIT},
    states.CLEANFAIL: {'manage': states.MANAGEABLE},
    states.RESCUING: {},
    states.RESCUEWAIT: {'abort': states.RESCUEFAIL,
                        'delete': states.DELETING},
    states.RESCUE: {'rescue': states.RESCUING,
                    'unrescue': states.UNRESCUING,
                    'delete': states.DELETING},
    states.RESCUEFAIL: {'rescue': states.RESCUING,
                        'unrescue': states.UNRESCUING,
                        'delete': states.DELETING},
    states.UNRESCUING: {},
    states.UNRESCUEFAIL: {'rescue': states.RESCUING,
                          'unrescue': states.UNRESCUING,
                          'delete': states.DELETING},
    states.SERVICING: {},
    states.SERVICEWAIT: {'abort': states.SERVICEFAIL,
                         'delete': states.DELETING},
    states.SERVICEHOLD: {'service': states.SERVICING,
                         'unhold': states.SERVICEWAIT,
                         'abort': states.SERVICEFAIL},
    states.SERVICEFAIL: {'service': states.SERVICING,
                         'rescue': states.RESCUING,
                         'delete': states.DELETING,
                         'abort': states.ACTIVE},
    'verifying': {},
    'inspecting': {},
    'inspect wait': {'abort': 'inspect failed'},
    'inspect failed': {'manage': states.MANAGEABLE,
                       'inspect': 'inspecting'},
    'adopting': {},
    'adopt failed': {'adopt': 'adopting', 'manage': states.MANAGEABLE},
}

#: The API's provision targets and the events they ask for.
VERBS = {'active': 'deploy', 'deploy': 'deploy', 'deleted': 'delete',
         'undeploy': 'delete', 'rebuild': 'rebuild', 'rescue': 'rescue',
         'unrescue': 'unrescue', 'abort': 'abort', 'unhold': 'unhold',
         'manage': 'manage', 'provide': 'provide', 'clean': 'clean',
         'inspect': 'inspect', 'adopt': 'adopt', 'service': 'service'}

#: Where this fake's conductor takes a node it started moving, at once.
_SETTLES = {states.DEPLOYING: states.ACTIVE, states.DELETING: states.AVAILABLE,
            states.RESCUING: states.RESCUE, states.UNRESCUING: states.ACTIVE}


def locked(node_uuid: str) -> str:
    """Ironic's NodeLocked message (a 409)."""
    return ('Node %s is locked by host fake-conductor, please retry after '
            'the current operation is completed.' % node_uuid)


@dataclasses.dataclass
class Port:
    uuid: str
    address: str
    internal_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    portgroup_uuid: str | None = None


class FakeIronic:

    def __init__(self, version: tuple[int, int] = (1, 115),
                 steps: int = 1) -> None:
        self.version = version
        self.steps = steps
        self.nodes: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.failures: dict[str, list[Exception]] = (
            collections.defaultdict(list))
        self.requests: collections.Counter[str] = collections.Counter()
        #: Calls made with ``once=True`` (never to be retried), by method.
        self.once: collections.Counter[str] = collections.Counter()
        self.vifs: dict[str, list[str]] = collections.defaultdict(list)
        self.targets: dict[str, list[Any]] = collections.defaultdict(list)
        self.connectors: dict[str, list[Any]] = collections.defaultdict(list)
        self.ports_of: dict[str, list[Port]] = collections.defaultdict(list)
        self.groups_of: dict[str, list[Any]] = collections.defaultdict(list)
        self.validation: dict[str, dict[str, Any]] = {}
        self.listed_pages: list[dict[str, Any]] = []
        #: nodes Ironic returns whatever the filter (server-side bugs).
        self.ignore_filters = False
        #: a tear-down goes through ``cleaning`` (``steps`` more reads).
        self.cleaning = False
        #: How deep the caller is in :meth:`fail_fast` blocks.
        self.fast = 0
        #: The change feed (``listing = delta``): Ironic's clock, moved by
        #: ``tick`` at each page of it; each node's ``updated_at``, bumped
        #: when a page or probe finds its fields changed since the last
        #: look (writes that Ironic does not mark: see ``unmarked``).
        self.now = datetime.datetime(2026, 1, 1,
                                     tzinfo=datetime.UTC)
        self.tick = datetime.timedelta(seconds=1)
        self.nulls_first = False
        self._seen: dict[str, tuple[Any, datetime.datetime | None]] = {}
        self._ids: dict[str, int] = {}

    # Set-up -----------------------------------------------------------

    def add_node(self, node_uuid: str | None = None,
                 **fields: Any) -> str:
        node_uuid = node_uuid or str(uuidlib.uuid4())
        node: dict[str, Any] = {
            'uuid': node_uuid, 'instance_uuid': None,
            'power_state': states.POWER_OFF, 'target_power_state': None,
            'provision_state': states.AVAILABLE,
            'target_provision_state': None, 'maintenance': False,
            'resource_class': 'baremetal', 'conductor_group': '',
            'shard': None, 'traits': [], 'last_error': None,
            'properties': {'cpu_arch': 'x86_64', 'local_gb': 10},
            'instance_info': {}, 'driver_internal_info': {},
            'console': {'console_enabled': False, 'console_info': None},
            '_pending': None,
        }
        node.update(fields)
        self.nodes[node_uuid] = node
        self._ids[node_uuid] = len(self._ids) + 1
        self._seen[node_uuid] = (self._fingerprint(node), None)
        return node_uuid

    @staticmethod
    def _fingerprint(node: dict[str, Any]) -> Any:
        return repr(sorted((k, v) for k, v in node.items()
                           if not k.startswith('_')))

    def unmarked(self, node_uuid: str, **fields: Any) -> None:
        """A write Ironic does not mark (traits straight into its DB)."""
        node = self.nodes[node_uuid]
        node.update(fields)
        self._seen[node_uuid] = (self._fingerprint(node),
                                 self._seen[node_uuid][1])

    def touch(self) -> None:
        """Every node changed now (as a fleet in service has been)."""
        for u in self.nodes:
            self._seen[u] = (self._fingerprint(self.nodes[u]), self.now)

    def _rows(self) -> list[change_feed.Row]:
        rows = []
        for u, node in self.nodes.items():
            self._advance(node)
            mark, at = self._seen.get(u, (None, None))
            now = self._fingerprint(node)
            if now != mark:
                at = self.now
                self._seen[u] = (now, at)
            rows.append(change_feed.Row(u, self._ids.get(u, 0), at))
        return rows

    def fail(self, method: str, exc: Exception, times: int = 1) -> None:
        self.failures[method].extend([exc] * times)

    @contextlib.contextmanager
    def fail_fast(self) -> Iterator[None]:
        """Like the real one (this fake never retries anyway)."""
        self.fast += 1
        try:
            yield
        finally:
            self.fast -= 1

    @property
    def failing_fast(self) -> bool:
        return self.fast > 0

    def offers(self, needed: tuple[int, int]) -> bool:
        """Like the real one: the version in force ("upgrade" it by
        setting ``version``).
        """
        return self.version >= needed

    def connect(self) -> None:
        """Like the real one at service start; ``fail('connect', e)``."""
        queue = self.failures.get('connect')
        if queue:
            raise queue.pop(0)

    # Internals --------------------------------------------------------

    def _record(self, method: str, *args: Any) -> None:
        self.calls.append((method, args))
        self.requests[method] += 1
        queue = self.failures.get(method)
        if queue:
            raise queue.pop(0)

    def calls_to(self, method: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == method]

    def _advance(self, node: dict[str, Any]) -> None:
        pending = node['_pending']
        if pending is None:
            return
        pending['left'] -= 1
        if pending['left'] > 0:
            return
        node['_pending'] = None
        node.update(pending['final'])
        if pending.get('then'):
            node['_pending'] = {'left': self.steps, 'final': pending['then']}

    def _info(self, node: dict[str, Any]) -> nodeinfo.NodeInfo:
        return nodeinfo.NodeInfo.from_api(
            type('N', (), {k: v for k, v in node.items()
                           if not k.startswith('_')}))

    def _get(self, node_uuid: str) -> dict[str, Any]:
        try:
            return self.nodes[node_uuid]
        except KeyError:
            raise ironic.NodeNotFound(
                'node %s not found' % node_uuid) from None

    def _schedule(self, node: dict[str, Any], now: dict[str, Any],
                  final: dict[str, Any]) -> None:
        node.update(now)
        node['_pending'] = {'left': self.steps, 'final': final}
        if self.steps == 0:
            self._advance(node)

    # The Ironic interface ----------------------------------------------

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False,
                   with_group: bool = False) -> list[nodeinfo.NodeInfo]:
        """As Ironic filters: scope, ``shard=a,b`` and ``sharded``.

        (Every node carries its conductor group here.)
        """
        if shards is None and sharded is None and not with_shard:
            self._record('list_nodes', scope)
        else:
            self._record('list_nodes', scope, shards, sharded)
        if ((scope.shard is not None or shards is not None or
             sharded is not None or with_shard) and
                self.version < ironic.SHARD_VERSION):
            raise ironic.VersionNotSupported('no shard filter')
        if shards is not None and not shards:
            return []
        found = []
        for node in self.nodes.values():
            self._advance(node)
            wanted = (scope.contains(node['conductor_group'],
                                     node['shard']) and
                      (shards is None or node['shard'] in shards) and
                      (sharded is None or
                       (node['shard'] is not None) == sharded))
            if self.ignore_filters or wanted:
                found.append(self._info(node))
        return found

    def changed_nodes(self, limit: int,
                      marker: str | None = None) -> pages.Changed:
        self._record('changed_nodes', limit, marker)
        self.now += self.tick
        rows, more = change_feed.page(self._rows(), limit, marker,
                                      self.nulls_first)
        return pages.Changed(
            [dataclasses.replace(self._info(self.nodes[r.uuid]),
                                 conductor_group=self.nodes[r.uuid][
                                     'conductor_group'],
                                 shard=self.nodes[r.uuid]['shard'])
             for r in rows], more, self.now)

    def updated_at(self, node_uuid: str) -> datetime.datetime | None:
        self._record('updated_at', node_uuid)
        self._get(node_uuid)
        return next(r.updated_at for r in self._rows() if r.uuid == node_uuid)

    def node_uuids(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None) -> set[str]:
        self._record('node_uuids', scope, shards, sharded)
        if scope.shard is not None:
            shards = [scope.shard]
        return {u for u, n in self.nodes.items()
                if scope.contains(n['conductor_group'], n['shard']) and
                (shards is None or n['shard'] in shards) and
                (sharded is None or (n['shard'] is not None) == sharded)}

    def listings(self) -> list[tuple[Any, ...]]:
        """The shard-mode listings: ``(shards, sharded)`` of each."""
        return [args[1:] for args in self.calls_to('list_nodes')
                if len(args) > 1]

    def require_shards(self, why: str) -> None:
        if self.version < ironic.SHARD_VERSION:
            raise ironic.VersionNotSupported(
                '%s needs Ironic API 1.82 (node shards)' % why)

    def shards(self) -> dict[str, int]:
        self._record('shards')
        self.require_shards('Listing shards')
        counts: collections.Counter[str] = collections.Counter(
            str(n['shard']) for n in self.nodes.values())
        return dict(counts)

    def get_node(self, node_uuid: str,
                 once: bool = False) -> nodeinfo.NodeInfo:
        self.once['get_node'] += once
        self._record('get_node', node_uuid)
        node = self._get(node_uuid)
        self._advance(node)
        return self._info(node)

    def node_exists(self, node_uuid: str) -> bool | None:
        try:
            self.get_node(node_uuid)
        except ironic.NodeNotFound:
            return False
        except ironic.IronicError:
            return None
        return True

    def node_for_instance(self,
                          instance_uuid: str) -> nodeinfo.NodeInfo | None:
        self._record('node_for_instance', instance_uuid)
        for node in self.nodes.values():
            if node['instance_uuid'] == instance_uuid:
                self._advance(node)
                # Tear-down may just have cleared the association.
                if node['instance_uuid'] == instance_uuid:
                    return self._info(node)
        return None

    def get_fields(self, node_uuid: str, fields: list[str]) -> Any:
        self._record('get_fields', node_uuid, fields)
        node = self._get(node_uuid)
        return type('N', (), {f: node.get(f) for f in fields})

    def reserve(self, node_uuid: str, instance_uuid: str) -> None:
        self._record('reserve', node_uuid, instance_uuid)
        node = self._get(node_uuid)
        if node['instance_uuid'] not in (None, instance_uuid):
            raise ironic.Conflict('Node %s is associated with instance %s.'
                                  % (node_uuid, node['instance_uuid']))
        node['instance_uuid'] = instance_uuid

    def release(self, node_uuid: str) -> None:
        self._record('release', node_uuid)
        node = self._get(node_uuid)
        if node['provision_state'] in states.TEARING_DOWN:
            raise ironic.Conflict(locked(node_uuid))
        node['instance_uuid'] = None
        node['instance_info'] = {}

    def patch(self, node_uuid: str, patch: list[dict[str, Any]]) -> None:
        self._record('patch', node_uuid, patch)
        node = self._get(node_uuid)
        if node['provision_state'] in states.TEARING_DOWN:
            raise ironic.Conflict(locked(node_uuid))
        for op in patch:
            parts = op['path'].strip('/').split('/')
            if parts[0] == 'instance_info' and len(parts) == 2:
                node['instance_info'][parts[1]] = op.get('value')
            elif parts == ['shard']:
                node['shard'] = (op.get('value') if op['op'] != 'remove'
                                 else None)

    def validate(self, node_uuid: str) -> dict[str, dict[str, Any]]:
        self._record('validate', node_uuid)
        self._get(node_uuid)
        result = {i: {'result': True, 'reason': None}
                  for i in ('deploy', 'power', 'storage', 'boot')}
        result.update(self.validation)
        return result

    def set_provision_state(self, node_uuid: str, target: str,
                            **kwargs: Any) -> None:
        self._record('set_provision_state', node_uuid, target, kwargs)
        node = self._get(node_uuid)
        state = node['provision_state']
        event = VERBS[target]
        moves = MACHINE.get(state, {})
        if event not in moves:
            raise ironic.BadRequest(
                'The requested action "%s" can not be performed on node "%s" '
                'while it is in state "%s".' % (target, node_uuid, state))
        if event == 'abort':
            # The conductor moves the node at once; SERVICEHOLD and
            # SERVICEWAIT go through SERVICEFAIL back to ACTIVE.
            node.update(provision_state=moves[event],
                        target_provision_state=None, _pending=None)
            if moves[event] == states.SERVICEFAIL:
                node['provision_state'] = states.ACTIVE
            return
        transient = moves[event]
        final = _SETTLES.get(transient)
        if final is None:
            raise NotImplementedError('the fake does not %s' % target)
        done: dict[str, Any] = {'provision_state': final,
                                'target_provision_state': None}
        then = None
        if event == 'delete':
            # Ironic's tear-down powers the node off and clears it.
            done.update(instance_uuid=None, instance_info={},
                        power_state=states.POWER_OFF)
            self.vifs.pop(node_uuid, None)
            if self.cleaning:
                then = dict(done)
                done.update(provision_state=states.CLEANING,
                            target_provision_state=states.AVAILABLE)
        if kwargs.get('configdrive') is not None:
            node['instance_info']['configdrive'] = kwargs['configdrive']
        self._schedule(node, {'provision_state': transient,
                              'target_provision_state': final}, done)
        if then:
            node['_pending']['then'] = then

    def set_power_state(self, node_uuid: str, target: str,
                        soft: bool = False,
                        timeout: int | None = None) -> None:
        self._record('set_power_state', node_uuid, target, soft, timeout)
        node = self._get(node_uuid)
        final = states.POWER_OFF if target == 'off' else states.POWER_ON
        self._schedule(node, {'target_power_state': final},
                       {'power_state': final, 'target_power_state': None})

    def inject_nmi(self, node_uuid: str) -> None:
        self._record('inject_nmi', node_uuid)
        self._get(node_uuid)

    def vif_attach(self, node_uuid: str, vif_id: str) -> None:
        self._record('vif_attach', node_uuid, vif_id)
        self._get(node_uuid)
        if vif_id in self.vifs[node_uuid]:
            raise ironic.Conflict(
                'Unable to attach VIF because VIF %s is already attached to '
                'Ironic port %s-port' % (vif_id, node_uuid))
        self.vifs[node_uuid].append(vif_id)

    def vif_detach(self, node_uuid: str, vif_id: str) -> None:
        self._record('vif_detach', node_uuid, vif_id)
        self._get(node_uuid)
        if vif_id not in self.vifs[node_uuid]:
            raise ironic.BadRequest('VIF %s is not attached' % vif_id)
        self.vifs[node_uuid].remove(vif_id)

    def vif_list(self, node_uuid: str) -> list[str]:
        self._record('vif_list', node_uuid)
        self._get(node_uuid)
        return list(self.vifs[node_uuid])

    def get_console(self, node_uuid: str) -> dict[str, Any]:
        self._record('get_console', node_uuid)
        return dict(self._get(node_uuid)['console'])

    def set_console_mode(self, node_uuid: str, enabled: bool) -> None:
        self._record('set_console_mode', node_uuid, enabled)
        self._get(node_uuid)['console']['console_enabled'] = enabled

    def ports(self, node_uuid: str, address: str | None = None) -> list[Any]:
        self._record('ports', node_uuid, address)
        return [p for p in self.ports_of[node_uuid]
                if address is None or p.address == address]

    def portgroups(self, node_uuid: str,
                   address: str | None = None) -> list[Any]:
        self._record('portgroups', node_uuid, address)
        return [p for p in self.groups_of[node_uuid]
                if address is None or p.address == address]

    def volume_targets(self, node_uuid: str,
                       once: bool = False) -> list[Any]:
        self.once['volume_targets'] += once
        self._record('volume_targets', node_uuid)
        return list(self.targets[node_uuid])

    def create_volume_target(self, **fields: Any) -> None:
        self._record('create_volume_target', fields)
        target = type('T', (), dict(fields, uuid=str(uuidlib.uuid4())))
        self.targets[fields['node_uuid']].append(target)

    def delete_volume_target(self, target_uuid: str,
                             once: bool = False) -> None:
        self.once['delete_volume_target'] += once
        self._record('delete_volume_target', target_uuid)
        for node_uuid, targets in self.targets.items():
            for t in list(targets):
                if t.uuid == target_uuid:
                    node = self._get(node_uuid)
                    # Ironic's rules: the node's lock, then its state.
                    if node['provision_state'] in (states.DELETING,
                                                   states.CLEANING):
                        raise ironic.Conflict('Node %s is locked'
                                              % node_uuid)
                    if (node['provision_state'] not in (
                            states.MANAGEABLE, states.ENROLL) and
                            node['power_state'] != states.POWER_OFF):
                        raise ironic.BadRequest(
                            'volume target deletion on node %s in power '
                            'state %s' % (node_uuid, node['power_state']))
                    targets.remove(t)
                    return
        raise ironic.NodeNotFound(target_uuid)

    def volume_connectors(self, node_uuid: str) -> list[Any]:
        self._record('volume_connectors', node_uuid)
        return list(self.connectors[node_uuid])
