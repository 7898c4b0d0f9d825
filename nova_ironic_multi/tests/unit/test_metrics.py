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
"""The metrics as Prometheus reads them: scraped over HTTP, parsed.

The metrics are one set per process, so each test compares values before
and after what it does.
"""

from __future__ import annotations

import datetime
import socket
import urllib.request

import fixtures
from ironicclient import exc as ir_exc
from keystoneauth1 import exceptions as ks_exc
from nova.compute import task_states
from nova.conf import CONF
from nova import exception
from nova import objects
from oslo_utils import timeutils
from prometheus_client import parser
import pytest

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi import metrics
from nova_ironic_multi.period import health
from nova_ironic_multi.service import exporter
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import test_ironic_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the endpoint serves: (name, labels) -> value."""
    with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port,
                                timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples}


def value(name: str, **labels: str) -> float:
    return base.metric(name.replace('nova_ironic_multi_', '', 1), **labels)


class PeriodMetricsTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.make_service('host1')
        self.make_service('host2')
        self.nodes = [self.ironic.add_node() for _ in range(8)]
        self.drivers = self.fleet_drivers(('host1', 'host2'))
        self.port = free_port()
        self.flags(metrics_port=self.port, group='ironic_multi')
        self.addCleanup(exporter.stop_all)
        self.assertEqual(('127.0.0.1', self.port), exporter.start(CONF))

    def test_a_period_is_scraped_as_it_divided(self) -> None:
        inst = self.make_instance(host='host1')
        drv = self.drivers['host1']
        managed = drv.get_available_nodes()
        node = managed[0]
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        periods = value('nova_ironic_multi_period_duration_seconds_count')
        drv._inventory.refresh()
        got = scrape(self.port)

        def sample(name: str, **labels: str) -> float:
            return got[('nova_ironic_multi_' + name,
                        tuple(sorted(labels.items())))]

        self.assertEqual(len(managed), sample('nodes', kind='managed'))
        self.assertEqual(1, sample('nodes', kind='with_instance'))
        self.assertEqual(len(managed) - 1, sample('nodes', kind='free'))
        self.assertEqual(0, sample('nodes', kind='orphaned'))
        # Its share: the ring's nodes for host1 (all free or its own here).
        self.assertEqual(len(managed), sample('nodes', kind='share'))
        self.assertEqual(2, sample('peers'))
        self.assertEqual(1, sample('member'))
        self.assertEqual(0, sample('not_ready'))
        digest = health.member_hash(frozenset({'host1', 'host2'}))
        self.assertEqual(1, sample('member_view_info', digest=digest,
                                   scope='all nodes'))
        self.assertEqual(
            [digest], [dict(labels)['digest'] for name, labels in got
                       if name == 'nova_ironic_multi_member_view_info'])
        self.assertEqual(periods + 1,
                         sample('period_duration_seconds_count'))
        self.assertGreater(sample('listing_duration_seconds_count'), 0)
        self.assertEqual(60, sample('period_interval_seconds'))
        # No node UUID or instance UUID is ever a label.
        for _name, labels in got:
            for _key, label in labels:
                self.assertNotIn(label, set(self.nodes) | {inst.uuid})

    def test_instances_holding_a_task_state_are_counted_and_aged(
            self) -> None:
        drv = self.drivers['host1']
        stuck = self.make_instance(host='host1',
                                   task_state=task_states.REBOOTING_HARD)
        other = self.make_instance(host='host1',
                                   task_state=task_states.POWERING_OFF)
        self.make_instance(host='host1')
        self.make_instance(host='host2', task_state=task_states.REBOOTING)
        self.make_instance(host='host1',
                           task_state=task_states.DELETING).destroy()
        # Two hours after they were written.
        later = timeutils.utcnow() + datetime.timedelta(hours=2)
        self.useFixture(fixtures.MockPatch('oslo_utils.timeutils.utcnow',
                                           return_value=later))
        drv._inventory.refresh()
        got = scrape(self.port)
        states_shown = {dict(labels)['task_state']: v
                        for (name, labels), v in got.items()
                        if name == 'nova_ironic_multi_instances_in_task_state'
                        and v}
        # Its own, not deleted: host2's and the deleted one are not.
        self.assertEqual({'rebooting_hard': 1, 'powering-off': 1},
                         states_shown)
        oldest = got[('nova_ironic_multi_task_state_oldest_seconds', ())]
        self.assertGreaterEqual(oldest, 7200)
        self.assertLess(oldest, 7200 + 60)
        # Cleared: its series goes to 0, not away with its last count.
        stuck.task_state = None
        stuck.save()
        drv._inventory.refresh()
        self.assertEqual(0, value(
            'nova_ironic_multi_instances_in_task_state',
            task_state='rebooting_hard'))
        self.assertEqual(1, value(
            'nova_ironic_multi_instances_in_task_state',
            task_state='powering-off'))
        # None left: nothing is old.
        other.task_state = None
        other.save()
        drv._inventory.refresh()
        self.assertEqual(0, value(
            'nova_ironic_multi_task_state_oldest_seconds'))

    def test_not_ready_periods_are_counted_by_reason(self) -> None:
        drv = self.drivers['host1']
        drv.get_available_nodes()
        before = value('nova_ironic_multi_not_ready_periods_total',
                       reason='ironic')
        self.ironic.fail('list_nodes', ironic.IronicUnavailable('refused'))
        self.assertRaises(exception.VirtDriverNotReady,
                          drv.get_available_nodes)
        got = scrape(self.port)
        self.assertEqual(before + 1, got[(
            'nova_ironic_multi_not_ready_periods_total',
            (('reason', 'ironic'),))])
        self.assertEqual(1, got[('nova_ironic_multi_not_ready', ())])
        drv.get_available_nodes()
        self.assertEqual(0, value('nova_ironic_multi_not_ready'))

    def test_a_node_torn_down_for_the_reaper_counts_an_orphan(self) -> None:
        drv = self.drivers['host1']
        live, gone = drv.get_available_nodes()[:2]
        reaped = value('nova_ironic_multi_orphans_reaped_total')
        for node, deleted in ((live, False), (gone, True)):
            inst = self.make_instance(host='host1')
            self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                           provision_state=states.ACTIVE)
            if deleted:
                # As nova's reaper passes it: read with the deleted rows.
                inst.destroy()
                inst = objects.Instance.get_by_uuid(
                    self.ctxt.elevated(read_deleted='yes'), inst.uuid)
            drv.destroy(self.ctxt, inst, None)
            self.assertEqual(
                reaped + (1 if deleted else 0),
                value('nova_ironic_multi_orphans_reaped_total'))


def test_a_port_in_use_is_logged_and_the_service_runs_on(
        caplog: pytest.LogCaptureFixture) -> None:
    conf = CONF
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf.set_override('metrics_port', port, group='ironic_multi')
        try:
            assert exporter.start(conf) is None
        finally:
            conf.clear_override('metrics_port', group='ironic_multi')
    assert ('Cannot serve the metrics on 127.0.0.1 port %d ([ironic_multi] '
            'metrics_host, metrics_port)' % port) in caplog.text
    assert exporter.start(conf) is None     # unset: nothing served


@pytest.mark.parametrize('error, outcome', [
    (None, 'ok'),
    (ir_exc.NotFound('no such node'), 'refused'),
    (ir_exc.InternalServerError('boom'), 'refused'),
    (test_ironic_client.NO_FREE_WORKER, 'transient'),
    (ir_exc.ConnectionRefused('refused'), 'transient'),
    (ks_exc.ConnectFailure('Connection aborted'), 'lost'),
])
def test_ironic_requests_are_counted_by_outcome(error: Exception | None,
                                                outcome: str) -> None:
    client, fake, _sleeps = test_ironic_client.fake_client(api_max_retries=0)
    fake.node.inject_nmi.side_effect = error
    name = 'nova_ironic_multi_ironic_requests_total'
    before = {o: value(name, outcome=o) for o in metrics.OUTCOMES}
    try:
        client.inject_nmi('node')
    except ironic.IronicError:
        assert error is not None
    after = {o: value(name, outcome=o) for o in metrics.OUTCOMES}
    assert {o: after[o] - before[o] for o in metrics.OUTCOMES} == {
        o: (1 if o == outcome else 0) for o in metrics.OUTCOMES}
