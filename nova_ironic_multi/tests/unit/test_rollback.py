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
"""Going back to nova's in-tree driver: the preconditions the guide gives.

"Going back to nova's in-tree driver" (operations guide) names what a
host's configuration needs before it restarts with ``ironic.IronicDriver``.
These tests hold the guide's claims against nova's own driver code, the
running release's.
"""

from __future__ import annotations

from nova import exception
from nova import test
from nova.virt.ironic import driver as in_tree


class InTreePeerListTest(test.NoDBTestCase):

    def test_a_peer_list_without_this_host_stops_the_in_tree_driver(
            self) -> None:
        # The guide: "Without this host in it, nova's driver refuses to
        # start (FATAL: Peer list does not contain this compute service
        # hostname)."
        self.flags(host='host3')
        self.flags(conductor_group='g1', peer_list=['host1', 'host2'],
                   group='ironic')
        with self.assertLogs('nova.virt.ironic.driver', 'ERROR') as logs:
            self.assertRaises(exception.InvalidPeerList,
                              in_tree._check_peer_list)
        self.assertIn('FATAL: Peer list does not contain this compute '
                      'service hostname (host3)', logs.output[0])

    def test_the_list_with_this_host_is_accepted(self) -> None:
        self.flags(host='host3')
        self.flags(conductor_group='g1',
                   peer_list=['host1', 'host2', 'host3'], group='ironic')
        in_tree._check_peer_list()

    def test_without_a_conductor_group_the_list_is_ignored(self) -> None:
        # "Without a conductor group ... nova's driver ignores the list".
        self.flags(host='host3')
        self.flags(conductor_group=None, peer_list=['host1'], group='ironic')
        in_tree._check_peer_list()
