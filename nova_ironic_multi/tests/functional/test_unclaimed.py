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
"""A build request lost on its way to nova-compute (:mod:`unclaimed`).

The scheduler allocated a node; the request to build never reaches a
compute (here the conductor's cast is dropped, as by a broker that lost
it, or a compute that stopped just as it came). With ``[DEFAULT]
instance_build_timeout`` set, the host that manages the node puts the
server in ERROR once that time has passed, with a fault that says why,
and the user can delete it; with nova's default (0) it stays BUILD, as
nova leaves it.
"""

from __future__ import annotations

import time
from typing import Any

import fixtures
from nova.compute import manager as compute_manager
from nova.compute import rpcapi as compute_rpcapi
from nova.conf import CONF
from nova import objects

from nova_ironic_multi.tests.functional import base

TIMEOUT = 2


def cut_short(test: base.IronicCellTestCase, owner: type,
              method: str) -> list[str]:
    """Make ``owner.method`` do nothing; returns the instances it got."""
    got: list[str] = []

    def nothing(self: Any, context: Any, instance: Any,
                *args: Any, **kwargs: Any) -> None:
        got.append(instance.uuid)

    test.useFixture(fixtures.MockPatchObject(owner, method, nothing))
    return got


def never_deployed_then_deleted(test: Any, server: dict[str, Any],
                                node: str) -> None:
    """Ironic never saw the build; the user deletes the server, and its
    allocation goes with it.
    """
    test.assertIsNone(test.ironic.client.node.get(
        node, fields=['instance_uuid']).instance_uuid)
    test.api.delete_server(server['id'])
    test._wait_until_deleted(server)
    test.assertEqual({}, test._get_allocations_by_server_uuid(server['id']))


class UnclaimedBuildTest(base.IronicCellTestCase):

    NODES = 6

    def configure(self) -> None:
        # The conductor's cast never reaches a compute.
        self.lost = cut_short(self, compute_rpcapi.ComputeAPI,
                              'build_and_run_instance')

    def _lose_a_build(self) -> tuple[dict[str, Any], str]:
        """Boot; returns the server and the node its allocation is on."""
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, wait=None)
        self._wait_for_server_parameter(
            server, {'status': 'BUILD', 'OS-EXT-STS:task_state':
                     'scheduling'})
        for _ in range(200):
            if server['id'] in self.lost:
                break
            time.sleep(0.05)
        self.assertIn(server['id'], self.lost)
        allocations = self._get_allocations_by_server_uuid(server['id'])
        (node,) = allocations
        return server, node

    def test_a_lost_build_ends_in_error_with_its_cause(self) -> None:
        # Before the bound, a build may still be on its way: the bound is
        # far off until that is checked (a 2 s bound passed before the
        # check on a loaded machine), then the short one applies.
        self.flags(instance_build_timeout=3600)
        server, node = self._lose_a_build()
        owner = [h for h, nodes in self.reported().items() if node in nodes]
        self.assertEqual(1, len(owner), owner)

        self._run_periodics()
        self.assertEqual('BUILD', self.api.get_server(server['id'])['status'])

        self.flags(instance_build_timeout=TIMEOUT)
        time.sleep(TIMEOUT + 1)
        self._run_periodics()
        got = self._wait_for_server_parameter(
            server, {'status': 'ERROR', 'OS-EXT-STS:task_state': None})
        self.assertIn('Its build never started', got['fault']['message'])
        self.assertIn('instance_build_timeout (%d s)' % TIMEOUT,
                      got['fault']['message'])
        with self.cell() as cctxt:
            faults = objects.InstanceFaultList.get_by_instance_uuids(
                cctxt, [server['id']])
        # Recorded once, by the node's owner.
        self.assertEqual(owner, [f.host for f in faults])
        self.assertIsNone(got['OS-EXT-SRV-ATTR:host'])
        never_deployed_then_deleted(self, server, node)
        self.assertEqual(self.NODES, len(self.assert_no_duplicates()))

    def test_without_a_build_timeout_it_stays_as_nova_leaves_it(
            self) -> None:
        server, _ = self._lose_a_build()
        time.sleep(TIMEOUT + 1)
        self._run_periodics()
        got = self.api.get_server(server['id'])
        self.assertEqual(('BUILD', 'scheduling'),
                         (got['status'], got['OS-EXT-STS:task_state']))


