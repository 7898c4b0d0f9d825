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
"""A nova cell from nova's own fixtures, three computes, a real Ironic.

Each test gets a fresh Ironic process (started while nova's fixtures come
up) and three nova-compute services that load this package through nova's
real ``load_compute_driver`` and the installed shim. The node UUIDs are
fixed so each compute has a node when it starts (nova needs one) and the
division is the same on every run.
"""

from __future__ import annotations

import collections
import importlib.metadata
import inspect
import itertools
import os
import sys
from typing import Any

import fixtures
from nova.conf import CONF
from nova import context as nova_context
from nova.db.main import api as main_db_api
from nova import monkey_patch
from nova import objects
from nova.tests.fixtures import notifications as nova_notifications
from nova.tests.functional import integrated_helpers
from placement import db_api as placement_db

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import sharding
from nova_ironic_multi import ironic
from nova_ironic_multi import rings
from nova_ironic_multi.tests.fixtures import ironic_server
from nova_ironic_multi.tests.functional import threaded_sqlite

HOSTS = ('host1', 'host2', 'host3')

#: Seconds to wait for nova to finish an action. nova's helpers wait 5 s
#: for a server state and 10 s for a notification; a deploy on a busy test
#: machine takes longer.
PATIENCE = 120


def api_paste_ini() -> str:
    for f in importlib.metadata.files('nova') or []:
        if str(f).replace(os.sep, '/').endswith('etc/nova/api-paste.ini'):
            return str(f.locate())
    return os.path.join(sys.prefix, 'etc', 'nova', 'api-paste.ini')


def startable_nodes(count: int, prefix: str = 'node') -> list[str]:
    """``count`` fixed node UUIDs fit for starting the computes.

    Each host, started in order, gets at least one node from the ring of
    the hosts started so far (nova needs a node to start a compute).
    """
    for offset in itertools.count():
        chosen = [ironic_server.node_uuid(offset + k, prefix)
                  for k in range(count)]
        if all(set(rings.load('compatible', HOSTS[:n], 5)
                   .assign(chosen).values()) == set(HOSTS[:n])
               for n in range(1, len(HOSTS) + 1)):
            return chosen
    raise AssertionError('unreachable')


def notifications_from_threads(test: Any) -> None:
    """Let threads send versioned notifications (native-threading mode).

    nova's fake versioned notifier tells which test sent a notification by
    walking the sender's greenlet ancestry up to one that nova spawned with
    the test's id. A native thread has no such ancestor: nova 34's fixture
    skips that check in threading mode, nova 33's (a static
    ``_get_sender_test_case_id``) walks past the root and raises
    AttributeError, failing the scheduler and so every boot. Where the
    fixture walks that way, a sender with no such ancestor counts as the
    running test, as nova 34 counts every thread.
    """
    cls = nova_notifications.FakeVersionedNotifier
    name = '_get_sender_test_case_id'
    if monkey_patch.is_patched() or not isinstance(
            inspect.getattr_static(cls, name), staticmethod):
        return
    walk = getattr(cls, name)
    running: str = test.id()

    def sender() -> str:
        try:
            found: str = walk()
            return found
        except AttributeError:      # no ancestor with an id: a thread
            return running

    test.useFixture(fixtures.MockPatchObject(cls, name, staticmethod(sender)))


