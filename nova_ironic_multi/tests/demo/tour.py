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
"""The tour itself: one scripted run of a three-compute cell.

It runs inside nova's own functional-test cell (the same fixtures the
functional suite uses), so nothing but Python is needed: a real Ironic
process with fake-hardware nodes, nova's API, conductor, scheduler and
placement in-process, and three nova-compute services loading this driver.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import time
import types
from typing import Any

from nova.conf import CONF

from nova_ironic_multi.cmd import main as cli
from nova_ironic_multi.tests.demo import chart
from nova_ironic_multi.tests.functional import base

HOSTS = base.HOSTS


def say(text: str = '') -> None:
    # nova's fixtures may capture sys.stdout; the tour talks to the user.
    stream = sys.__stdout__ or sys.stdout
    stream.write(text + '\n')
    stream.flush()


class Tour(base.IronicCellTestCase):

    NODES = 12
    OTHER_GROUPS = {'rack-b': 6}
    output = 'nova-ironic-multi-demo.svg'

    def setUp(self) -> None:
        self.started = time.monotonic()
        say('[1/9] Starting a real Ironic (12 nodes in the default conductor '
            'group, 6 in "rack-b"), nova (API, conductor, scheduler, '
            'placement) and three nova-compute services with this driver...')
        super().setUp()
        self.events: list[str] = []
        self.stopped: set[str] = set()
        self.series: dict[str, list[int]] = {h: [] for h in HOSTS}
        say('      ready in %.1fs' % (time.monotonic() - self.started))

    def configure(self) -> None:
        # The cell starts on the default conductor group (""), as in a
        # nova.conf that says partition_key = "" and lists the three hosts;
        # a new fleet, so the balanced ring.
        self.reload(partition_key='""', peer_list=','.join(HOSTS),
                    ring_algorithm='balanced')

    def record(self, event: str) -> dict[str, set[str]]:
        """Chart what each running compute reports (a dead one: nothing)."""
        reported = {h: set() if h in self.stopped else
                    set(self.computes[h].manager.driver.get_available_nodes())
                    for h in HOSTS}
        self.events.append(event)
        for host in HOSTS:
            self.series[host].append(len(reported[host]))
        return reported

    def show(self) -> None:
        out = io.StringIO()
        cli.run(types.SimpleNamespace(name='ring', action='show',
                                      format='table'), out, out)
        for line in out.getvalue().rstrip().splitlines():
            say('      ' + line)

    def division_line(self, division: dict[str, set[str]]) -> str:
        return ', '.join('%s: %d' % (h, len(division.get(h, ())))
                         for h in HOSTS)

    def test_tour(self) -> None:
        self.record('start')
        say('[2/9] The division, as "nova-ironic-multi ring show" prints it:')
        self.show()

        say('[3/9] Booting three bare-metal servers through the nova API...')
        flavor = self.baremetal_flavor()
        servers = [self.boot(flavor, host=h) for h in HOSTS]
        for s in servers:
            say('      %s ACTIVE on node %s (host %s)' % (
                s['name'], s['OS-EXT-SRV-ATTR:hypervisor_hostname'],
                s['OS-EXT-SRV-ATTR:host']))
        self._run_periodics()
        self.record('3 servers')

        say('[4/9] host3 dies: its service is stopped and forced down; with '
            '[ironic_multi] takeover = manual (the default) only its free '
            'nodes move...')
        self.computes['host3'].stop()
        self.stopped.add('host3')
        svc3 = self.service('host3')['id']
        self.admin_api.put_service_force_down(svc3, True)
        t = time.monotonic()
        with self.cell() as cctxt:
            for host in ('host1', 'host2'):
                self.computes[host].manager.update_available_resource(cctxt)
        self.record('host3 down')
        say('      after one resource-tracker period (%.1fs) the survivors '
            'manage its free nodes; in nova its server\'s node stays with '
            'host3: %s' % (time.monotonic() - t,
                           self.division_line(self.db_division())))

        say('[5/9] "nova-ironic-multi takeover --from host3 --to host1 '
            '--execute" hands host3\'s server to host1:')
        out = io.StringIO()
        cli.run(types.SimpleNamespace(name='takeover', source='host3',
                                      dest='host1', execute=True,
                                      format='table'), out, out)
        for line in out.getvalue().rstrip().splitlines():
            say('      ' + line)
        self._run_periodics_of(('host1', 'host2'))
        self.record('takeover')

        say('[6/9] host3 comes back; the ring gives it its share again...')
        self.admin_api.put_service_force_down(svc3, False)
        self.computes['host3'] = self.restart_compute_service(
            self.computes['host3'], keep_hypervisor_state=False)
        self.stopped.discard('host3')
        self._run_periodics()
        self._run_periodics()
        division = self.record('host3 back')
        say('      %s' % self.division_line(division))

        self.fenced_takeover(servers)

        say('[8/9] The servers are deleted; then the operator moves the cell '
            'to conductor group rack-b: nova.conf gets [ironic_multi] '
            'partition_key = rack-b and the services get SIGHUP (in-process '
            'the three share one nova.conf and the same reload path)...')
        for s in servers:
            self._delete_server(s)
        self._run_periodics()
        self.reload(partition_key='rack-b', peer_list=','.join(HOSTS),
                    ring_algorithm='balanced', takeover='fenced')
        self._run_periodics()
        reported = self.reported()
        say('      now managing only the 6 rack-b nodes: %s; the default '
            'group\'s compute nodes are kept, not deleted (Ironic still has '
            'them)' % ', '.join('%s: %d' % (h, len(reported[h]))
                                for h in HOSTS))
        self.record('reload rack-b')
        say('      an invalid value (partition_key = "no spaces!") is '
            'rejected and the last good one kept:')
        self.reload(partition_key='no spaces!', peer_list=','.join(HOSTS),
                    ring_algorithm='balanced', takeover='fenced')
        for line in str(self.stdlog.logger.output).splitlines():
            if 'rejected the new value' in line:
                say('      ' + line.split('] ', 1)[-1])
                break
        self._run_periodics()
        self.record('invalid reload')

        say('[9/9] Summary')
        rows = self.assert_no_duplicates()
        say('      %d compute nodes, %d resource providers, no duplicates; '
            '3 servers built and deleted, one failover, one manual and one '
            'automatic takeover, three reloads'
            % (len(rows), len(self._get_all_providers())))
        with open(self.output, 'w') as f:
            f.write(chart.render('Ironic nodes managed per nova-compute',
                                 self.events, self.series))
        say('      picture of nodes per host over time: %s'
            % os.path.abspath(self.output))
        say('      the whole tour took %.0fs; cleaning up.'
            % (time.monotonic() - self.started))

    def fenced_takeover(self, servers: list[dict[str, Any]]) -> None:
        """host2 dies and is fenced: one period later a peer has its server.
        """
        say('[7/9] Automatic takeover: nova.conf gets [ironic_multi] '
            'takeover = fenced (SIGHUP); host2 dies and a monitor that '
            'powered it off fences it ("openstack compute service set '
            '--down host2 nova-compute")...')
        self.reload(partition_key='""', peer_list=','.join(HOSTS),
                    ring_algorithm='balanced', takeover='fenced')
        (server,) = [s for s in servers
                     if self.instance_host(s['id']) == 'host2']
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        self.computes['host2'].stop()
        self.stopped.add('host2')
        svc2 = self.service('host2')['id']
        self.admin_api.put_service_force_down(svc2, True)
        fenced = time.monotonic()
        self._run_periodics_of(('host1', 'host3'))
        new = self.instance_host(server['id'])
        assert new in ('host1', 'host3'), new
        assert node in self.db_division()[new], (node, new)
        self.record('host2 fenced')
        say('      one resource-tracker period later (%.1fs) %s\'s server '
            '%s is on %s, which logged:' % (time.monotonic() - fenced,
                                            'host2', server['name'], new))
        for line in str(self.stdlog.logger.output).splitlines():
            if 'Took over Ironic node %s' % node in line:
                say('      ' + line.split('] ', 1)[-1])
                break
        server = self._reboot_server(server, hard=True)
        assert server['OS-EXT-SRV-ATTR:host'] == new, server
        say('      and the user reboots it through the nova API: %s on %s, '
            'Ironic says %s' % (server['status'], new,
                                self.ironic.wait_idle(node).power_state))
        self.admin_api.put_service_force_down(svc2, False)
        self.computes['host2'] = self.restart_compute_service(
            self.computes['host2'], keep_hypervisor_state=False)
        self.stopped.discard('host2')
        self._run_periodics()
        self._run_periodics()
        division = self.record('host2 back')
        assert self.instance_host(server['id']) == new
        say('      host2 is restarted and unfenced: it takes free nodes '
            'only, the server stays on %s: %s'
            % (new, self.division_line(division)))

    def _run_periodics_of(self, hosts: tuple[str, ...]) -> None:
        with self.cell() as cctxt:
            for host in hosts:
                self.computes[host].manager.update_available_resource(cctxt)

    def reload(self, **options: str) -> None:
        """Write nova.conf's [ironic_multi] and re-read it as SIGHUP does.

        The first call loads the file (a service starting with it).
        """
        first = not hasattr(self, 'conf_path')
        if first:
            fd, self.conf_path = tempfile.mkstemp(suffix='.conf')
            os.close(fd)
            self.addCleanup(os.unlink, self.conf_path)
        with open(self.conf_path, 'w') as f:
            f.write('[ironic_multi]\n')
            for name, value in options.items():
                f.write('%s = %s\n' % (name, value))
        if first:
            CONF(args=[], project='nova',
                 default_config_files=[self.conf_path])
        else:
            CONF.mutate_config_files()


def run(output: str) -> int:
    import unittest
    Tour.output = output
    # nova's cell logs the shutdown of each of its thread pools at INFO
    # after the test's log capture has gone: not for the tour's reader.
    logging.getLogger('nova.thread_pool_factory').setLevel(logging.WARNING)
    result = unittest.TextTestRunner(stream=io.StringIO(),
                                     verbosity=0).run(Tour('test_tour'))
    for _, trace in result.errors + result.failures:
        say(trace)
    return 0 if result.wasSuccessful() else 1

