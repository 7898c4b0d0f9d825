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
"""``listing = delta`` on the real Ironic 39: the division and failover
tests again, and what a warm period asks Ironic.

(The test modules are imported, not their classes, so that pytest collects
each class once, where it is defined.)
"""

from __future__ import annotations

from nova_ironic_multi.tests.functional import base
from nova_ironic_multi.tests.functional import test_division
from nova_ironic_multi.tests.functional import test_failover


class DeltaDivisionTest(base.DeltaMode, test_division.DivisionTest):
    """a, with ``listing = delta`` (and ``divide = nodes``)."""


class DeltaShardDivisionTest(base.DeltaMode,
                             test_division.ShardDivisionTest):
    """a, with ``listing = delta`` and ``divide = shards``."""

    def _period_queries(self, host: str) -> list[dict[str, list[str]]]:
        since = len(self.proxy.requests)
        self.computes[host].manager.driver.get_available_nodes()
        return self.listings(since)

    def test_each_host_lists_its_shards_and_the_unsharded_nodes(
            self) -> None:
        # (Replaces the full listing's test: a warm period lists no shard.)
        self.reported()
        self.reported()
        for host in self.computes:
            queries = self._period_queries(host)
            self.assertTrue(queries, host)
            for query in queries:
                self.assertEqual(['updated_at'], query.get('sort_key'),
                                 '%s listed %s' % (host, query))
                self.assertEqual(['desc'], query.get('sort_dir'))
                self.assertNotIn('shard', query)
                self.assertNotIn('conductor_group', query)

    def test_changes_read_from_the_feed_divide_as_a_full_listing(
            self) -> None:
        client = self.ironic.client
        self.reported()
        self.reported()
        nodes = sorted(self.node_uuids)
        # A node into maintenance, one to another shard, one's shard
        # removed: Ironic marks each with updated_at.
        client.node.set_maintenance(nodes[0], True, 'test')
        labelled = [n for n in nodes if self.shard_of[n] is not None]
        other = next(s for s in self.shard_of.values()
                     if s not in (None, self.shard_of[labelled[1]]))
        client.node.update(labelled[1], [{'op': 'replace', 'path': '/shard',
                                          'value': other}])
        client.node.update(labelled[2], [{'op': 'remove',
                                          'path': '/shard'}])
        delta = self.reported()
        self.assertEqual(set(self.node_uuids), set().union(*delta.values()))
        self.assertEqual(len(self.node_uuids),
                         sum(len(n) for n in delta.values()))
        for compute in self.computes.values():
            stats = compute.manager.driver._inventory._pipeline.delta.stats
            self.assertGreaterEqual(stats.refreshes, 1)
            self.assertEqual({'start': 1}, stats.resyncs)
        # The same hosts listing in full divide exactly so.
        self.flags(listing='full', group='ironic_multi')
        self.assertEqual(delta, self.reported())
        self.assertEqual(delta, self.reported())


class DeltaShardTakeoverTest(base.DeltaMode,
                             test_failover.ShardTakeoverTest):
    """d, with ``listing = delta`` and ``divide = shards``."""
