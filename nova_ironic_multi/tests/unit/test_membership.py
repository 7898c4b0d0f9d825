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
"""Membership against nova's real service records and servicegroup API."""

from __future__ import annotations

import datetime
from typing import Any
import uuid

import fixtures

from nova.conf import CONF
from nova import context as nova_context
from nova import objects
from nova import test
from nova.tests.functional import fixtures as func_fixtures
from oslo_utils import fixture as utils_fixture
from oslo_utils import timeutils

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import ownership
from nova_ironic_multi.division import partition
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import servicegroup
from nova_ironic_multi import rings


def make_service(ctxt: nova_context.RequestContext, host: str,
                 hypervisor_type: str | None = 'ironic',
                 marked: bool | None = None,
                 **fields: object) -> objects.Service:
    """A nova-compute service record, with one compute node of its type.

    :param hypervisor_type: None: no compute node (an Ironic host whose
        share is empty).
    :param marked: whether it published this driver's marker (default:
        when it runs this driver, ``ironic`` or None).
    """
    svc = objects.Service(ctxt, host=host, binary='nova-compute',
                          topic='compute', report_count=1, **fields)
    svc.create()
    if marked is None:
        marked = hypervisor_type in ('ironic', None)
    if marked:
        marker.publish(host, svc.uuid)
    if hypervisor_type:
        add_compute_node(ctxt, host, hypervisor_type)
    return svc


def add_compute_node(ctxt: nova_context.RequestContext, host: str,
                     hypervisor_type: str) -> objects.ComputeNode:
    cn = objects.ComputeNode(
            ctxt, host=host, hypervisor_hostname=str(uuid.uuid4()),
            uuid=str(uuid.uuid4()), hypervisor_type=hypervisor_type,
            hypervisor_version=1, vcpus=0, memory_mb=0, local_gb=0,
            vcpus_used=0, memory_mb_used=0, local_gb_used=0, cpu_info='',
            disk_available_least=0, free_ram_mb=0, free_disk_gb=0,
            current_workload=0, running_vms=0)
    cn.create()
    return cn