class HeldBuildTest(base.IronicCellTestCase):
    """A build a compute holds is not unclaimed, however long it waits.

    With ``max_concurrent_builds = 1``, host1's second build waits behind
    its first, whose deploy takes Ironic several seconds: longer than the
    bound. It looks unclaimed (building, no host) the whole time; host1's
    manager holds it, so host1's sweep leaves it alone, and it builds with
    no fault once the first is done.
    """

    # host1 manages at least two of them.
    NODES = 9
    #: Seconds each step of Ironic's fake deploy interface sleeps.
    IRONIC_CONF = '[fake]\ndeploy_delay = 3\n'

    def configure(self) -> None:
        # Before the computes start: nova sizes their build slots then (in
        # threading mode one pool for builds and snapshots, the larger of
        # the two limits).
        self.flags(max_concurrent_builds=1, max_concurrent_snapshots=1)

    def period(self) -> None:
        """One resource-tracker period of host1 (the sweep's).

        No other of nova's periodic tasks: its own build bound would error
        the first build, whose deploy is slow on purpose.
        """
        with self.cell() as cctxt:
            self.computes['host1'].manager.update_available_resource(cctxt)

    def test_a_build_waiting_for_a_build_slot_is_not_swept(self) -> None:
        self.assertEqual(1, CONF.max_concurrent_builds)
        self.assertGreaterEqual(len(self.reported()['host1']), 2)
        self.flags(instance_build_timeout=TIMEOUT)
        flavor = self.baremetal_flavor()
        first = self.boot(flavor, host='host1', wait=None)
        self._wait_for_server_parameter(
            first, {'OS-EXT-SRV-ATTR:host': 'host1'})
        waiting = self.boot(flavor, host='host1', wait=None)
        time.sleep(TIMEOUT + 1)
        # Still waiting for the slot: building, no host, overdue.
        got = self.api.get_server(waiting['id'])
        self.assertEqual(('BUILD', 'scheduling', None),
                         (got['status'], got['OS-EXT-STS:task_state'],
                          got['OS-EXT-SRV-ATTR:host']))
        self.period()
        got = self.api.get_server(waiting['id'])
        self.assertEqual('BUILD', got['status'])
        self.assertNotIn('fault', got)
        for server in (first, waiting):
            done = self._wait_for_state_change(server, 'ACTIVE')
            self.assertNotIn('fault', done)
            self.assertEqual('host1', done['OS-EXT-SRV-ATTR:host'])
        self.assertNotIn('Its build never started',
                         self.stdlog.logger.output)


class InterruptedBuildTest(base.IronicCellTestCase):
    """A build its compute took and never claimed a node for.

    nova's manager clears the task state as it starts a build and sets the
    host when it claims the node; a compute that stops in between (found
    by the chaos soak: a SIGTERM whose graceful stop ended first) leaves
    the server BUILD, no task state, no host. Here the manager's build
    ends right after the start, as that process did.
    """

    NODES = 6

    def configure(self) -> None:
        # The build started (task state cleared), never claims its node.
        self.cut = cut_short(self, compute_manager.ComputeManager,
                             '_build_and_run_instance')

    def test_a_build_cut_before_its_claim_ends_in_error(self) -> None:
        self.flags(instance_build_timeout=3600)
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, wait=None)
        for _ in range(200):
            if server['id'] in self.cut:
                break
            time.sleep(0.05)
        self.assertIn(server['id'], self.cut)
        got = self._wait_for_server_parameter(
            server, {'status': 'BUILD', 'OS-EXT-STS:task_state': None})
        self.assertIsNone(got['OS-EXT-SRV-ATTR:host'])
        (node,) = self._get_allocations_by_server_uuid(server['id'])

        self.flags(instance_build_timeout=TIMEOUT)
        time.sleep(TIMEOUT + 1)
        self._run_periodics()
        got = self._wait_for_server_parameter(
            server, {'status': 'ERROR', 'OS-EXT-STS:task_state': None})
        self.assertIn('or its compute stopped before it claimed one',
                      got['fault']['message'])
        never_deployed_then_deleted(self, server, node)
