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

import time

from nova.conf import CONF

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