class NovaMembershipTest(test.TestCase):

    def setUp(self) -> None:
        super().setUp()
        nim_conf.register_opts(CONF)
        self.useFixture(func_fixtures.PlacementFixture())
        self.ctxt = nova_context.get_admin_context()

    def partition(self, host: str, **ours: object) -> partition.Partition:
        for name, value in ours.items():
            self.flags(group='ironic_multi', **{name: value})
        return partition_opts.resolve(CONF, host)

    def peers(self, plugin: str, host: str, **ours: object) -> set[str]:
        part = self.partition(host, membership_driver=plugin, **ours)
        return set(membership.load(plugin, CONF, host).live_peers(part))

    def test_up_ironic_computes_lower_cased_plus_this_host(self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'Host2')
        make_service(self.ctxt, 'libvirt1', hypervisor_type='QEMU')
        self.assertEqual({'host1', 'host2', 'newhost'},
                         self.peers('servicegroup', 'NewHost'))
        self.assertEqual({'host1', 'host2'},
                         self.peers('servicegroup', 'Host2'))

    def test_an_ironic_host_with_an_empty_share_is_every_hosts_peer(
            self) -> None:
        # It has no compute node (its share is empty, or it just started):
        # its peers must count it as it counts itself, or their views
        # differ and they take free nodes from each other forever.
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'empty', hypervisor_type=None)
        make_service(self.ctxt, 'libvirt1', hypervisor_type='QEMU')
        make_service(self.ctxt, 'off', hypervisor_type=None, disabled=True)
        self.assertEqual({'host1', 'empty'},
                         self.peers('servicegroup', 'host1'))
        self.assertEqual({'host1', 'empty'},
                         self.peers('servicegroup', 'empty'))

    def test_a_new_or_crash_looping_host_of_another_hypervisor_is_no_peer(
            self) -> None:
        # Up and enabled, no compute node yet (just started, or it keeps
        # failing before it creates one): it never publishes the marker.
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'empty', hypervisor_type=None)
        make_service(self.ctxt, 'libvirt1', hypervisor_type=None,
                     marked=False)
        for host in ('host1', 'empty'):
            self.assertEqual({'host1', 'empty'},
                             self.peers('servicegroup', host))

    def test_a_host_of_the_in_tree_driver_with_nodes_is_a_peer(
            self) -> None:
        # A rolling migration: nova's own Ironic driver publishes no
        # marker, but counts every host with Ironic compute nodes.
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'intree', marked=False)
        self.assertEqual({'host1', 'intree'},
                         self.peers('servicegroup', 'host1'))

    def test_a_reused_name_with_a_deleted_ironic_compute_node_is_no_peer(
            self) -> None:
        # host2 ran this driver; its service was deleted (nova soft-deletes
        # its compute nodes) and a libvirt host took the name, with a new
        # service record. nova's service_get_all_computes_by_hv_type still
        # matches the deleted Ironic row.
        make_service(self.ctxt, 'host1')
        old = make_service(self.ctxt, 'host2')
        for cn in objects.ComputeNodeList.get_all_by_host(self.ctxt,
                                                          'host2'):
            cn.destroy()
        old.destroy()
        make_service(self.ctxt, 'host2', hypervisor_type=None, marked=False)
        self.assertIn('host2', {s.host for s in
                                objects.ServiceList.get_all_computes_by_hv_type(
                                    self.ctxt, 'ironic')})
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))
        # Once it has its libvirt compute node, still not.
        add_compute_node(self.ctxt, 'host2', 'QEMU')
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))

    def test_a_host_reinstalled_under_the_same_service_record_is_no_peer(
            self) -> None:
        # The record (and its marker) stayed; the new libvirt compute
        # creates its compute node before its heartbeats begin, and nova
        # deletes the Ironic rows it no longer reports.
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2')
        plugin = membership.load('servicegroup', CONF, 'host1')
        part = self.partition('host1', membership_driver='servicegroup')
        self.assertEqual({'host1', 'host2'}, set(plugin.live_peers(part)))
        for cn in objects.ComputeNodeList.get_all_by_host(self.ctxt,
                                                          'host2'):
            cn.destroy()
        add_compute_node(self.ctxt, 'host2', 'QEMU')
        # (A reinstall takes the service down first: its peers forget
        # what they knew of it.)
        self.flags(service_down_time=60)
        later = timeutils.utcnow() + datetime.timedelta(seconds=61)
        self.useFixture(utils_fixture.TimeFixture(later))
        self.assertNotIn('host2', plugin.live_peers(part))
        host2 = objects.Service.get_by_host_and_binary(
            self.ctxt, 'host2', 'nova-compute')
        host2.report_count += 1
        host2.save()
        host1 = objects.Service.get_by_host_and_binary(
            self.ctxt, 'host1', 'nova-compute')
        host1.report_count += 1
        host1.save()
        self.assertEqual({'host1'}, set(plugin.live_peers(part)))

    def test_an_ironic_host_publishes_its_marker_and_counts_once_seen(
            self) -> None:
        # A new Ironic host with an empty share: no marker yet. Its first
        # period publishes it; from then on every peer counts it.
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2', hypervisor_type=None, marked=False)
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))
        self.assertEqual({'host1', 'host2'},
                         self.peers('servicegroup', 'host2'))
        svc = objects.Service.get_by_host_and_binary(self.ctxt, 'host2',
                                                     'nova-compute')
        self.assertIn(svc.uuid, marker.read())
        self.assertEqual({'host1', 'host2'},
                         self.peers('servicegroup', 'host1'))

    def test_the_first_host_finds_no_marker_and_publishes_its_own(
            self) -> None:
        # Placement knows no such trait yet: no marker, not an error.
        make_service(self.ctxt, 'host1', marked=False)
        self.assertEqual(frozenset(), marker.read())
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))
        self.assertEqual(1, len(marker.read()))

    def test_a_host_that_cannot_publish_does_not_count_itself(
            self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2', hypervisor_type=None, marked=False)
        real = marker.call

        def refuse(method: str, url: str, data: Any = None) -> Any:
            if method != 'get':
                raise marker.MarkerError('placement is read-only today')
            return real(method, url, data)

        self.useFixture(fixtures.MockPatchObject(marker, 'call', refuse))
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host2'))
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))

    def test_placement_down_is_membership_unavailable(self) -> None:
        make_service(self.ctxt, 'host1')

        def down(*args: Any, **kwargs: Any) -> Any:
            raise marker.MarkerError('cannot reach placement')

        self.useFixture(fixtures.MockPatchObject(marker, 'call', down))
        self.assertRaises(membership.MembershipUnavailable,
                          self.peers, 'servicegroup', 'host1')

    def test_forced_down_and_disabled_peers_are_dropped(self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2', forced_down=True)
        make_service(self.ctxt, 'host3', disabled=True)
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))

    def test_service_down_time_counts(self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2')
        self.flags(service_down_time=60)
        later = timeutils.utcnow() + datetime.timedelta(seconds=61)
        self.useFixture(utils_fixture.TimeFixture(later))
        host1 = objects.Service.get_by_host_and_binary(self.ctxt, 'host1',
                                                       'nova-compute')
        host1.report_count += 1
        host1.save()
        # host2 stopped reporting: host1 drops it, and so does host2 itself
        # (its peers no longer count it, so it must not claim their nodes).
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host1'))
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host2'))

    def test_peer_list_limits_the_peers(self) -> None:
        for h in ('host1', 'host2', 'host3'):
            make_service(self.ctxt, h)
        self.assertEqual({'host1', 'host3'},
                         self.peers('servicegroup', 'host1',
                                    peer_list=['host1', 'HOST3']))

    def test_regression_1866380_mixed_case_service_hosts_in_peer_list(
            self) -> None:
        # nova keeps a service's host as the operator wrote it; peer_list
        # may spell it otherwise. Both sides are compared lower-cased.
        make_service(self.ctxt, 'HOST1')
        make_service(self.ctxt, 'Host2')
        make_service(self.ctxt, 'host3')
        make_service(self.ctxt, 'hOsT4')
        peer_list = ['host1', 'HOST2', 'Host3']
        for plugin in ('servicegroup', 'static'):
            for host in ('HOST1', 'Host2', 'host3'):
                self.assertEqual(
                    {'host1', 'host2', 'host3'},
                    self.peers(plugin, host, peer_list=peer_list),
                    (plugin, host))

    def test_counts_compares_host_names_lower_cased(self) -> None:
        part = partition.Partition(
            host='host1', scope=partition.Scope(),
            peers=frozenset({'host1', 'host2'}),
            membership_driver='static', ring_algorithm='compatible',
            partition_exponent=5)
        make_service(self.ctxt, 'HoSt2')
        make_service(self.ctxt, 'Host5')
        svcs = {s.host: s for s in servicegroup.services(
            self.ctxt)}
        self.assertTrue(servicegroup.counts(
            svcs['HoSt2'], part, None))
        self.assertFalse(servicegroup.counts(
            svcs['Host5'], part, None))

    def test_static_counts_listed_services_even_without_nodes(self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2', hypervisor_type=None)
        make_service(self.ctxt, 'host3', forced_down=True)
        make_service(self.ctxt, 'host4')
        self.assertEqual(
            {'host1', 'host2'},
            self.peers('static', 'host1',
                       peer_list=['host1', 'host2', 'host3']))

    def test_regression_disabled_host_does_not_double_claim(self) -> None:
        # Upstream: a disabled service kept itself in its own ring while its
        # peers dropped it, so its share was claimed twice for ever.
        for h in ('host1', 'host2', 'host3'):
            make_service(self.ctxt, h, disabled=(h == 'host2'))
        nodes = [ownership_node(i) for i in range(200)]
        owned = {}
        for host in ('host1', 'host2', 'host3'):
            members = self.peers('servicegroup', host)
            self.assertNotIn('host2', members)
            ring = rings.load('compatible', members, 5)
            owned[host] = ownership.select(
                nodes, set(), ring.select, host, partition.Scope()).owned
        self.assertEqual(set(), owned['host2'])
        self.assertEqual(set(), owned['host1'] & owned['host3'])
        self.assertEqual({n.uuid for n in nodes},
                         owned['host1'] | owned['host3'])

    def _assert_one_manager_with(self, plugin: str, **ours: object) -> None:
        hosts = ('host1', 'host2', 'host3', 'host4')
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host2', disabled=True)
        make_service(self.ctxt, 'host3', forced_down=True)
        make_service(self.ctxt, 'host4')
        views = {h: self.peers(plugin, h, **ours) for h in hosts}
        assert_every_free_node_has_one_manager(self, views)
        self.assertEqual({h: {'host1', 'host4'} for h in hosts}, views)

    def test_servicegroup_disabled_and_forced_down_hosts_manage_nothing(
            self) -> None:
        self._assert_one_manager_with('servicegroup')

    def test_static_disabled_and_forced_down_hosts_manage_nothing(
            self) -> None:
        self._assert_one_manager_with(
            'static', peer_list=['host1', 'host2', 'host3', 'host4'])

    def test_disabled_new_host_is_not_a_member_of_its_own_ring(self) -> None:
        make_service(self.ctxt, 'host1')
        make_service(self.ctxt, 'host9', hypervisor_type=None, disabled=True)
        self.assertEqual({'host1'}, self.peers('servicegroup', 'host9'))

    def test_unknown_plugin_names_the_option(self) -> None:
        exc = self.assertRaises(loader.PluginNotFound, membership.load,
                                'gossip', CONF, 'host1')
        self.assertIn('[ironic_multi] membership_driver', str(exc))
        self.assertIn('servicegroup', str(exc))


def assert_every_free_node_has_one_manager(
        test: Any, views: dict[str, set[str]], count: int = 300) -> None:
    """Each host divides ``count`` free nodes with the members it sees.

    Every node must have exactly one manager, whatever the algorithm.
    """
    nodes = [ownership_node(i) for i in range(count)]
    managers: dict[str, list[str]] = {n.uuid: [] for n in nodes}
    for algorithm in ('compatible', 'balanced'):
        for host, members in views.items():
            ring = rings.load(algorithm, members, 5)
            for u in ownership.select(nodes, set(), ring.select, host,
                                      partition.Scope()).owned:
                managers[u].append(host)
        unmanaged = [u for u, m in managers.items() if not m]
        twice = {u: m for u, m in managers.items() if len(m) > 1}
        test.assertEqual(([], {}), (unmanaged, twice),
                         '%s: %d nodes unmanaged, %d managed twice'
                         % (algorithm, len(unmanaged), len(twice)))
        managers = {u: [] for u in managers}


class _Node:
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        self.instance_uuid = None
        self.conductor_group = None
        self.shard = None


def ownership_node(i: int) -> _Node:
    return _Node(str(uuid.UUID(int=i * 7919 + 1)))
