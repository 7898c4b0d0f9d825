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
"""``nova-ironic-multi upgrade check``: every check's every outcome.

nova's test database and this driver's hosts as they run (each period
publishes its settings: in memory here, in placement in the functional
test); Ironic is the fake one.
"""

from __future__ import annotations

import io
import json
import logging
import pathlib
import types
from typing import Any
from unittest import mock

import fixtures
from ironicclient import exc as ir_exc
from nova.conf import CONF
from nova import context as nova_context
from nova import objects

from nova_ironic_multi.cmd import main as cli
from nova_ironic_multi.cmd import settings_check
from nova_ironic_multi.cmd import upgrade
from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import published
from nova_ironic_multi.tests.unit import base
from nova_ironic_multi.tests.unit import test_nova_options

OK, WARNING, FAILURE = 0, 1, 2


class UpgradeCheckTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(service_down_time=24 * 3600)
        self.flags(compute_driver=upgrade.DRIVER)
        # Set by the test base; not what an operator's files say.
        for name in ('api_max_retries', 'api_retry_interval',
                     'serial_console_state_timeout'):
            CONF.clear_override(name, group='ironic')
        self.nodes = [self.ironic.add_node() for _ in range(6)]

    def divide(self, *hosts: str) -> None:
        """A period of each of these hosts (the three start first)."""
        if not hasattr(self, 'drivers'):
            for host in ('host1', 'host2', 'host3'):
                self.make_service(host)
            self.drivers = self.fleet_drivers(('host1', 'host2', 'host3'))
        for host in hosts:
            self.drivers[host].get_available_nodes()

    def check(self) -> tuple[int, dict[str, tuple[int, str]]]:
        out = io.StringIO()
        code = upgrade.run(CONF, out, 'json')
        data = json.loads(out.getvalue())
        return code, {c['check']: (c['result'], c['details'] or '')
                      for c in data['checks']}

    def test_hosts_that_divide_alike_pass_every_check(self) -> None:
        self.divide('host1', 'host2', 'host3')
        code, results = self.check()
        self.assertEqual({name: OK for name in results},
                         {name: r[0] for name, r in results.items()},
                         results)
        self.assertEqual(OK, code)
        self.assertEqual('all nodes: host1, host2, host3',
                         results['Same settings in each scope'][1])
        self.assertIn('lists the 6 node(s) of all nodes',
                      results['Ironic policy'][1])
        # The table nova-status prints, with the same verdicts.
        out = io.StringIO()
        self.assertEqual(OK, upgrade.run(CONF, out))
        self.assertIn('Check: Same settings in each scope', out.getvalue())
        self.assertIn('Result: Success', out.getvalue())

    def test_hosts_with_different_rings_fail_naming_them(self) -> None:
        self.divide('host1')
        self.flags(ring_algorithm='balanced', group='ironic_multi')
        self.divide('host2', 'host3')
        self.flags(ring_algorithm='compatible', group='ironic_multi')
        code, results = self.check()
        self.assertEqual(FAILURE, code)
        verdict, details = results['Same settings in each scope']
        self.assertEqual(FAILURE, verdict)
        self.assertIn('all nodes is divided by hosts that disagree on '
                      '[ironic_multi] ring_algorithm/hash_partition_exponent: '
                      'compatible/2^5 on host1; balanced/2^5 on host2, host3',
                      details)
        # These files (compatible) side with host1; the check says whom
        # they differ from.
        self.assertEqual(
            (WARNING, '[ironic_multi] ring_algorithm/hash_partition_exponent '
             "is compatible/2^5 in this command's files and balanced/2^5 on "
             'host2, host3, which divide all nodes. Run this command with '
             'the nova.conf of a compute of that scope (its [ironic_multi] '
             'and [ironic] options), or give it the same options.'),
            results['Local settings'])

    def test_hosts_with_different_peer_lists_fail(self) -> None:
        self.flags(peer_list=['host1', 'host2'], group='ironic_multi')
        self.divide('host1')
        self.flags(peer_list=['host1', 'host2', 'host3'],
                   group='ironic_multi')
        self.divide('host2')
        code, results = self.check()
        self.assertEqual(FAILURE, code)
        self.assertIn('disagree on peer_list: digest ',
                      results['Same settings in each scope'][1])

    def test_a_host_that_publishes_nothing_or_is_changing_warns(
            self) -> None:
        self.divide('host1', 'host2')
        services = {svc.host: svc for svc in objects.ServiceList.get_by_binary(
            self.ctxt, 'nova-compute')}
        # host2 is on an older release: its marker, no settings.
        self.markers.settings.pop(services['host2'].uuid)
        code, results = self.check()
        self.assertEqual(WARNING, code, results)
        verdict, details = results['Same settings in each scope']
        self.assertEqual(WARNING, verdict)
        self.assertIn('host2 runs this driver but publishes no settings',
                      details)
        # host1 mid-change: two published settings.
        first = self.markers.settings[services['host1'].uuid]
        self.useFixture(fixtures.MockPatchObject(
            published, 'read', lambda: {services['host1'].uuid: [
                first, published.Settings('balanced/2^5', 'nodes',
                                          'servicegroup', None, None,
                                          None)]}))
        self.assertIn('host1 is changing its settings now: run the check '
                      'again', self.check()[1][
                          'Same settings in each scope'][1])

    def test_no_host_publishing_yet_warns(self) -> None:
        code, results = self.check()
        self.assertEqual((WARNING, 'No running host publishes its settings '
                          'yet.'), results['Same settings in each scope'])

    def test_placement_that_cannot_be_read_fails(self) -> None:
        self.divide('host1')
        self.useFixture(fixtures.MockPatchObject(
            published, 'read',
            side_effect=marker.MarkerError('cannot reach placement: x')))
        code, results = self.check()
        self.assertEqual(FAILURE, code)
        self.assertEqual((FAILURE, 'Cannot read what the hosts publish: '
                          'cannot reach placement: x'),
                         results['Same settings in each scope'])

    def test_invalid_local_settings_fail_and_say_so_once(self) -> None:
        self.flags(ring_algorithm='nonesuch', group='ironic_multi')
        code, results = self.check()
        self.assertEqual(FAILURE, code)
        verdict, details = results['Local settings']
        self.assertEqual(FAILURE, verdict)
        self.assertIn('[ironic_multi] ring_algorithm', details)
        self.assertIn('see the first check', results['Ironic API version'][1])

    def test_ironic_too_old_for_shards_fails(self) -> None:
        self.flags(divide='shards', group='ironic_multi')
        self.ironic.version = (1, 80)
        code, results = self.check()
        self.assertEqual(FAILURE, code)
        self.assertEqual(
            (FAILURE, 'Ironic offers API 1.80 at most; [ironic_multi] divide '
             '= shards needs 1.82. Upgrade Ironic first.'),
            results['Ironic API version'])
        self.flags(divide='nodes', group='ironic_multi')
        self.assertEqual(OK, self.check()[1]['Ironic API version'][0])

    def test_a_policy_refusal_fails_naming_the_user(self) -> None:
        refused = ironic.IronicError('listing nodes: Forbidden (HTTP 403)')
        refused.__cause__ = ir_exc.Forbidden()
        self.ironic.fail('list_nodes', refused)
        code, results = self.check()
        verdict, details = results['Ironic policy']
        self.assertEqual(FAILURE, verdict)
        self.assertIn("Ironic's policy refuses the [ironic] user (as its auth "
                      "options name it): listing nodes: Forbidden", details)
        self.ironic.fail('list_nodes', ironic.IronicUnavailable('refused'))
        self.assertEqual((FAILURE, 'Cannot read Ironic: refused'),
                         self.check()[1]['Ironic policy'])

    def test_a_missing_shim_fails_and_another_driver_warns(self) -> None:
        real = upgrade.importlib.util.find_spec
        with mock.patch.object(
                upgrade.importlib.util, 'find_spec',
                lambda name: None if name == upgrade.SHIM else real(name)):
            verdict, details = self.check()[1]['nova.virt shim']
        self.assertEqual(FAILURE, verdict)
        self.assertIn('nova.virt.nova_ironic_multi cannot be imported by',
                      details)
        self.flags(compute_driver='ironic.IronicDriver')
        verdict, details = self.check()[1]['nova.virt shim']
        self.assertEqual(WARNING, verdict)
        self.assertIn('these files set compute_driver = ironic.IronicDriver',
                      details)

    def test_ironic_options_that_work_otherwise_warn(self) -> None:
        # As the operator's files set them (overrides are not theirs).
        tmp = pathlib.Path(self.useFixture(fixtures.TempDir()).path)
        checks = upgrade.Checks(test_nova_options.make_conf(
            tmp, ironic={'peer_list': 'host1,host2'}))
        result = checks._check_ironic_options()
        self.assertEqual(WARNING, result.code)
        self.assertIn('[ironic] peer_list is set: it applies without '
                      '[ironic] conductor_group', result.details)
        quiet = upgrade.Checks(test_nova_options.make_conf(
            tmp, ironic={'serial_console_state_timeout': '30'}))
        self.assertEqual(OK, quiet._check_ironic_options().code)

    def test_the_command_exits_with_the_worst_and_255_when_a_check_breaks(
            self) -> None:
        self.divide('host1', 'host2', 'host3')
        out, err = io.StringIO(), io.StringIO()
        command = types.SimpleNamespace(name='upgrade', action='check',
                                        format='json')
        self.assertEqual(OK, cli.run(command, out, err))
        self.flags(ring_algorithm='balanced', group='ironic_multi')
        self.divide('host3')
        self.assertEqual(FAILURE, cli.run(command, out, err))

        def broken(checks: upgrade.Checks) -> Any:
            raise RuntimeError('boom')

        with mock.patch.object(upgrade.Checks, '_upgrade_checks',
                               (('x', broken),)):
            self.assertEqual(255, cli.run(command, out, err))
        self.assertIn('Error: a check failed to run: boom', err.getvalue())


