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
"""``[ironic_multi] divide = shards``: the ring divides Ironic shards."""

from __future__ import annotations

import random
from typing import Any
import uuid

import fixtures
from nova import objects
from nova import test

from nova_ironic_multi.division import sharding
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi import rings
from nova_ironic_multi.tests.unit import base

HOSTS = ('host1', 'host2', 'host3')
SHARDS = ['rack-%d' % i for i in range(9)]


class ShardDivisionTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        for host in HOSTS:
            self.make_service(host)
        self.sharded = [self.ironic.add_node(shard=SHARDS[i % len(SHARDS)])
                        for i in range(36)]
        self.unsharded = [self.ironic.add_node() for _ in range(9)]
        self.drivers = self.fleet_drivers(HOSTS)
        self.flags(divide='shards', group='ironic_multi')

    # Helpers -------------------------------------------------------------

    def period(self, hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        return {h: set(self.drivers[h].get_available_nodes()) for h in hosts}

    def in_mode(self, divide: str,
                hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        """Two periods in ``divide`` mode (the second one warm)."""
        self.flags(divide=divide, group='ironic_multi')
        self.period(hosts)
        return self.period(hosts)

    def assert_same_union_as_nodes_mode(
            self, hosts: tuple[str, ...] = HOSTS) -> dict[str, set[str]]:
        by_shard = self.in_mode('shards', hosts)
        by_node = self.in_mode('nodes', hosts)
        union = set().union(*by_shard.values())
        self.assertEqual(set().union(*by_node.values()), union)
        # No node twice.
        self.assertEqual(len(union), sum(len(s) for s in by_shard.values()))
        self.flags(divide='shards', group='ironic_multi')
        return by_shard

    def deploy(self, node: str, host: str) -> str:
        inst = self.make_instance(host=host)
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        return inst.uuid

    def assignment(self, hosts: tuple[str, ...] = HOSTS) -> dict[str, str]:
        ring = rings.load('compatible', hosts, 5)
        return sharding.assign(ring, self.ironic.shards(), weighted=False)

    # Tests ---------------------------------------------------------------

    def test_every_node_managed_once_and_each_host_lists_its_share(
            self) -> None:
        self.period()
        assignment = self.assignment()
        for host in HOSTS:
            self.ironic.calls.clear()
            managed = set(self.drivers[host].get_available_nodes())
            mine = set(sharding.mine(assignment, host))
            for node in managed:
                shard = self.ironic.nodes[node]['shard']
                if shard is not None:
                    self.assertIn(shard, mine)
            # Only its shards and the unsharded nodes, never all of them.
            listings = self.ironic.listings()
            self.assertEqual(len(self.ironic.calls_to('list_nodes')),
                             len(listings))
            self.assertIn((sorted(mine), None), listings)
            self.assertIn((None, False), listings)
        self.assert_same_union_as_nodes_mode()

    def test_unsharded_nodes_are_divided_as_by_nodes(self) -> None:
        by_shard = self.in_mode('shards')
        ring = rings.load('compatible', HOSTS, 5)
        share = ring.assign(self.unsharded)
        for node in self.unsharded:
            self.assertIn(node, by_shard[share[node]])

    def test_union_equals_nodes_mode_with_instances_everywhere(self) -> None:
        assignment = self.assignment()
        # host1's instances on nodes of shards other hosts list.
        elsewhere = [n for n in self.sharded
                     if assignment[self.ironic.nodes[n]['shard']] != 'host1']
        for node in elsewhere[:3]:
            self.deploy(node, 'host1')
        self.deploy(self.unsharded[0], 'host2')
        by_shard = self.assert_same_union_as_nodes_mode()
        for node in elsewhere[:3]:
            self.assertIn(node, by_shard['host1'])
        self.assertIn(self.unsharded[0], by_shard['host2'])
        # Warm: host1 reads those nodes one by one, lists nothing more.
        self.drivers['host1'].get_available_nodes()     # back from nodes
        self.ironic.calls.clear()
        self.drivers['host1'].get_available_nodes()
        self.assertEqual(3, len(self.ironic.calls_to('get_node')))
        self.assertEqual(2, len(self.ironic.calls_to('list_nodes')))

    def test_many_instances_elsewhere_are_found_by_their_shards(
            self) -> None:
        assignment = self.assignment()
        elsewhere = [n for n in self.sharded
                     if assignment[self.ironic.nodes[n]['shard']] != 'host1']
        self.patch_limit(2)
        for node in elsewhere[:4]:
            self.deploy(node, 'host1')
        self.period()
        self.ironic.calls.clear()
        managed = set(self.drivers['host1'].get_available_nodes())
        self.assertTrue(set(elsewhere[:4]) <= managed)
        self.assertEqual([], self.ironic.calls_to('get_node'))
        their = sorted({self.ironic.nodes[n]['shard']
                        for n in elsewhere[:4]})
        self.assertIn((their, None), self.ironic.listings())

    def patch_limit(self, limit: int) -> None:
        self.useFixture(fixtures.MonkeyPatch(
            'nova_ironic_multi.period.listing.FETCH_LIMIT', limit))

    def test_instances_placed_while_the_host_was_away_are_fetched(
            self) -> None:
        self.period()
        assignment = self.assignment()
        node = next(n for n in self.sharded
                    if assignment[self.ironic.nodes[n]['shard']] == 'host2')
        # A takeover gives host1 an instance on a node of host2's shard.
        self.deploy(node, 'host1')
        self.ironic.calls.clear()
        self.assertIn(node, self.drivers['host1'].get_available_nodes())
        self.assertEqual(1, len(self.ironic.calls_to('node_for_instance')))
        self.assertNotIn(node, self.drivers['host2'].get_available_nodes())

    def test_an_instance_without_a_node_is_asked_once_per_share(
            self) -> None:
        self.period()
        self.make_instance(host='host1')    # building, or failed early
        self.ironic.calls.clear()
        self.drivers['host1'].get_available_nodes()
        self.drivers['host1'].get_available_nodes()
        self.assertEqual(1, len(self.ironic.calls_to('node_for_instance')))

    # A node reserved after the period, outside this host's listing ---------

    def node_of(self, host: str) -> str:
        """A free node in one of ``host``'s shards."""
        assignment = self.assignment()
        return next(n for n in self.sharded
                    if assignment[self.ironic.nodes[n]['shard']] == host and
                    self.ironic.nodes[n]['instance_uuid'] is None)

    def building(self, host: str, node: str) -> Any:
        """An instance of ``host`` that nova scheduled to ``node``."""
        inst = self.make_instance(host=host)
        inst.node = node      # (what the compute manager hands the driver)
        return inst

    def managers(self, node: str) -> list[str]:
        return sorted(h for h, nodes in self.period().items() if node in nodes)

    def after_first(self, method: str, action: Any) -> None:
        """Run ``action`` once, right after the fake's next ``method``."""
        original = getattr(self.ironic, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            setattr(self.ironic, method, original)
            action()
            return result

        setattr(self.ironic, method, wrapped)

    def test_a_node_reserved_after_the_period_elsewhere_stays_managed(
            self) -> None:
        # nova scheduled the instance to a node host1 reported, whose shard
        # host2 lists by the time host1 reserves it (a rebalance, a node
        # moved to another shard). host2 never keeps a node of host1's
        # instance; host1 must find it.
        self.period()
        node = self.node_of('host2')
        inst = self.building('host1', node)
        self.period()          # host1: the instance has no node yet
        self.drivers['host1'].prepare_for_spawn(inst)
        self.assertEqual(inst.uuid, self.ironic.nodes[node]['instance_uuid'])
        self.assertEqual(['host1'], self.managers(node))
        self.assertEqual(['host1'], self.managers(node))

    def test_an_instance_deleted_before_the_next_period_is_reaped_here(
            self) -> None:
        # host1 reserved a node in a shard host2 lists; before host1's next
        # period nova-api deleted the instance locally (host1 was forced
        # down). host1 must keep the node and list the orphan, so that
        # nova's reaper on host1 tears it down: nobody else ever will.
        self.period()
        node = self.node_of('host2')
        inst = self.building('host1', node)
        self.drivers['host1'].prepare_for_spawn(inst)
        inst.destroy()
        self.assertEqual(['host1'], self.managers(node))
        self.assertIn(inst.uuid,
                      self.drivers['host1'].list_instance_uuids())
        self.assertEqual(['host1'], self.managers(node))

    def test_reserved_while_its_node_is_looked_up_is_found_next_period(
            self) -> None:
        self.period()
        node = self.node_of('host2')
        inst = self.building('host1', node)
        # The reservation lands just after host1 asked for the instance's
        # node (none yet): this period cannot see it, the next one must.
        self.after_first('node_for_instance', lambda: self.drivers[
            'host1'].prepare_for_spawn(inst))
        self.assertNotIn(node, self.period()['host1'])
        self.assertEqual(['host1'], self.managers(node))

    def test_reserved_during_the_first_listing_is_found_next_period(
            self) -> None:
        # The first period lists the whole scope; the node is listed free
        # just before host1 reserves it.
        node = self.node_of('host2')
        inst = self.building('host1', node)
        self.after_first('list_nodes', lambda: self.drivers[
            'host1'].prepare_for_spawn(inst))
        self.drivers['host1'].get_available_nodes()
        self.assertEqual(inst.uuid, self.ironic.nodes[node]['instance_uuid'])
        self.assertEqual(['host1'], self.managers(node))

    def test_an_instance_looked_for_again_costs_one_read(self) -> None:
        self.period()
        node = self.node_of('host2')
        inst = self.building('host1', node)
        self.period()
        self.drivers['host1'].prepare_for_spawn(inst)
        self.ironic.calls.clear()
        self.drivers['host1'].get_available_nodes()
        self.assertEqual([(inst.uuid,)],
                         self.ironic.calls_to('node_for_instance'))
        # Then it is a node of host1's instance, read as any other.
        self.ironic.calls.clear()
        self.drivers['host1'].get_available_nodes()
        self.assertEqual([], self.ironic.calls_to('node_for_instance'))

    def test_after_a_host_dies_its_shards_go_to_the_survivors(self) -> None:
        assignment = self.assignment()
        node = next(n for n in self.sharded
                    if assignment[self.ironic.nodes[n]['shard']] == 'host3')
        self.deploy(node, 'host3')
        self.period()
        svc = objects.Service.get_by_args(self.ctxt, 'host3', 'nova-compute')
        svc.forced_down = True
        svc.save()
        survivors = ('host1', 'host2')
        by_shard = self.assert_same_union_as_nodes_mode(survivors)
        union = set().union(*by_shard.values())
        # Every free node has a manager; host3's instance node waits for it.
        free = {n for n, v in self.ironic.nodes.items()
                if v['instance_uuid'] is None}
        self.assertEqual(free, union)
        self.assertNotIn(node, union)

    def test_a_node_that_changes_shard_changes_hands_once(self) -> None:
        assignment = self.assignment()
        node = self.sharded[0]
        old = assignment[self.ironic.nodes[node]['shard']]
        new_shard = next(s for s in SHARDS if assignment[s] != old)
        self.period()
        self.ironic.nodes[node]['shard'] = new_shard
        by_shard = self.assert_same_union_as_nodes_mode()
        self.assertIn(node, by_shard[assignment[new_shard]])
        self.assertNotIn(node, by_shard[old])

    def test_a_node_enrolled_without_a_shard_is_managed(self) -> None:
        self.period()
        node = self.ironic.add_node()
        by_shard = self.assert_same_union_as_nodes_mode()
        owners = [h for h, s in by_shard.items() if node in s]
        self.assertEqual(1, len(owners))

    def test_no_unsharded_listing_while_ironic_counts_none(self) -> None:
        # Once every node has a shard, a warm period is the host's shards
        # only: no request for the (empty) unsharded remainder.
        for i, node in enumerate(self.unsharded):
            self.ironic.nodes[node]['shard'] = SHARDS[i]
        self.period()
        self.ironic.calls.clear()
        self.period()
        self.assertNotIn((None, False), self.ironic.listings())
        self.assertEqual(len(HOSTS), len(self.ironic.listings()))
        # A node enrolled without a shard is counted, listed and managed.
        node = self.ironic.add_node()
        by_shard = self.assert_same_union_as_nodes_mode()
        self.assertIn((None, False), self.ironic.listings())
        self.assertEqual(1, sum(node in s for s in by_shard.values()))

    def test_works_with_a_conductor_group_and_peer_list(self) -> None:
        for node in self.sharded[:12] + self.unsharded[:3]:
            self.ironic.nodes[node]['conductor_group'] = 'rack-a'
        self.flags(partition_key='rack-a', peer_list=['host1', 'host2'],
                   group='ironic_multi')
        hosts = ('host1', 'host2')
        by_shard = self.assert_same_union_as_nodes_mode(hosts)
        self.assertEqual(set(self.sharded[:12] + self.unsharded[:3]),
                         set().union(*by_shard.values()))
        for call in self.ironic.calls_to('list_nodes'):
            self.assertEqual('rack-a', call[0].conductor_group)

    def test_balanced_ring_weighs_shards_by_node_count(self) -> None:
        # Skewed shards: 72 nodes in 8 shards from 24 down to 3, and the 9
        # nodes without a shard. Placed one shard per key, as the
        # compatible ring places them, the hosts would list 24, 21 and 27
        # sharded nodes; weighed by node count, 24 each.
        for node in self.sharded:
            del self.ironic.nodes[node]
        sizes = (24, 12, 12, 6, 6, 6, 3, 3)
        for i, size in enumerate(sizes):
            for _ in range(size):
                self.ironic.add_node(shard=SHARDS[i])
        self.flags(ring_algorithm='balanced', group='ironic_multi')
        by_shard = self.assert_same_union_as_nodes_mode()
        self.assertEqual({h: 27 for h in HOSTS},
                         {h: len(nodes) for h, nodes in by_shard.items()})
        sharded = {h: sum(1 for n in nodes
                          if self.ironic.nodes[n]['shard'] is not None)
                   for h, nodes in by_shard.items()}
        self.assertEqual({h: 24 for h in HOSTS}, sharded)

    def test_reload_to_nodes_and_back(self) -> None:
        before = self.period()
        self.flags(divide='nodes', group='ironic_multi')
        self.period()
        self.flags(divide='shards', group='ironic_multi')
        self.assertEqual(before, self.period())


class ShardBalanceTest(base.DriverTestCase):
    """The balanced ring's hosts manage about as many nodes each.

    Counting the nodes without a shard, which the node ring divides among
    them.
    """

    def setUp(self) -> None:
        super().setUp()
        for host in HOSTS:
            self.make_service(host)
        self.drivers = self.fleet_drivers(HOSTS)
        self.flags(divide='shards', ring_algorithm='balanced',
                   group='ironic_multi')
        self.rng = random.Random(20)

    def enroll(self, count: int, shard: str | None = None) -> None:
        for _ in range(count):
            self.ironic.add_node(
                str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                shard=shard)

    def assert_balanced(self) -> None:
        for _ in range(2):      # cold (whole scope), then warm (shards)
            totals = {h: len(self.drivers[h].get_available_nodes())
                      for h in HOSTS}
            self.assertEqual(len(self.ironic.nodes), sum(totals.values()))
            mean = len(self.ironic.nodes) / len(HOSTS)
            for host, total in totals.items():
                self.assertLessEqual(abs(total - mean), 0.05 * mean,
                                     '%s: %s' % (host, totals))

    def test_nodes_without_a_shard_are_not_a_shard(self) -> None:
        # Issue 20.6: 9 shards of 100 and 300 nodes without a shard gave
        # 499 / 198 / 503 nodes instead of about 400 each.
        for i in range(9):
            self.enroll(100, 'rack-%d' % i)
        self.enroll(300)
        self.assert_balanced()

    def test_skewed_shards_with_nodes_without_a_shard(self) -> None:
        for i, size in enumerate((240, 120, 120, 60, 60, 60, 30, 30)):
            self.enroll(size, 'rack-%d' % i)
        self.enroll(300)
        self.assert_balanced()


class ShardAssignmentTest(test.NoDBTestCase):

    def test_compatible_places_shard_names_like_nodes(self) -> None:
        ring = rings.load('compatible', HOSTS, 5)
        counts = {s: 3 for s in SHARDS}
        self.assertEqual(ring.assign(sorted(SHARDS)),
                         sharding.assign(ring, counts, weighted=False))

    def test_weighted_respects_node_counts_and_order(self) -> None:
        ring = rings.load('balanced', HOSTS, 5)
        counts = {'big': 90, **{'s%02d' % i: 10 for i in range(18)}}
        placed = sharding.assign(ring, counts, weighted=True)
        reversed_counts = dict(reversed(list(counts.items())))
        self.assertEqual(placed,
                         sharding.assign(ring, reversed_counts, True))
        load = {h: 0 for h in HOSTS}
        for shard, host in placed.items():
            load[host] += counts[shard]
        self.assertLessEqual(max(load.values()), 90)
        self.assertEqual(270, sum(load.values()))

    def test_unsharded_count_has_no_weight_but_its_name_an_owner(
            self) -> None:
        # 'None' also names a shard really called so: it keeps an owner.
        self.assertEqual(ironic.UNSHARDED, sharding.UNSHARDED)
        ring = rings.load('balanced', HOSTS, 5)
        counts = {sharding.UNSHARDED: 600, 'a': 200, 'b': 200, 'c': 200}
        placed = sharding.assign(ring, counts, weighted=True)
        self.assertEqual(set(counts), set(placed))
        self.assertEqual(3, len({placed[s] for s in 'abc'}))

    def test_no_members_no_shards(self) -> None:
        ring = rings.load('compatible', [], 5)
        self.assertEqual({}, sharding.assign(ring, {'a': 1}, True))