class IronicCellTestCase(integrated_helpers.ProviderUsageBaseTestCase):

    compute_driver = 'nova_ironic_multi.IronicDriver'
    microversion = 'latest'
    #: nodes in Ironic's default conductor group ("")
    NODES = 9
    #: extra nodes per other conductor group (listable, not deployable)
    OTHER_GROUPS: dict[str, int] = {}
    START_COMPUTES = True
    #: Ironic's ``[api] max_limit``: the most nodes one listing page holds.
    MAX_LIMIT = 1000
    #: More of Ironic's configuration (ini text appended to its file).
    IRONIC_CONF = ''

    def setUp(self) -> None:
        self.node_uuids = startable_nodes(self.NODES)
        self.group_nodes = {
            group: [ironic_server.node_uuid(i, group) for i in range(n)]
            for group, n in self.OTHER_GROUPS.items()}
        nodes = [(u, '') for u in self.node_uuids] + [
            (u, g) for g, us in self.group_nodes.items() for u in us]
        self.ironic = ironic_server.IronicFixture(
            nodes, max_limit=self.MAX_LIMIT, extra_conf=self.IRONIC_CONF)
        self.ironic.spawn()
        # Not left running if nova's set-up fails before useFixture below.
        self.addCleanup(self.ironic.discard)
        self.flags(api_paste_config=api_paste_ini(), group='wsgi')
        threaded_sqlite.install(self)
        super().setUp()
        notifications_from_threads(self)
        self.useFixture(self.ironic)
        nim_conf.register_opts(CONF)
        self.flags(endpoint_override=self.ironic.url, group='ironic')
        self.flags(poll_interval=0.1, group='ironic_multi')
        # (The computes of this process share it: health tests start one.)
        self.flags(state_file=os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'state.json'),
            group='ironic_multi')
        self.flags(mkisofs_cmd=ironic_server.bin_path('pycdlib-genisoimage'))
        self.ctxt = nova_context.get_admin_context()
        wait = self.notifier.wait_for_versioned_notifications
        self.notifier.wait_for_versioned_notifications = (
            lambda event_type, n_events=1, timeout=10.0: wait(
                event_type, n_events, max(timeout, PATIENCE)))
        self.configure()
        if self.START_COMPUTES:
            for host in HOSTS:
                self._start_compute(host)
            # host1 started alone and took every node; settle the ring.
            self._run_periodics()

    def configure(self) -> None:
        """Hook: configuration after nova's fixtures, before the computes."""

    def _wait_for_server_parameter(self, server: Any, expected_params: Any,
                                   max_retries: int = 10, api: Any = None,
                                   **more: Any) -> Any:
        # (nova polls every 0.5 s. nova 34 adds wait_for_fault_key, which
        # nova 32 and 33 lack: passed through only when given.)
        return super()._wait_for_server_parameter(
            server, expected_params, max(max_retries, PATIENCE * 2),
            api=api, **more)

    # What the operator would look at ------------------------------------

    def reported(self) -> dict[str, set[str]]:
        """Nodes each compute's driver reports now (a fresh refresh)."""
        return {h: set(c.manager.driver.get_available_nodes())
                for h, c in self.computes.items()}

    def cell(self) -> Any:
        return nova_context.target_cell(self.ctxt, self.cell_mappings['cell1'])

    def compute_node_rows(self) -> list[dict[str, Any]]:
        """Live rows of compute_nodes, straight from the cell database."""
        with self.cell() as cctxt:
            engine = main_db_api.get_engine(context=cctxt)
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    'SELECT uuid, host, hypervisor_hostname, '
                    'hypervisor_type FROM compute_nodes WHERE deleted = 0'
                ).all()
        return [dict(r._mapping) for r in rows]

    def compute_node_records(self) -> dict[str, tuple[Any, ...]]:
        """Per node: its live compute_nodes row's (id, created_at).

        A node whose row was deleted and created again keeps its UUID (the
        node's) but gets a new row id.
        """
        with self.cell() as cctxt:
            engine = main_db_api.get_engine(context=cctxt)
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    'SELECT hypervisor_hostname, id, created_at FROM '
                    'compute_nodes WHERE deleted = 0').all()
        records: dict[str, tuple[Any, ...]] = {}
        for name, row_id, created in rows:
            self.assertNotIn(name, records)
            records[name] = (row_id, created)
        return records

    def provider_records(self) -> dict[str, dict[str, Any]]:
        """Per provider UUID: its placement row's id, created_at, generation.

        Read from placement's database: the API shows neither the row id
        nor the creation time, and a provider deleted and created again
        keeps its UUID (the node's).
        """
        engine = placement_db.get_placement_engine()
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                'SELECT uuid, id, created_at, generation FROM '
                'resource_providers').all()
        return {r.uuid: {'id': r.id, 'created_at': r.created_at,
                         'generation': r.generation} for r in rows}

    def assert_same_records(self, before: dict[str, Any],
                            after: dict[str, Any]) -> None:
        """The same compute node rows and providers, never re-created.

        ``before`` and ``after`` are :meth:`records`. Generations only grow.
        """
        self.assertEqual(before['compute_nodes'], after['compute_nodes'])
        self.assertEqual(
            {u: (p['id'], p['created_at'])
             for u, p in before['providers'].items()},
            {u: (p['id'], p['created_at'])
             for u, p in after['providers'].items()})
        went_back = {u: (p['generation'],
                         after['providers'][u]['generation'])
                     for u, p in before['providers'].items()
                     if after['providers'][u]['generation'] < p['generation']}
        self.assertEqual({}, went_back)

    def records(self) -> dict[str, Any]:
        """Compute node rows and placement providers, by node."""
        return {'compute_nodes': self.compute_node_records(),
                'providers': self.provider_records()}

    def db_division(self) -> dict[str, set[str]]:
        by_host: dict[str, set[str]] = collections.defaultdict(set)
        for row in self.compute_node_rows():
            by_host[row['host']].add(row['hypervisor_hostname'])
        return dict(by_host)

    def assert_no_duplicates(self) -> list[dict[str, Any]]:
        """One compute node row and one provider per node, no more."""
        rows = self.compute_node_rows()
        names = collections.Counter(r['hypervisor_hostname'] for r in rows)
        self.assertEqual([], [n for n, c in names.items() if c > 1])
        self.assertTrue(all(r['uuid'] == r['hypervisor_hostname']
                            for r in rows))
        providers = self._get_all_providers()
        by_name = collections.Counter(p['name'] for p in providers)
        self.assertEqual([], [n for n, c in by_name.items() if c > 1])
        self.assertEqual({r['uuid'] for r in rows},
                         {p['uuid'] for p in providers})
        return rows

    def baremetal_flavor(self) -> str:
        flavor_id: str = self._create_flavor(
            name='baremetal', memory_mb=1024, vcpu=1, disk=10, ephemeral=0,
            extra_spec={'resources:CUSTOM_BAREMETAL': '1',
                        'resources:VCPU': '0', 'resources:MEMORY_MB': '0',
                        'resources:DISK_GB': '0'})
        return flavor_id

    def boot(self, flavor_id: str, node: str | None = None,
             host: str | None = None, wait: str | None = 'ACTIVE',
             **extra: Any) -> dict[str, Any]:
        body = self._build_server(flavor_id=flavor_id, networks='none')
        body.update(extra)
        if node:
            body['hypervisor_hostname'] = node
        if host:
            body['host'] = host
        server: dict[str, Any] = self.admin_api.post_server(
            {'server': body})
        if wait:
            server = self._wait_for_state_change(server, wait)
        return server

    def service(self, host: str) -> dict[str, Any]:
        (svc,) = self.admin_api.get_services(binary='nova-compute',
                                             host=host)
        return dict(svc)

    def instance_host(self, instance_uuid: str) -> str:
        with self.cell() as cctxt:
            host: str = objects.Instance.get_by_uuid(cctxt,
                                                     instance_uuid).host
        return host