class TwoCellsTest(base.DriverTestCase):

    NUMBER_OF_CELLS = 2

    def test_a_scope_served_from_two_cells_fails(self) -> None:
        node = self.ironic.add_node()
        for cell in ('cell1', 'cell2'):
            with nova_context.target_cell(
                    self.ctxt, self.cell_mappings[cell]) as cctxt:
                svc = objects.Service(cctxt, host='h-' + cell,
                                      binary='nova-compute',
                                      topic='compute', report_count=1)
                svc.create()
                self.markers.publish(svc.host, svc.uuid)
                base.ironic_compute_node(cctxt, svc.host, node, node)
        code, results = UpgradeCheckTest.check(self)  # type: ignore[arg-type]
        verdict, details = results['One cell per scope']
        self.assertEqual(FAILURE, verdict)
        self.assertIn('node %s has compute nodes in cells' % node, details)



class PublishedTest(base.DriverTestCase):
    """The trait round-trips; long values still fit; others are ignored."""

    UUID = '6f8c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f'

    def settings(self, **kw: Any) -> published.Settings:
        part = partition.Partition(
            'h', partition.Scope(kw.get('group'), kw.get('shard')),
            kw.get('peers'), 'servicegroup', 'compatible', 5)
        return published.Settings.of(part)

    def test_round_trip(self) -> None:
        settings = self.settings(group='g1', peers=frozenset({'a', 'b'}))
        trait = published.name(self.UUID, settings)
        self.assertTrue(trait.startswith(
            'CUSTOM_NOVA_IRONIC_MULTI_CFG_6F8C1D2E3A4B4C5D8E9F0A1B2C3D4E5F_'))
        self.assertRegex(trait, r'^[A-Z0-9_]+$')
        self.assertEqual((self.UUID, settings), published.parse(trait))
        self.assertEqual("conductor group 'g1'", settings.scope())

    def test_a_long_scope_is_published_as_its_digest(self) -> None:
        long = self.settings(group='g' * 200, shard='s' * 200)
        trait = published.name(self.UUID, long)
        self.assertLessEqual(len(trait), 255)
        uuid, parsed = published.parse(trait) or ('', None)
        assert parsed is not None
        self.assertEqual(published.digest('g' * 200), parsed.conductor_group)
        # The same value, the same digest: hosts still group together.
        self.assertEqual(trait, published.name(self.UUID, self.settings(
            group='g' * 200, shard='s' * 200)))

    def test_traits_not_ours_are_ignored(self) -> None:
        for trait in ('CUSTOM_NOVA_IRONIC_MULTI_HOST_' + 'A' * 32,
                      'CUSTOM_NOVA_IRONIC_MULTI_CFG_XYZ_AAAA',
                      'HW_CPU_X86_AVX'):
            self.assertIsNone(published.parse(trait))


