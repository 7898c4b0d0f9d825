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
"""The membership plugin contract, as the driver runs it (issue 22.3).

A third-party plugin, installed through its own entry point, sees
``start()`` once at ``init_host`` before any question, ``listed()`` every
period before the peers are asked, and ``stop()`` at ``cleanup_host``.
"""

from __future__ import annotations

import pathlib
import sys
import textwrap

import fixtures
from nova import exception
from nova.virt import virtapi
from stevedore import extension

from nova_ironic_multi import driver
from nova_ironic_multi import ironic
from nova_ironic_multi import loader
from nova_ironic_multi.tests.unit import base

PLUGIN = '''
from nova_ironic_multi.membership import base

CALLS = []


class Recorder(base.Membership):
    name = 'recorder'

    def start(self):
        CALLS.append(('start', self.host))

    def stop(self):
        CALLS.append(('stop', self.host))

    def listed(self, ok):
        CALLS.append(('listed', ok))

    def observe(self, part):
        CALLS.append(('observe', self.host))
        return frozenset([self.host.lower()])

    def own_exclusion(self):
        return None


class Refuser(Recorder):
    name = 'refuser'

    def start(self):
        raise base.MembershipMisconfigured(
            '[refuser] url is not set. Fix: set it.')
'''


class PluginContractTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        tmp = pathlib.Path(self.useFixture(fixtures.TempDir()).path)
        (tmp / 'nim_recorder_plugin.py').write_text(textwrap.dedent(PLUGIN))
        dist = tmp / 'nim_recorder-1.0.dist-info'
        dist.mkdir()
        (dist / 'METADATA').write_text(
            'Metadata-Version: 2.1\nName: nim-recorder\nVersion: 1.0\n')
        (dist / 'entry_points.txt').write_text(
            '[nova_ironic_multi.membership]\n'
            'recorder = nim_recorder_plugin:Recorder\n'
            'refuser = nim_recorder_plugin:Refuser\n')
        sys.path.insert(0, str(tmp))
        self.addCleanup(sys.path.remove, str(tmp))
        self.addCleanup(sys.modules.pop, 'nim_recorder_plugin', None)
        # stevedore keeps each namespace's entry points for the process.
        cache = extension.ExtensionManager.ENTRY_POINT_CACHE
        cache.pop(loader.MEMBERSHIP_NAMESPACE, None)
        self.addCleanup(cache.pop, loader.MEMBERSHIP_NAMESPACE, None)
        import nim_recorder_plugin  # type: ignore[import-not-found]
        self.calls = nim_recorder_plugin.CALLS

    def test_start_listed_and_stop_at_the_documented_moments(self) -> None:
        self.flags(membership_driver='recorder', group='ironic_multi')
        node = self.ironic.add_node()
        drv = driver.IronicDriver(virtapi.VirtAPI())
        drv.init_host('host1')
        self.assertEqual([('start', 'host1')], self.calls)
        self.assertEqual([node], drv.get_available_nodes())
        self.assertEqual([('start', 'host1'), ('listed', True),
                          ('observe', 'host1')], self.calls)
        del self.calls[:]
        self.ironic.fail('list_nodes', ironic.IronicUnavailable('down'))
        self.assertRaises(exception.VirtDriverNotReady,
                          drv.get_available_nodes)
        self.assertEqual([('listed', False)], self.calls)
        del self.calls[:]
        drv.cleanup_host('host1')
        self.assertEqual([('stop', 'host1')], self.calls)

    def test_a_plugin_that_cannot_start_stops_nova_compute(self) -> None:
        self.flags(membership_driver='refuser', group='ironic_multi')
        drv = driver.IronicDriver(virtapi.VirtAPI())
        with self.assertLogs('nova_ironic_multi.service.startup', 'ERROR'):
            exc = self.assertRaises(exception.InvalidConfiguration,
                                    drv.init_host, 'host1')
        self.assertIn('[refuser] url is not set. Fix: set it.', str(exc))
