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
"""Scenarios a and e: the division of real Ironic nodes in a real cell."""

from __future__ import annotations

import collections
import re
import threading
from typing import Any
import urllib.parse

from nova_ironic_multi.tests.fixtures import fault_proxy
from nova_ironic_multi.tests.functional import base


class DivisionTest(base.IronicCellTestCase):
    """a. 30 nodes, three hosts: each node reported by exactly one."""

    NODES = 30

    def test_every_node_has_exactly_one_compute_and_one_provider(
            self) -> None:
        reported = self.reported()
        self.assertEqual(set(self.node_uuids), set().union(*reported.values()))
        self.assertEqual(30, sum(len(n) for n in reported.values()))
        for host, nodes in reported.items():
            self.assertTrue(nodes, '%s manages no node' % host)
        # nova agrees: one compute node row per node, on the reporting host
        self.assertEqual(reported, self.db_division())
        rows = self.assert_no_duplicates()
        self.assertEqual(30, len(rows))
        self.assertTrue(all(r['hypervisor_type'] == 'ironic' for r in rows))
        # placement: one provider per node with one unit of its class
        for node in self.node_uuids:
            inventory = self._get_provider_inventory(node)
            self.assertEqual(['CUSTOM_BAREMETAL'], list(inventory))
            self.assertEqual(1, inventory['CUSTOM_BAREMETAL']['total'])
            self.assertEqual(0, inventory['CUSTOM_BAREMETAL']['reserved'])


class ConductorGroupTest(base.IronicCellTestCase):
    """e. With partition_key, hosts see only that group's nodes."""

    NODES = 6
    OTHER_GROUPS = {'rack-b': 6}

    def test_partition_key_limits_every_host_to_its_group(self) -> None:
        everything = set(self.node_uuids) | set(self.group_nodes['rack-b'])
        self.assertEqual(everything, set().union(*self.reported().values()))
        self.flags(partition_key='rack-b', peer_list=list(base.HOSTS),
                   group='ironic_multi')
        reported = self.reported()
        self.assertEqual(set(self.group_nodes['rack-b']),
                         set().union(*reported.values()))
        self.assertEqual(6, sum(len(n) for n in reported.values()))
        self._run_periodics()
        # nova keeps the compute nodes of the default group: Ironic still
        # has them, so they are not deleted, merely no longer managed.
        self.assertEqual(12, len(self.assert_no_duplicates()))


class ShardDivisionTest(base.ShardMode, DivisionTest):
    """a, with ``divide = shards``: each host lists only its share."""

    def configure(self) -> None:
        # What Ironic received, not what the driver thinks it asked.
        self.proxy = self.useFixture(fault_proxy.FaultProxy(self.ironic.url))
        self.flags(endpoint_override=self.proxy.url, group='ironic')
        super().configure()

    def listings(self, since: int) -> list[dict[str, list[str]]]:
        """The query of each node listing Ironic received since then."""
        queries = []
        for request in self.proxy.requests[since:]:
            url = urllib.parse.urlsplit(request.path)
            if (request.method == 'GET' and
                    re.fullmatch(r'/v1/nodes(/detail)?/?', url.path)):
                queries.append(urllib.parse.parse_qs(url.query))
        return queries

    def test_each_host_lists_its_shards_and_the_unsharded_nodes(
            self) -> None:
        self.reported()         # every host warm: it knows its shards
        asked_by: dict[str, set[str]] = {}
        for host, compute in self.computes.items():
            since = len(self.proxy.requests)
            reported = set(compute.manager.driver.get_available_nodes())
            snapshot = compute.manager.driver._inventory.cached()
            self.assertTrue(snapshot.partition.by_shard)
            queries = self.listings(since)
            # Every page of every listing is filtered by shard.
            self.assertTrue(queries, host)
            for query in queries:
                self.assertTrue('shard' in query or
                                query.get('sharded') == ['False'],
                                '%s listed %s' % (host, query))
            self.assertIn(['False'], [q.get('sharded') for q in queries])
            asked_by[host] = {s for q in queries
                              for s in q.get('shard', [''])[0].split(',')
                              if s}
            self.assertEqual(set(snapshot.shards) - {'None'},
                             asked_by[host] - {'None'})
            for node in reported:
                shard = self.shard_of[node]
                if shard is not None:
                    self.assertIn(shard, asked_by[host])
        # Every shard asked for by exactly one host.
        self.assertEqual({s for s in self.shard_of.values() if s},
                         set().union(*asked_by.values()) - {'None'})
        self.assertEqual(len(set().union(*asked_by.values())),
                         sum(len(s) for s in asked_by.values()))
        # Every shard listed by exactly one host. (Ironic counts the
        # nodes without a shard under the name 'None'.)
        shards = [set(c.manager.driver._inventory.cached().shards) - {'None'}
                  for c in self.computes.values()]
        self.assertEqual({s for s in self.shard_of.values() if s},
                         set().union(*shards))
        self.assertEqual(len(set().union(*shards)),
                         sum(len(s) for s in shards))

    def test_a_node_reserved_after_the_period_elsewhere_stays_managed(
            self) -> None:
        # host1 builds on a node it reported; before the build reserves
        # it, the node moves to a shard host2 lists and host1's period sees
        # the instance without a node. host2 never keeps the node of
        # host1's instance, so host1 must find it.
        flavor = self.baremetal_flavor()
        reported = self.reported()
        sizes = collections.Counter(self.shard_of.values())
        node = next(n for n in sorted(reported['host1'])
                    if self.shard_of[n] is not None and
                    sizes[self.shard_of[n]] > 1)
        theirs = sorted(set(self.computes['host2'].manager.driver.
                            _inventory.cached().shards) - {'None'})[0]
        driver = self.computes['host1'].manager.driver
        entered, release = threading.Event(), threading.Event()
        prepare = driver.prepare_for_spawn

        def held_prepare(instance: Any) -> None:
            entered.set()
            self.assertTrue(release.wait(base.PATIENCE))
            prepare(instance)

        driver.prepare_for_spawn = held_prepare
        self.addCleanup(release.set)
        server = self.boot(flavor, node=node, host='host1', wait=None)
        self.assertTrue(entered.wait(base.PATIENCE))
        self.ironic.client.node.update(node, [
            {'op': 'replace', 'path': '/shard', 'value': theirs}])
        self.assertNotIn(node, driver.get_available_nodes())
        release.set()
        self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(server['id'], self.ironic.node(node).instance_uuid)
        managers = sorted(h for h, nodes in self.reported().items()
                          if node in nodes)
        self.assertEqual(['host1'], managers,
                         'node %s managed by: %s' % (node, managers))