class PublishSettingsJobTest(base.DriverTestCase):

    def test_published_when_changed_and_checked_again_later(self) -> None:
        self.make_service('host1')
        self.driver.get_available_nodes()
        svc = objects.Service.get_by_host_and_binary(self.ctxt, 'host1',
                                                     'nova-compute')
        self.assertEqual('compatible/2^5',
                         self.markers.settings[svc.uuid].ring)
        self.flags(ring_algorithm='balanced', group='ironic_multi')
        self.driver.get_available_nodes()
        self.assertEqual('balanced/2^5', self.markers.settings[svc.uuid].ring)
        # Unchanged: not asked of placement again until AGAIN_EVERY.
        calls: list[published.Settings] = []

        def publish(uuid: str, settings: published.Settings) -> bool:
            calls.append(settings)
            return False

        self.useFixture(fixtures.MockPatchObject(published, 'publish',
                                                 publish))
        for _ in range(12):
            self.driver.get_available_nodes()
        self.assertEqual(1, len(calls))

    def test_placement_away_warns_once_and_the_period_stands(self) -> None:
        self.make_service('host1')
        self.ironic.add_node()
        self.useFixture(fixtures.MockPatchObject(
            published, 'publish',
            side_effect=marker.MarkerError('cannot reach placement: x')))
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        for _ in range(3):
            self.assertTrue(self.driver.get_available_nodes())
        self.assertEqual(1, log.output.count(
            'Cannot publish the settings of this host (host1)'))


