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
"""``nova-ironic-multi health``: what the periods write, what the probe says.

The periods are the driver's, over the fake Ironic; the probe is the
installed command, run as a container's probe runs it.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

from nova.conf import CONF
from nova import exception
from nova import objects

from nova_ironic_multi.cmd import health as probe
from nova_ironic_multi import ironic
from nova_ironic_multi.period import health
from nova_ironic_multi.tests.unit import base

COMMAND = os.path.join(os.path.dirname(sys.executable), 'nova-ironic-multi')


class HealthTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.make_service('host1')
        self.make_service('host2')
        self.nodes = [self.ironic.add_node() for _ in range(6)]
        self.drivers = self.fleet_drivers(('host1', 'host2'))
        self.where = CONF.ironic_multi.state_file

    def verdict(self, now: float | None = None,
                stale_after: float | None = None) -> probe.Verdict:
        return probe.judge(self.where, time.time() if now is None else now,
                           stale_after)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
        return subprocess.run([COMMAND, 'health'] + list(args),
                              capture_output=True, text=True, timeout=120,
                              env=env)

    def test_a_period_that_divides_is_healthy(self) -> None:
        managed = self.drivers['host1'].get_available_nodes()
        verdict = self.verdict()
        self.assertEqual(probe.HEALTHY, verdict.code, verdict.reason)
        self.assertIn('host1 manages %d Ironic nodes; 2 peers'
                      % len(managed), verdict.reason)
        state = health.read(self.where)
        self.assertEqual(['host1', 'host2'], state.members)
        self.assertEqual('nodes', state.settings['divide'])
        # The member view is the same digest on every host that agrees.
        self.drivers['host2'].get_available_nodes()
        self.assertEqual(state.member_hash,
                         health.read(self.where).member_hash)
        # The installed command, as a probe runs it.
        result = self.cli('--state-file', self.where)
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertTrue(result.stdout.startswith('healthy: host2 manages'),
                        result.stdout)

    def test_not_ready_periods_are_degraded_then_healthy_again(
            self) -> None:
        drv = self.drivers['host1']
        drv.get_available_nodes()
        self.ironic.fail('list_nodes', ironic.IronicUnavailable('refused'),
                         times=2)
        for _ in range(2):
            self.assertRaises(exception.VirtDriverNotReady,
                              drv.get_available_nodes)
        verdict = self.verdict()
        self.assertEqual(probe.DEGRADED, verdict.code)
        self.assertIn('NotReady for 2 period(s)', verdict.reason)
        self.assertIn('cannot list Ironic nodes: refused', verdict.reason)
        result = self.cli('--state-file', self.where, '--format', 'json')
        self.assertEqual(1, result.returncode, result.stderr)
        data = json.loads(result.stdout)
        self.assertEqual(('degraded', 2),
                         (data['status'], data['state']['not_ready_periods']))
        drv.get_available_nodes()
        self.assertEqual(probe.HEALTHY, self.verdict().code)
        self.assertIsNone(health.read(self.where).not_ready)

    def test_a_file_not_rewritten_is_broken(self) -> None:
        self.drivers['host1'].get_available_nodes()
        written = health.read(self.where).written_at
        # Periods every 60 s: stale after 5 of them (300 s).
        self.assertEqual(probe.HEALTHY, self.verdict(written + 299).code)
        verdict = self.verdict(written + 301)
        self.assertEqual(probe.BROKEN, verdict.code)
        self.assertIn('ended 301 s ago, more than 300 s (periods every 60 '
                      's): it is hung, stopped, or still starting',
                      verdict.reason)
        self.assertEqual(probe.BROKEN,
                         self.verdict(written + 31, stale_after=30).code)

    def test_no_or_bad_state_file_is_broken(self) -> None:
        verdict = self.verdict()
        self.assertEqual(probe.BROKEN, verdict.code)
        self.assertIn('no state file at %s' % self.where, verdict.reason)
        pathlib.Path(self.where).write_text('{"version": 1, "host": ')
        verdict = self.verdict()
        self.assertEqual(probe.BROKEN, verdict.code)
        self.assertIn('cannot read the state file', verdict.reason)
        self.flags(state_file='', group='ironic_multi')
        out = io.StringIO()
        self.assertEqual(probe.BROKEN,
                         probe.run(CONF, None, None, out, 'table'))
        self.assertIn('[ironic_multi] state_file is empty', out.getvalue())
        result = self.cli('--state-file', self.where + '.missing')
        self.assertEqual(2, result.returncode, result.stderr)
        self.assertIn('broken: no state file at', result.stdout)

    def test_a_host_outside_its_peers_is_degraded(self) -> None:
        # Disabled (as a drain or an operator does): no longer a member.
        svc = objects.Service.get_by_compute_host(self.ctxt, 'host1')
        svc.disabled = True
        svc.save()
        self.drivers['host1'].get_available_nodes()
        verdict = self.verdict()
        self.assertEqual(probe.DEGRADED, verdict.code, verdict.reason)
        self.assertIn('host1 is not among the peers it sees (host2)',
                      verdict.reason)

    def test_a_state_file_that_cannot_be_written_never_fails_a_period(
            self) -> None:
        blocker = pathlib.Path(self.where).parent / 'a-file'
        blocker.write_text('')
        self.flags(state_file=str(blocker / 'state.json'),
                   group='ironic_multi')
        drv = self.drivers['host1']
        with self.assertLogs('nova_ironic_multi.period.health',
                             'WARNING') as logs:
            self.assertTrue(drv.get_available_nodes())
            drv._inventory.refresh()
        # Once, not every period (this thread's: another driver's period
        # may run meanwhile and say it once too).
        said = [r.getMessage() for r in logs.records
                if r.thread == threading.get_ident()]
        self.assertEqual(1, len(said), logs.output)
        self.assertIn('Cannot write the state file %s/state.json '
                      '([ironic_multi] state_file)' % blocker, said[0])
        # Fixed (the option is mutable): written at the next period.
        self.flags(state_file=self.where, group='ironic_multi')
        drv._inventory.refresh()
        self.assertEqual(probe.HEALTHY, self.verdict().code)
