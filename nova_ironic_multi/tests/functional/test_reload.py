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
"""Scenario f: partition options changed in the file and re-read.

What SIGHUP does in a real nova-compute (see the e2e tier): re-read the
files through oslo.config's mutate path. In-process, the three computes
share one configuration, which is also how they would see an operator's
change pushed to every host.
"""

from __future__ import annotations

import os
import tempfile

from nova.conf import CONF

from nova_ironic_multi.tests.functional import base

ALL = 'host1,host2,host3'


class ReloadTest(base.IronicCellTestCase):

    NODES = 6
    OTHER_GROUPS = {'rack-b': 6}

    def setUp(self) -> None:
        super().setUp()
        fd, self.path = tempfile.mkstemp(suffix='.conf')
        os.close(fd)
        self.addCleanup(os.unlink, self.path)
        self.write(peer_list=ALL)
        CONF(args=[], project='nova', default_config_files=[self.path])
        self.before = self.reported()

    def write(self, **options: str) -> None:
        with open(self.path, 'w') as f:
            f.write('[ironic_multi]\n')
            for name, value in options.items():
                f.write('%s = %s\n' % (name, value))

    def reload(self, **options: str) -> None:
        self.write(**options)
        CONF.mutate_config_files()

    def logs(self) -> str:
        return str(self.stdlog.logger.output)

    def test_partition_key_applies_by_the_next_period(self) -> None:
        # Before: every group's nodes are managed, the default group's too.
        self.assertEqual(
            set(self.node_uuids) | set(self.group_nodes['rack-b']),
            set().union(*self.before.values()))
        self.reload(peer_list=ALL, partition_key='rack-b')
        self.assertIn('Option ironic_multi.partition_key changed from '
                      '[None] to [rack-b]', self.logs())
        self._run_periodics()
        for compute in self.computes.values():
            snapshot = compute.manager.driver._inventory.cached()
            self.assertEqual('rack-b',
                             snapshot.partition.scope.conductor_group)
        reported = self.reported()
        # No host manages a node of the default group any more.
        self.assertEqual(set(), set().union(*reported.values()) &
                         set(self.node_uuids))
        self.assertEqual(set(self.group_nodes['rack-b']),
                         set().union(*reported.values()))
        self.assertEqual(6, sum(len(n) for n in reported.values()))
        self.assertIn("Partition changed from", self.logs())

    def test_a_host_left_out_of_peer_list_stops_claiming_free_nodes(
            self) -> None:
        self.assertTrue(self.before['host3'])
        self.reload(peer_list='host1,host2')
        reported = self.reported()
        # host3 is not in the new list: it leaves its own ring, as its peers
        # dropped it, and says why. (It had no instance to keep.)
        self.assertEqual(set(), reported['host3'])
        self.assertIn("This host (host3) claims no free Ironic node and "
                      "keeps only the nodes of its own instances: it is not "
                      "in [ironic_multi] peer_list (host1,host2)",
                      self.logs())
        # host1 and host2 now divide every node between the two of them,
        # and no node is claimed twice.
        self.assertEqual(set(self.node_uuids) |
                         set(self.group_nodes['rack-b']),
                         reported['host1'] | reported['host2'])
        self.assertFalse(reported['host1'] & reported['host2'])
        # Named again, it takes its share back.
        self.reload(peer_list=ALL)
        self.assertEqual(self.before, self.reported())

    def test_unreadable_value_is_rejected_and_the_last_good_kept(
            self) -> None:
        self.reload(peer_list=ALL, partition_key='not a group!')
        self.assertIn('Reload: rejected the new value of [ironic_multi] '
                      'partition_key', self.logs())
        self.assertIsNone(CONF.ironic_multi.partition_key)
        self.assertEqual(self.before, self.reported())
        # The next good value is taken, the pin is gone.
        self.reload(peer_list=ALL, partition_key='rack-b')
        self.assertEqual('rack-b', CONF.ironic_multi.partition_key)
        self.assertEqual(set(self.group_nodes['rack-b']),
                         set().union(*self.reported().values()))

    def test_a_reload_with_one_bad_option_applies_none_of_the_others(
            self) -> None:
        self.assertTrue(self.before['host3'])
        self.reload(peer_list=ALL)      # the last good values, from a file
        # Two good changes and a bad one: none applies.
        self.reload(peer_list='host1,host2', divide='shards',
                    partition_key='not a group!')
        self.assertIn('Reload not applied: [ironic_multi] partition_key '
                      'invalid, so [ironic_multi] peer_list, [ironic_multi] '
                      'divide stay as they were', self.logs())
        self.assertEqual(['host1', 'host2', 'host3'],
                         CONF.ironic_multi.peer_list)
        self.assertEqual('nodes', CONF.ironic_multi.divide)
        self.assertIsNone(CONF.ironic_multi.partition_key)
        self._run_periodics()
        self.assertEqual(self.before, self.reported())
        for compute in self.computes.values():
            self.assertFalse(compute.manager.driver._inventory.cached()
                             .partition.by_shard)
        # The bad option fixed, the good changes apply.
        self.reload(peer_list='host1,host2')
        self.assertEqual(['host1', 'host2'], CONF.ironic_multi.peer_list)
        reported = self.reported()
        self.assertEqual(set(), reported['host3'])
        self.assertEqual(set().union(*self.before.values()),
                         reported['host1'] | reported['host2'])

    def test_immutable_options_are_reported_as_ignored(self) -> None:
        self.reload(peer_list=ALL, ring_algorithm='balanced')
        self.assertIn('Ignoring change to immutable option '
                      'ironic_multi.ring_algorithm', self.logs())
        self.assertEqual('compatible', CONF.ironic_multi.ring_algorithm)
        self.assertEqual(self.before, self.reported())