class SettingsCheckTest(base.DriverTestCase):
    """The operator command says when it divides otherwise than the hosts.

    ``shards apply`` refuses to label for another division.
    """

    def setUp(self) -> None:
        super().setUp()
        self.flags(service_down_time=24 * 3600)
        self.g1 = [self.ironic.add_node(conductor_group='g1')
                   for _ in range(4)]
        self.g2 = [self.ironic.add_node(conductor_group='g2')
                   for _ in range(2)]
        for host in ('host1', 'host2'):
            self.make_service(host)
        self.flags(partition_key='g1', peer_list=['host1', 'host2'],
                   group='ironic_multi')
        self.drivers = self.fleet_drivers(('host1', 'host2'))
        for drv in self.drivers.values():
            drv.get_available_nodes()

    def command(self, *argv: str) -> tuple[int, dict[str, Any], str]:
        out, err = io.StringIO(), io.StringIO()
        if argv[0] == 'ring':
            command = types.SimpleNamespace(name='ring', action=argv[1],
                                            format='json', add=[],
                                            remove=[])
        else:
            command = types.SimpleNamespace(
                name='shards', action=argv[1], count=2, relabel_all=False,
                format='json')
        code = cli.run(command, out, err)
        return code, json.loads(out.getvalue() or '{}'), err.getvalue()

    def test_the_same_files_warn_nothing(self) -> None:
        code, data, _ = self.command('ring', 'show')
        self.assertEqual((0, []), (code, data['settings_differ']))

    def test_files_without_the_hosts_group_warn_and_apply_refuses(
            self) -> None:
        # A controller's nova.conf: no [ironic_multi] partition_key.
        self.flags(partition_key=None, peer_list=[], group='ironic_multi')
        code, data, _ = self.command('ring', 'show')
        self.assertEqual(0, code)
        self.assertEqual(
            ["No running host divides all nodes, as this command's files "
             "say; the hosts divide conductor group 'g1' (host1, host2). "
             + settings_check.FIX], data['settings_differ'])
        code, data, _ = self.command('ring', 'simulate')
        self.assertEqual(1, len(data['settings_differ']))
        code, data, _ = self.command('shards', 'plan')
        self.assertEqual((0, 1), (code, len(data['settings_differ'])))
        code, data, err = self.command('shards', 'apply')
        self.assertEqual(2, code)
        self.assertIn('Refusing to write shard labels', err)
        self.assertIn('Nothing was written', err)
        # Ironic's view: no node labelled.
        self.assertEqual(
            {None}, {self.ironic.nodes[n].get('shard')
                     for n in self.g1 + self.g2})

    def test_another_ring_is_named_with_its_hosts(self) -> None:
        self.flags(ring_algorithm='balanced', group='ironic_multi')
        code, data, _ = self.command('ring', 'show')
        (line,) = data['settings_differ']
        self.assertIn('ring_algorithm/hash_partition_exponent is '
                      "balanced/2^5 in this command's files and "
                      'compatible/2^5 on host1, host2, which divide '
                      "conductor group 'g1'", line)

    def test_a_host_moved_to_another_group_keeps_none_of_its_nodes_here(
            self) -> None:
        # host1 has a server on a g1 node, and is moved to g2 (reloaded)
        # without handing it over: its period, and now ring show, manage
        # that node no more; nobody does.
        inst = self.make_instance(host='host1')
        node = self.g1[0]
        self.ironic.nodes[node].update(instance_uuid=inst.uuid,
                                       provision_state=states.ACTIVE)
        self.flags(partition_key='g2', peer_list=['host1'],
                   group='ironic_multi')
        self.assertNotIn(node, self.drivers['host1'].get_available_nodes())
        self.flags(partition_key='g1', peer_list=['host1', 'host2'],
                   group='ironic_multi')
        self.assertNotIn(node, self.drivers['host2'].get_available_nodes())
        code, data, _ = self.command('ring', 'show')
        hosts = {h['host']: h for h in data['hosts']}
        self.assertNotIn(node, hosts['host1']['managed'] +
                         hosts['host2']['managed'])
        self.assertEqual(
            {'host1': {'scope': "conductor group 'g2'", 'nodes': [node]}},
            data['hosts_dividing_another_scope'])
        self.assertIn('host1', data['hosts_not_managing_their_instances'])
        out = io.StringIO()
        cli.run(types.SimpleNamespace(name='ring', action='show',
                                      format='table'), out, io.StringIO())
        self.assertIn("Warning: host1 divides conductor group 'g2' now (as "
                      "it publishes), so nobody manages the 1 node(s) of "
                      "its servers in conductor group 'g1'", out.getvalue())

    def test_placement_away_is_said_not_fatal(self) -> None:
        self.useFixture(fixtures.MockPatchObject(
            published, 'read',
            side_effect=marker.MarkerError('cannot reach placement: x')))
        code, data, _ = self.command('ring', 'show')
        self.assertEqual((0, []), (code, data['settings_differ']))
        self.assertIn('Cannot read the settings the hosts publish',
                      data['settings_unread'])
        # Nothing to refuse on: apply labels as asked.
        code, data, _ = self.command('shards', 'apply')
        self.assertEqual((0, True), (code, data['applied']))

    def test_nothing_published_compares_nothing(self) -> None:
        self.markers.settings.clear()
        self.flags(partition_key=None, peer_list=[], group='ironic_multi')
        self.assertEqual([], settings_check.differences(
            partition.Partition('x', partition.Scope(), None,
                                'servicegroup', 'compatible', 5), {}))
        code, data, _ = self.command('ring', 'show')
        self.assertEqual([], data['settings_differ'])
