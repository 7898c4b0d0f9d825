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
"""drain_on_stop: a host stopped on purpose hands its servers over."""

from __future__ import annotations

import inspect
from typing import Any
from unittest import mock

from nova.compute import manager

from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.ironic import states
from nova_ironic_multi import rings
from nova_ironic_multi.tests.functional import base

PEERS = ('host1', 'host2')


class DrainCase(base.IronicCellTestCase):
    """A cell with ``drain_on_stop`` and what its tests look at."""

    # host3 gets four of them; the peers' ring gives each peer some.
    NODES = 12

    def configure(self) -> None:
        super().configure()
        self.flags(drain_on_stop=True, group='ironic_multi')
        # nova 34 waits for the operations under way within
        # manager_shutdown_timeout and keeps up to 20 s of it for the
        # clean-up: its default, not its fixture's 0, which leaves no time.
        # nova 33 sleeps that whole time before the clean-up: the fixture's
        # 0 leaves it graceful_shutdown_timeout's. nova 32 has neither.
        wait = getattr(manager.ComputeManager, 'graceful_shutdown', None)
        if wait is not None and (
                'timeout' in inspect.signature(wait).parameters):
            self.flags(manager_shutdown_timeout=160)

    def period(self, hosts: tuple[str, ...]) -> None:
        with self.cell() as cctxt:
            for host in hosts:
                self.computes[host].manager.update_available_resource(cctxt)

    def ironic_node(self, node: str) -> dict[str, Any]:
        got = self.ironic.wait_idle(node)
        return {'instance_uuid': got.instance_uuid,
                'provision_state': got.provision_state}

    @staticmethod
    def ring_host(node: str) -> str:
        return str(rings.load('compatible', PEERS, 5).assign([node])[node])

    def host3_nodes(self) -> list[str]:
        """host3's nodes: those the ring over all hosts gives it."""
        everyone = rings.load('compatible', base.HOSTS, 5).assign(
            self.node_uuids)
        return [n for n in self.node_uuids if everyone[n] == 'host3']


class DrainOnStopTest(DrainCase):

    def test_stopped_host_hands_its_servers_to_its_peers(self) -> None:
        flavor = self.baremetal_flavor()
        host3 = self.host3_nodes()
        # One server of host3 the ring hands to each peer, one on each peer.
        chosen = [next(n for n in host3 if self.ring_host(n) == h)
                  for h in PEERS]
        moving = [self.boot(flavor, host='host3', node=n) for n in chosen]
        staying = [self.boot(flavor, host=h) for h in PEERS]
        nodes = {s['id']: s['OS-EXT-SRV-ATTR:hypervisor_hostname']
                 for s in moving + staying}
        records = self.records()

        self.computes['host3'].stop()
        svc = self.service('host3')
        self.assertEqual('disabled', svc['status'])
        self.assertTrue(svc['disabled_reason'].startswith(drain.REASON))
        for server in moving:
            self.assertEqual(self.ring_host(nodes[server['id']]),
                             self.instance_host(server['id']))
        self.assertIn('Draining: handed Ironic node',
                      self.stdlog.logger.output)
        # Manageable at once, before the peers' next period.
        for server in moving:
            got = self._reboot_server(server, hard=True)
            self.assertEqual('ACTIVE', got['status'])

        # One period of the peers: each manages its new servers' nodes, and
        # no node is managed by both.
        self.period(PEERS)
        reported = {h: set(self.computes[h].manager.driver
                           .get_available_nodes()) for h in PEERS}
        self.assertFalse(reported['host1'] & reported['host2'])
        self.assertEqual(set(self.node_uuids),
                         reported['host1'] | reported['host2'])
        db = self.db_division()
        self.assertEqual(set(PEERS), set(db))
        for server in moving + staying:
            node = nodes[server['id']]
            host = self.instance_host(server['id'])
            self.assertIn(node, reported[host])
            self.assertIn(node, db[host])
            got = self.api.get_server(server['id'])
            self.assertEqual(('ACTIVE', host, None),
                             (got['status'], got['OS-EXT-SRV-ATTR:host'],
                              got['OS-EXT-STS:task_state']))
        # Same compute node rows and providers: moved, never re-created.
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))
        self.assert_same_records(records, self.records())

        # Started again (scale out), host3 takes builds again and only its
        # share of the free nodes; the servers stay where they went.
        self.computes['host3'] = self.restart_compute_service(
            self.computes['host3'], keep_hypervisor_state=False)
        self.assertEqual('enabled', self.service('host3')['status'])
        for _ in range(2):
            self._run_periodics()
        back = self.reported()
        for server in moving:
            node = nodes[server['id']]
            self.assertEqual(self.ring_host(node),
                             self.instance_host(server['id']))
            self.assertNotIn(node, back['host3'])
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))

        # Every server is manageable through nova's API on its host.
        for server in moving + staying:
            node = nodes[server['id']]
            server = self._reboot_server(server, hard=True)
            self.assertEqual('ACTIVE', server['status'])
            self.assertEqual(states.POWER_ON,
                             self.ironic.wait_idle(node).power_state)
            self._delete_server(server)
            self.assertEqual({'instance_uuid': None,
                              'provision_state': states.AVAILABLE},
                             self.ironic_node(node))
            self.assertEqual({}, self._get_allocations_by_server_uuid(
                server['id']))


