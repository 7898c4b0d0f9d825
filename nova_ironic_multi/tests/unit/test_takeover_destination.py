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
"""``takeover`` hands nodes only to a host that runs this driver (23.1).

The rule is servicegroup membership's: the host published this driver's
marker and has no compute node of another hypervisor type.
"""

from __future__ import annotations

from nova import objects

from nova_ironic_multi.cmd import takeover
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import test_membership


class TakeoverDestinationTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(service_down_time=24 * 3600)
        src = test_membership.make_service(self.ctxt, 'dead', marked=False)
        src.forced_down = True
        src.save()

    def service(self, host: str, hypervisor_type: str | None,
                marked: bool) -> objects.Service:
        svc = test_membership.make_service(
            self.ctxt, host, hypervisor_type=hypervisor_type, marked=False)
        if marked:
            self.markers.publish(host, svc.uuid)
        return svc

    def test_a_libvirt_destination_is_refused(self) -> None:
        self.service('libvirt1', 'QEMU', marked=False)
        exc = self.assertRaises(takeover.Refused, takeover.check,
                                self.ctxt, 'dead', 'libvirt1')
        self.assertIn('does not run this driver', str(exc))
        self.assertIn('has not published the marker', str(exc))

    def test_a_host_reinstalled_with_another_hypervisor_is_refused(
            self) -> None:
        self.service('again', 'QEMU', marked=True)
        exc = self.assertRaises(takeover.Refused, takeover.check,
                                self.ctxt, 'dead', 'again')
        self.assertIn('compute nodes of hypervisor type QEMU', str(exc))

    def test_an_ironic_host_with_or_without_nodes_is_accepted(self) -> None:
        self.service('empty', None, marked=True)
        self.service('busy', 'ironic', marked=True)
        for dest in ('empty', 'busy'):
            src, dst = takeover.check(self.ctxt, 'dead', dest)
            self.assertEqual(('dead', dest), (src.host, dst.host))
