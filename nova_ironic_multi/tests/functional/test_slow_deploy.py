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
"""A deploy slower than a bound: the defaults wait, a bound fails it.

The real Ironic's fake deploy interface sleeps ``[fake] deploy_delay``
seconds in each of its steps (prepare, deploy), so a deploy takes a few
seconds while Ironic is working on it. A ``deploy_timeout`` shorter than
that stands for the old default bound (3600 s) against a deploy of hours
(long RAID, firmware or image steps): the bound fails a deploy Ironic
completes; the default (no bound) does not.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from typing import Any

from nova.conf import CONF
from nova import exception
from nova.tests.unit import fake_instance
from oslo_utils import uuidutils

from nova_ironic_multi.actions import stalls
from nova_ironic_multi.tests.functional import base

#: Seconds each step of Ironic's fake deploy interface sleeps.
STEP = 3


class SlowDeployTest(base.IronicCellTestCase):

    NODES = 3
    IRONIC_CONF = '[fake]\ndeploy_delay = %d\n' % STEP

    def configure(self) -> None:
        # One attempt: a failed build is not rescheduled onto another node.
        self.flags(max_attempts=1, group='scheduler')

    def test_by_default_a_slow_deploy_is_waited_for(self) -> None:
        self.assertEqual(0, CONF.ironic_multi.deploy_timeout)
        flavor = self.baremetal_flavor()
        started = time.monotonic()
        server = self.boot(flavor)
        took = time.monotonic() - started
        node = self.ironic.node(server['OS-EXT-SRV-ATTR:hypervisor_hostname'])
        self.assertEqual('active', node.provision_state)
        self.assertEqual(server['id'], node.instance_uuid)
        # Ironic's prepare and deploy steps each slept: far longer than
        # the bound the next test sets.
        self.assertGreater(took, 2 * STEP)

    def test_a_bound_shorter_than_the_deploy_fails_it(self) -> None:
        self.flags(deploy_timeout=1, group='ironic_multi')
        flavor = self.baremetal_flavor()
        server = self.boot(flavor, wait='ERROR')
        fault = server['fault']['message']
        self.assertIn('did not finish within 1 seconds', fault)
        # The deploy Ironic was completing was torn down instead.
        deployed = [n for n in self.node_uuids
                    if self.ironic.node(n).instance_uuid == server['id']]
        self.assertEqual([], deployed)


class UnservedDeployTest(base.IronicCellTestCase):
    """A node left deploying when no conductor of its group is alive.

    The all-in-one Ironic of the cell runs the conductor of group '' only:
    to Ironic's API a node of group rack-b is served by no conductor, as
    when the only conductor of a group dies after accepting a deploy (seen
    in the long soak). Ironic accepts no undeploy from ``deploying``, and
    nothing moves the node on until a conductor of its group is back.
    """

    NODES = 3
    OTHER_GROUPS = {'rack-b': 1}

    def left_deploying(self, node: str) -> Any:
        """An instance on ``node``, left ``deploying`` with no lock held."""
        instance = fake_instance.fake_instance_obj(
            self.ctxt, uuid=uuidutils.generate_uuid(), node=node)
        with contextlib.closing(
                sqlite3.connect(self.ironic.process.db_path)) as conn:
            conn.execute(
                "UPDATE nodes SET provision_state = 'deploying', "
                "target_provision_state = 'active', instance_uuid = ?, "
                "reservation = NULL WHERE uuid = ?", (instance.uuid, node))
            conn.commit()
        return instance

    def test_its_destroy_is_refused_at_once_saying_why(self) -> None:
        # Without the check, the destroy would wait this long, then fail
        # saying something else; nova's clean-up would then wait again.
        self.flags(unprovision_timeout=120, group='ironic_multi')
        node = self.group_nodes['rack-b'][0]
        instance = self.left_deploying(node)
        driver = self.computes['host1'].manager.driver
        # What the real Ironic says of a served and an unserved node.
        self.assertFalse(driver._ironic.get_node(self.node_uuids[0]).unserved)
        self.assertTrue(driver._ironic.get_node(node).unserved)
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                driver.destroy, self.ctxt, instance, None)
        self.assertIn("Ironic node %s is deploying and no live Ironic "
                      "conductor of its conductor group 'rack-b' serves it"
                      % node, str(exc))
        # Nothing was asked of Ironic: the node is as it was.
        seen = self.ironic.node(node)
        self.assertEqual(('deploying', instance.uuid),
                         (seen.provision_state, seen.instance_uuid))

    def test_one_no_conductor_works_on_is_refused_after_the_grace(
            self) -> None:
        # Served by the live conductor of group '', which cleared the lock
        # (as a conductor taking over a dead one's nodes does) but never
        # moves the node on.
        self.flags(unprovision_timeout=120, group='ironic_multi')
        node = self.node_uuids[2]
        instance = self.left_deploying(node)
        driver = self.computes['host1'].manager.driver
        driver._provision._stalls = stalls.Stalls(grace=2)
        self.assertTrue(driver._ironic.get_node(node).unlocked)
        self.assertFalse(driver._ironic.get_node(node).unserved)
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                driver.destroy, self.ctxt, instance, None)
        self.assertIn('Ironic node %s is deploying and no Ironic conductor '
                      'has held its lock for' % node, str(exc))
        seen = self.ironic.node(node)
        self.assertEqual(('deploying', instance.uuid),
                         (seen.provision_state, seen.instance_uuid))