class DrainRacesTest(DrainCase):
    """A drain that meets nova's API, and two hosts draining at once."""

    def test_an_api_action_just_before_the_claim_is_handed_over(
            self) -> None:
        # nova's API takes a hard reboot after host3 read its instances,
        # just before host3's claim: the claim loses to that write. The
        # reboot's cast waits in stopping host3's queue; the server is
        # handed over all the same, and its new host reboots it.
        server = self.boot(self.baremetal_flavor(), host='host3')
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        real = drain.Drain._instances

        def then_api_reboots(host: str, plan: drain.Plan) -> list[Any]:
            found = real(host, plan)
            self.api.post_server_action(server['id'],
                                        {'reboot': {'type': 'HARD'}})
            return found

        with mock.patch.object(drain.Drain, '_instances',
                               staticmethod(then_api_reboots)):
            self.computes['host3'].stop()
        new = self.ring_host(node)
        self.assertEqual(new, self.instance_host(server['id']))
        log = self.stdlog.logger.output
        self.assertIn('changed while it was handed over', log)
        self.assertNotIn('stay with host3', log)
        # Its new host's period recovers the reboot under the hand-over.
        self.period(PEERS)
        got = self._wait_for_server_parameter(
            server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
        self.assertEqual(new, got['OS-EXT-SRV-ATTR:host'])
        self.assertNotIn('fault', got)
        self.assertEqual(states.POWER_ON,
                         self.ironic.wait_idle(node).power_state)

        # host3 comes back and reads the queued reboot: dropped, the server
        # stays on its new host as it is.
        self.computes['host3'] = self.restart_compute_service(
            self.computes['host3'], keep_hypervisor_state=False)
        self._run_periodics()
        self.assertIn('Dropped a reboot_instance request for instance %s'
                      % server['id'], self.stdlog.logger.output)
        got = self.api.get_server(server['id'])
        self.assertEqual(('ACTIVE', None, new),
                         (got['status'], got['OS-EXT-STS:task_state'],
                          got['OS-EXT-SRV-ATTR:host']))

    def test_two_hosts_draining_at_once_strand_nothing(self) -> None:
        # host3's plan sends a server to host2; host2 passes host3's check,
        # then stops and drains whole (it disables itself and reads its
        # own instances) before host3's move lands. host3 sees host2
        # disabled once host2 holds the server, and hands it on to host1,
        # the one host left. Every server ends on host1.
        flavor = self.baremetal_flavor()
        # Two of host3's servers, the first one the ring over host1 and
        # host2 gives host2; one of host2's.
        host3 = self.host3_nodes()
        to_host2 = next(n for n in host3 if self.ring_host(n) == 'host2')
        other = next(n for n in host3 if n != to_host2)
        servers = [self.boot(flavor, host='host3', node=n)
                   for n in (to_host2, other)]
        servers.append(self.boot(flavor, host='host2'))
        real = takeover.move
        stopped: list[str] = []

        def move(inst: Any, host: str, *args: Any, **kwargs: Any) -> bool:
            if (host == 'host3' and kwargs.get('to') == 'host2' and
                    not stopped):
                stopped.append(inst.uuid)
                self.computes['host2'].stop()
            return real(inst, host, *args, **kwargs)

        with mock.patch.object(takeover, 'move', move):
            self.computes['host3'].stop()
        self.assertEqual(1, len(stopped))
        for host in ('host2', 'host3'):
            self.assertEqual('disabled', self.service(host)['status'])
        for server in servers:
            self.assertEqual('host1', self.instance_host(server['id']))
        self.assertIn('handing it on', self.stdlog.logger.output)
        # host1 manages every node, and each server through nova's API.
        self.period(('host1',))
        reported = set(self.computes['host1'].manager.driver
                       .get_available_nodes())
        self.assertEqual(set(self.node_uuids), reported)
        for server in servers:
            got = self._reboot_server(server, hard=True)
            self.assertEqual(('ACTIVE', 'host1'),
                             (got['status'], got['OS-EXT-SRV-ATTR:host']))