def shard_owners(labels: dict[str, str | None],
                 hosts: tuple[str, ...]) -> dict[str, str]:
    """Node -> the host of ``hosts`` that lists it with ``divide = shards``.

    A node goes with its shard (the ring places shard names, one per key,
    as the ``compatible`` ring does unweighted); the nodes without one are
    placed node by node among themselves.

    :param labels: node -> its shard (None: none), as :func:`shard_labels`.
    """
    ring = rings.load('compatible', hosts, 5)
    names = {s for s in labels.values() if s is not None}
    by_shard = sharding.assign(ring, dict.fromkeys(names, 1), False)
    unsharded = ring.assign([u for u, s in labels.items() if s is None])
    return {u: by_shard[s] if s is not None else unsharded[u]
            for u, s in labels.items()}


def shard_labels(node_uuids: list[str]) -> dict[str, str | None]:
    """Shards for ``node_uuids``, every fourth node left without one.

    Labels come from :func:`sharding.label` with the smallest count (from
    three) that gives each host, started in order, at least two nodes:
    nova needs one to start a compute, and the failover scenarios a free
    one beside an instance.
    """
    for count in itertools.count(3):
        labels: dict[str, str | None] = {
            u: None if i % 4 == 3 else sharding.label(u, count)
            for i, u in enumerate(node_uuids)}
        covered = True
        for n in range(1, len(HOSTS) + 1):
            owners = collections.Counter(
                shard_owners(labels, HOSTS[:n]).values())
            # Two nodes each, so a host with an instance keeps a free one.
            covered = (covered and set(owners) == set(HOSTS[:n]) and
                       min(owners.values()) >= 2)
        if covered:
            return labels
    raise AssertionError('unreachable')


class DeltaMode:
    """Mix in before a test case: every host runs ``listing = delta``.

    With ``delta_overlap = 0``: Ironic and nova share this machine's clock,
    and the set-up changes every node seconds before the tests, which the
    default overlap (60 s) would have every period read again (a feed so
    busy that each period lists in full).
    """

    flags: Any

    def configure(self) -> None:
        super().configure()  # type: ignore[misc]
        self.flags(listing='delta', delta_overlap=0, group='ironic_multi')


class ShardMode:
    """Mix in before a test case: every host runs ``divide = shards``.

    The nodes are labelled in Ironic (every fourth left without a shard)
    before the computes start. Ironic's pages hold two nodes, so every
    listing spans pages, some ending on a full one.
    """

    node_uuids: list[str]
    flags: Any
    MAX_LIMIT = 2

    def configure(self) -> None:
        super().configure()  # type: ignore[misc]
        self.flags(divide='shards', group='ironic_multi')
        self.shard_of = shard_labels(self.node_uuids)
        client = ironic.Ironic(CONF)
        for node, shard in self.shard_of.items():
            if shard is not None:
                client.patch(node, [{'op': 'add', 'path': '/shard',
                                     'value': shard}])
