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
"""The division as nova sees it: nodes, resources, instances, outages."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

from nova.compute import power_state
from nova.compute import provider_tree
from nova import exception
from nova import objects
from nova.virt import virtapi
import oslo_messaging

from nova_ironic_multi import driver
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi import membership
from nova_ironic_multi.membership import servicegroup
from nova_ironic_multi import rings
from nova_ironic_multi.tests.unit import base

HOSTS = ('host1', 'host2', 'host3')


class DivisionTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        for host in HOSTS:
            self.make_service(host)
        self.node_ids = [self.ironic.add_node() for _ in range(30)]
        # Every service must show up as an Ironic compute in nova's eyes.
        self.drivers = self.fleet_drivers(HOSTS)

    def owner_by_ring(self, node: str) -> str:
        return rings.load('compatible', HOSTS, 5).assign([node])[node]

    def test_every_node_reported_by_exactly_one_host(self) -> None:
        reported = {h: set(d.get_available_nodes())
                    for h, d in self.drivers.items()}
        everything = set().union(*reported.values())
        self.assertEqual(set(self.node_ids), everything)
        self.assertEqual(len(self.node_ids),
                         sum(len(r) for r in reported.values()))
        for host, nodes in reported.items():
            self.assertTrue(nodes, host)
            for node in nodes:
                self.assertEqual(host, self.owner_by_ring(node))

    def test_nodenames_by_uuid_are_the_node_uuids(self) -> None:
        names = self.driver.get_nodenames_by_uuid()
        self.assertEqual(set(self.driver.get_available_nodes()), set(names))
        self.assertTrue(all(k == v for k, v in names.items()))

    def test_instance_nodes_stay_with_their_instance_host(self) -> None:
        node = next(n for n in self.node_ids
                    if self.owner_by_ring(n) == 'host2')
        inst = self.make_instance(host='host1')
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        self.assertIn(node, self.drivers['host1'].get_available_nodes())
        self.assertNotIn(node, self.drivers['host2'].get_available_nodes())
        self.assertNotIn(node, self.drivers['host3'].get_available_nodes())

    def test_regression_1839560_maintenance_nodes_stay_in_the_division(
            self) -> None:
        # A node in maintenance is still managed by the host the ring gives
        # it (reported with its unit reserved), and so is one with an
        # instance: dropping them would delete their compute nodes, and
        # their return would create them again (nova bug 1839560).
        owner = {n: self.owner_by_ring(n) for n in self.node_ids}
        free = next(n for n in self.node_ids if owner[n] == 'host2')
        busy = next(n for n in self.node_ids if owner[n] == 'host3')
        inst = self.make_instance(host='host1')
        self.ironic.nodes[busy].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE,
                                       maintenance=True)
        self.ironic.nodes[free]['maintenance'] = True
        reported = {h: set(d.get_available_nodes())
                    for h, d in self.drivers.items()}
        self.assertEqual({'host1': {busy}, 'host2': {free}, 'host3': set()},
                         {h: r & {free, busy} for h, r in reported.items()})
        self.assertEqual(set(self.node_ids), set().union(*reported.values()))
        self.assertEqual(len(self.node_ids),
                         sum(len(r) for r in reported.values()))
        tree = provider_tree.ProviderTree()
        tree.new_root(free, free)
        self.drivers['host2'].update_provider_tree(tree, free)
        self.assertEqual(1, tree.data(free).inventory['CUSTOM_BAREMETAL'][
            'reserved'])

    def test_regression_1750450_outage_is_not_an_empty_fleet(self) -> None:
        before = self.driver.get_available_nodes()
        self.ironic.fail('list_nodes', ironic.IronicUnavailable('refused'))
        self.assertRaises(exception.VirtDriverNotReady,
                          self.driver.get_available_nodes)
        # The cache still serves the resource tracker meanwhile.
        self.assertEqual(set(before),
                         set(self.driver._inventory.cached().nodes))
        self.assertEqual(before, self.driver.get_available_nodes())

    def test_regression_1841481_instances_read_after_the_nodes(self) -> None:
        # A node the ring gives host2 gets one of host1's instances while
        # host1 is listing: it must stay host1's, not look foreign.
        node = next(n for n in self.node_ids
                    if self.owner_by_ring(n) == 'host2')
        real_list = self.ironic.list_nodes

        def list_while_spawning(scope: Any) -> Any:
            listed = real_list(scope)
            inst = self.make_instance(host='host1')
            self.ironic.nodes[node]['instance_uuid'] = inst.uuid
            return [n if n.uuid != node else
                    self.ironic.get_node(node) for n in listed]

        self.ironic.list_nodes = list_while_spawning  # type: ignore
        self.assertIn(node, self.driver.get_available_nodes())

    def test_regression_2043036_list_instances_only_this_hosts(self) -> None:
        mine = self.make_instance(host='host1', display_name='mine')
        theirs = self.make_instance(host='host2', display_name='theirs')
        self.ironic.nodes[self.node_ids[0]].update(
            instance_uuid=mine.uuid, provision_state=states.ACTIVE)
        self.ironic.nodes[self.node_ids[1]].update(
            instance_uuid=theirs.uuid, provision_state=states.ACTIVE)
        self.driver.get_available_nodes()
        self.assertEqual([mine.uuid], self.driver.list_instance_uuids())
        self.assertEqual([mine.name], self.driver.list_instances())
        self.assertEqual(1, self.driver.get_num_instances())
        self.drivers['host2'].get_available_nodes()
        self.assertEqual([theirs.uuid],
                         self.drivers['host2'].list_instance_uuids())

    def deployed_then_deleted(self, host: str | None) -> tuple[str, Any]:
        """A node the ring gives host3, deployed for an instance of
        ``host`` (None: nova cleared its host) that nova then deleted.
        """
        node = next(n for n in self.node_ids
                    if self.owner_by_ring(n) == 'host3')
        inst = self.make_instance(host='host2')
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        if host is None:
            inst.host = None
            inst.save()
        inst.destroy()
        return node, inst

    def reaper_finds(self, host: str) -> list[str]:
        """What nova's reaper asks: deleted instances among the driver's."""
        deleted = objects.InstanceList.get_by_filters(
            self.ctxt, {'deleted': True, 'soft_deleted': False,
                        'uuid': self.drivers[host].list_instance_uuids()})
        return [i.uuid for i in deleted]

    def test_orphan_stays_with_the_host_of_its_deleted_instance(
            self) -> None:
        # nova-api deleted host2's instance while host2 was down (a local
        # delete): the node is still deployed with the instance's UUID.
        # host2 keeps it and lists the instance, so nova's reaper there
        # (which filters list_instance_uuids to deleted instances) finds it;
        # no other host reports it.
        node, inst = self.deployed_then_deleted('host2')
        with self.assertLogs('nova_ironic_multi.period',
                             'WARNING') as logs:
            reported = {h: set(d.get_available_nodes())
                        for h, d in self.drivers.items()}
        self.assertEqual({'host2'},
                         {h for h, nodes in reported.items() if node in nodes})
        self.assertIn(inst.uuid, self.drivers['host2'].list_instance_uuids())
        self.assertIn('which nova deleted while this host was down',
                      '\n'.join(logs.output))
        self.assertEqual([inst.uuid], self.reaper_finds('host2'))
        # Torn down by the reaper: free again, and the ring's as before.
        self.ironic.nodes[node].update(instance_uuid=None,
                                       provision_state=states.AVAILABLE)
        reported = {h: set(d.get_available_nodes())
                    for h, d in self.drivers.items()}
        self.assertEqual({'host3'},
                         {h for h, nodes in reported.items() if node in nodes})

    def test_deleted_instance_with_no_host_is_its_ring_owners_orphan(
            self) -> None:
        # A build that failed after its server was handed over: nova
        # cleared the instance's host, and the server was deleted later.
        # Its node is still deployed. The host whose ring share holds the
        # node keeps it and lists the instance for nova's reaper; the
        # other hosts leave it alone.
        node, inst = self.deployed_then_deleted(None)
        with self.assertLogs('nova_ironic_multi.period',
                             'WARNING') as logs:
            reported = {h: set(d.get_available_nodes())
                        for h, d in self.drivers.items()}
        self.assertEqual({'host3'},
                         {h for h, nodes in reported.items() if node in nodes})
        self.assertEqual(
            {'host3'}, {h for h, d in self.drivers.items()
                        if inst.uuid in d.list_instance_uuids()})
        said = [line for line in logs.output if 'deleted with no host' in line]
        self.assertEqual(1, len(said), logs.output)
        self.assertEqual([inst.uuid], self.reaper_finds('host3'))
        # The node stays host3's, said once, while the reaper has not run.
        with self.assertLogs('nova_ironic_multi.period', 'DEBUG') as logs:
            self.assertIn(node, self.drivers['host3'].get_available_nodes())
        self.assertFalse([line for line in logs.output
                          if 'deleted with no host' in line])

    def test_instance_nova_never_knew_is_reported_by_the_ring_owner_only(
            self) -> None:
        node = next(n for n in self.node_ids
                    if self.owner_by_ring(n) == 'host3')
        self.ironic.nodes[node].update(instance_uuid='f' * 32,
                                       provision_state=states.ACTIVE)
        for host, drv in self.drivers.items():
            with self.assertLogs('nova_ironic_multi.period') as logs:
                nodes = drv.get_available_nodes()
            self.assertNotIn(node, nodes)
            said = [line for line in logs.output
                    if 'which nova has never heard of' in line]
            self.assertEqual(host == 'host3', bool(said), (host, said))
        # Said once, not every period.
        with self.assertLogs(
                'nova_ironic_multi.period', 'DEBUG') as logs:
            self.drivers['host3'].get_available_nodes()
        self.assertFalse([line for line in logs.output
                          if 'never heard of' in line])

    def test_node_outside_the_scope_is_never_reported(self) -> None:
        self.flags(partition_key='rack-a', peer_list=['host1'],
                   group='ironic_multi')
        inside = self.ironic.add_node(conductor_group='rack-a')
        # An Ironic that ignores the filter (as its "next" links do).
        self.ironic.ignore_filters = True
        self.assertEqual([inside], self.driver.get_available_nodes())
        (scope,) = self.ironic.calls_to('list_nodes')[-1]
        self.assertEqual('rack-a', scope.conductor_group)

    def test_scope_ironic_cannot_filter_fails_closed(self) -> None:
        self.ironic.version = (1, 80)
        self.flags(shard='shard-1', group='ironic')
        with self.assertLogs(
                'nova_ironic_multi.period', 'ERROR') as logs:
            self.assertRaises(exception.VirtDriverNotReady,
                              self.driver.get_available_nodes)
        self.assertIn('shard', '\n'.join(logs.output))

    def test_unknown_peers_are_not_ready(self) -> None:
        with mock.patch.object(
                servicegroup.ServiceGroupMembership, 'live_peers',
                side_effect=membership.MembershipUnavailable('db down')):
            self.assertRaises(exception.VirtDriverNotReady,
                              self.driver.get_available_nodes)

    def test_conductor_timeout_is_not_ready(self) -> None:
        # On a compute host nova's objects are read through the conductor.
        with mock.patch('nova.objects.InstanceList.get_uuids_by_host',
                        side_effect=oslo_messaging.MessagingTimeout('slow')):
            self.assertRaises(exception.VirtDriverNotReady,
                              self.driver.get_available_nodes)

    def test_invalid_reload_keeps_the_last_good_partition(self) -> None:
        before = set(self.driver.get_available_nodes())
        self.flags(partition_key='rack-a', peer_list=['host1'],
                   group='ironic_multi')
        self.flags(conductor_group='rack-b', group='ironic')
        with self.assertLogs(
                'nova_ironic_multi.period', 'ERROR') as logs:
            after = set(self.driver.get_available_nodes())
        self.assertEqual(before, after)
        self.assertIn('[ironic] conductor_group', '\n'.join(logs.output))

    def test_host_left_out_of_peer_list_keeps_only_its_instances(
            self) -> None:
        inst = self.make_instance(host='host1')
        node = self.node_ids[0]
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        self.assertGreater(len(self.driver.get_available_nodes()), 1)
        self.flags(peer_list=['host2', 'host3'], group='ironic_multi')
        self.assertEqual([node], self.driver.get_available_nodes())

    def test_concurrent_callers_share_refreshes(self) -> None:
        # Every caller asks while one refresh is listing: they must all get
        # that refresh's result, not list Ironic again one after the other.
        # (Without the sharing there would be one listing per caller.)
        callers = 6
        real_list = self.ironic.list_nodes

        class ArrivalLock:
            """The refresh lock, counting the callers that reached it.

            A caller reads the refresh count before it takes the lock.
            """

            def __init__(self) -> None:
                self.lock = threading.Lock()
                self.arrived = threading.Semaphore(0)

            def __enter__(self) -> None:
                self.arrived.release()
                self.lock.acquire()

            def __exit__(self, *exc: object) -> None:
                self.lock.release()

        lock = ArrivalLock()

        def slow_list(scope: Any) -> Any:
            # Hold the first listing until every caller waits for its lock.
            for _ in range(callers):
                self.assertTrue(lock.arrived.acquire(timeout=10))
            self.ironic.list_nodes = real_list  # type: ignore
            return real_list(scope)

        self.driver._inventory._refresh_lock = lock  # type: ignore
        self.ironic.list_nodes = slow_list  # type: ignore
        listed_before = len(self.ironic.calls_to('list_nodes'))
        results: list[set[str]] = []
        barrier = threading.Barrier(callers)

        def work() -> None:
            barrier.wait()
            results.append(set(self.driver.get_available_nodes()))

        threads = [threading.Thread(target=work) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(callers, len(results))
        self.assertEqual(1, len({frozenset(r) for r in results}))
        # One listing served every caller.
        self.assertEqual(
            1, len(self.ironic.calls_to('list_nodes')) - listed_before)


class NodeQueriesTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node(traits=['CUSTOM_GOLD'],
                                         properties={
                                             'cpu_arch': 'x86_64',
                                             'capabilities':
                                                 'boot_mode:uefi,bad',
                                             'local_gb': 10})
        self.driver.get_available_nodes()

    def test_node_is_available(self) -> None:
        self.assertTrue(self.driver.node_is_available(self.node))
        other = self.ironic.add_node()
        self.assertTrue(self.driver.node_is_available(other))
        self.assertFalse(self.driver.node_is_available('missing'))
        self.ironic.fail('get_node', ironic.IronicUnavailable('down'))
        self.assertTrue(self.driver.node_is_available('unknown-now'))

    def test_is_node_deleted_only_on_404(self) -> None:
        self.assertFalse(self.driver.is_node_deleted(self.node))
        self.assertTrue(self.driver.is_node_deleted('missing'))
        self.ironic.fail('get_node', ironic.IronicUnavailable('down'))
        self.assertFalse(self.driver.is_node_deleted(self.node))

    def tree(self) -> provider_tree.ProviderTree:
        tree = provider_tree.ProviderTree()
        tree.new_root(self.node, self.node)
        return tree

    def test_provider_tree_one_unit_free(self) -> None:
        tree = self.tree()
        self.driver.update_provider_tree(tree, self.node)
        data = tree.data(self.node)
        self.assertEqual({'CUSTOM_BAREMETAL': {
            'total': 1, 'reserved': 0, 'min_unit': 1, 'max_unit': 1,
            'step_size': 1, 'allocation_ratio': 1.0}}, data.inventory)
        self.assertEqual({'CUSTOM_GOLD'}, data.traits)

    def _reserved(self) -> int:
        self.driver.get_available_nodes()
        tree = self.tree()
        self.driver.update_provider_tree(tree, self.node)
        return int(tree.data(self.node).inventory['CUSTOM_BAREMETAL'][
            'reserved'])

    def test_provider_tree_reserved_when_used_or_unavailable(self) -> None:
        inst = self.make_instance()
        self.ironic.nodes[self.node].update(instance_uuid=inst.uuid,
                                            provision_state=states.ACTIVE)
        self.assertEqual(1, self._reserved())
        self.flags(skip_reserve_in_use_ironic_nodes=True, group='workarounds')
        # In use but ACTIVE is still "not available" for a new instance.
        self.assertEqual(1, self._reserved())
        self.ironic.nodes[self.node].update(provision_state=states.AVAILABLE)
        self.assertEqual(0, self._reserved())
        self.ironic.nodes[self.node].update(instance_uuid=None,
                                            maintenance=True)
        self.assertEqual(1, self._reserved())

    def test_provider_tree_without_resource_class(self) -> None:
        self.ironic.nodes[self.node]['resource_class'] = None
        self.driver.get_available_nodes()
        self.assertRaises(exception.NoResourceClass,
                          self.driver.update_provider_tree, self.tree(),
                          self.node)

    def test_available_resource(self) -> None:
        res = self.driver.get_available_resource(self.node)
        self.assertEqual(self.node, res['hypervisor_hostname'])
        self.assertEqual(self.node, res['uuid'])
        self.assertEqual('ironic', res['hypervisor_type'])
        self.assertEqual([('x86_64', 'baremetal', 'hvm')],
                         res['supported_instances'])
        self.assertEqual({'cpu_arch': 'x86_64', 'boot_mode': 'uefi'},
                         res['stats'])
        self.assertEqual(0, res['vcpus'] + res['memory_mb'] + res['local_gb'])

    def test_resources_of_a_node_not_cached_are_read(self) -> None:
        other = self.ironic.add_node()
        self.assertEqual(other,
                         self.driver.get_available_resource(other)['uuid'])
        self.assertRaises(exception.NovaException,
                          self.driver.get_available_resource, 'missing')

    def test_get_info_and_instance_exists(self) -> None:
        inst = self.fake_instance(self.node)
        self.assertEqual(power_state.NOSTATE,
                         self.driver.get_info(inst).state)
        self.assertFalse(self.driver.instance_exists(inst))
        self.ironic.nodes[self.node].update(
            instance_uuid=inst.uuid, power_state=states.POWER_ON,
            provision_state=states.ACTIVE)
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(inst, use_cache=False).state)
        self.assertTrue(self.driver.instance_exists(inst))
        self.ironic.fail('node_for_instance', ironic.IronicUnavailable('x'))
        self.assertRaises(exception.NovaException, self.driver.get_info,
                          inst, use_cache=False)


class StartupTest(base.DriverTestCase):

    def test_contradiction_refuses_to_start_naming_both_options(
            self) -> None:
        self.flags(partition_key='rack-a', peer_list=['host1'],
                   group='ironic_multi')
        self.flags(conductor_group='rack-b', group='ironic')
        drv = driver.IronicDriver(virtapi.VirtAPI())
        exc = self.assertRaises(exception.InvalidConfiguration,
                                drv.init_host, 'host1')
        self.assertIn('[ironic_multi] partition_key', str(exc))
        self.assertIn('[ironic] conductor_group', str(exc))

    def test_divide_shards_with_nova_shard_refuses_to_start(self) -> None:
        self.flags(divide='shards', group='ironic_multi')
        self.flags(shard='shard-1', group='ironic')
        drv = driver.IronicDriver(virtapi.VirtAPI())
        exc = self.assertRaises(exception.InvalidConfiguration,
                                drv.init_host, 'host1')
        self.assertIn('[ironic_multi] divide = shards', str(exc))
        self.assertIn('[ironic] shard', str(exc))

    def test_divide_shards_without_api_1_82_fails_closed(self) -> None:
        self.ironic.version = (1, 81)
        self.ironic.add_node()
        self.flags(divide='shards', group='ironic_multi')
        with self.assertLogs(
                'nova_ironic_multi.period', 'ERROR') as logs:
            self.assertRaises(exception.VirtDriverNotReady,
                              self.driver.get_available_nodes)
        text = '\n'.join(logs.output)
        self.assertIn('[ironic_multi] divide = shards needs Ironic API '
                      '1.82', text)
        self.assertEqual([], self.ironic.calls_to('list_nodes'))

    def test_unknown_ring_refuses_to_start(self) -> None:
        self.flags(ring_algorithm='fancy', group='ironic_multi')
        drv = driver.IronicDriver(virtapi.VirtAPI())
        exc = self.assertRaises(exception.InvalidConfiguration,
                                drv.init_host, 'host1')
        self.assertIn('[ironic_multi] ring_algorithm', str(exc))

    def test_wrong_ironic_credentials_refuse_to_start(self) -> None:
        # As Ironic.connect() says it when Keystone answers 401.
        drv = driver.IronicDriver(virtapi.VirtAPI())
        self.ironic.fail('connect', ironic.IronicMisconfigured(
            'Keystone at http://k/v3 rejected the service user of [ironic] '
            '(auth_type password): 401. Check ' +
            ironic.CREDENTIAL_OPTIONS + '.'))
        exc = self.assertRaises(exception.InvalidConfiguration,
                                drv.init_host, 'host1')
        self.assertIn('[ironic] auth_url, auth_type, username, password',
                      str(exc))

    def test_keystone_down_at_start_starts_not_ready(self) -> None:
        drv = driver.IronicDriver(virtapi.VirtAPI())
        outage = ironic.IronicUnavailable('Keystone at http://k/v3 cannot '
                                          'be reached or failed: refused')
        self.ironic.fail('connect', outage)
        self.ironic.fail('list_nodes', outage)
        drv.init_host('host1')
        self.assertRaises(exception.VirtDriverNotReady,
                          drv.get_available_nodes)
        # Keystone back: the next period lists the nodes.
        node = self.ironic.add_node()
        self.assertIn(node, drv.get_available_nodes())

    def test_an_ironic_too_old_at_start_is_said_as_such(self) -> None:
        # It was logged as "Ironic cannot be reached yet" (the network).
        drv = driver.IronicDriver(virtapi.VirtAPI())
        too_old = ironic.VersionNotSupported(
            'Ironic at http://i:6385 offers API versions 1.1 to 1.40; this '
            'driver needs 1.46 or newer')
        self.ironic.fail('connect', too_old)
        self.ironic.fail('list_nodes', too_old)
        with self.assertLogs('nova_ironic_multi.service.startup',
                             'WARNING') as logs:
            drv.init_host('host1')
        (line,) = logs.output
        self.assertTrue(line.startswith('ERROR:'), line)
        self.assertIn('offers API versions 1.1 to 1.40; this driver needs '
                      '1.46 or newer', line)
        self.assertNotIn('cannot be reached', line)
        self.assertRaises(exception.VirtDriverNotReady,
                          drv.get_available_nodes)

    def test_keystone_outage_in_a_period_is_not_ready_never_empty(
            self) -> None:
        self.make_service('host1')
        node = self.ironic.add_node()
        self.assertEqual([node], self.driver.get_available_nodes())
        self.ironic.fail('list_nodes', ironic.IronicUnavailable(
            'list: Keystone at http://k/v3 cannot be reached'))
        self.assertRaises(exception.VirtDriverNotReady,
                          self.driver.get_available_nodes)
        # The node is not reported gone: only Ironic's 404 says that.
        self.assertFalse(self.driver.is_node_deleted(node))
        self.assertEqual([node], self.driver.get_available_nodes())

    def test_capabilities_match_the_in_tree_driver(self) -> None:
        from nova.virt.ironic import driver as in_tree
        self.assertEqual(in_tree.IronicDriver.capabilities,
                         driver.IronicDriver.capabilities)
        self.assertTrue(driver.IronicDriver.rebalances_nodes)
