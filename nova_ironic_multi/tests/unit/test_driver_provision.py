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
"""Reservation, deploy, delete, rebuild and rescue against a fake Ironic."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import fixtures
from nova.compute import task_states
from nova import exception
from nova import objects

from nova_ironic_multi.actions import stalls
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.period import jobs
from nova_ironic_multi.tests.unit import base

IMAGE_1 = '155d900f-4e14-4e4c-a73d-069cbf4541e6'
IMAGE_2 = 'a2459075-d96c-40d5-893e-577ff92e721c'


def volume_bdm(ctxt: Any, instance: Any, volume_id: str = 'vol-1',
               boot_index: int | None = 0) -> Any:
    """A BlockDeviceMapping object of an iSCSI volume of ``instance``."""
    from nova.tests.unit import fake_block_device
    return fake_block_device.fake_bdm_object(
        ctxt, {'source_type': 'volume', 'destination_type': 'volume',
               'boot_index': boot_index, 'volume_id': volume_id,
               'connection_info': '{"driver_volume_type": "iscsi",'
               ' "data": {"target_lun": 1}}',
               'device_name': '/dev/sda' if boot_index == 0 else '/dev/sdb',
               'instance_uuid': instance.uuid})


def block_device_info(ctxt: Any, instance: Any, *bdms: Any
                      ) -> dict[str, Any]:
    """block_device_info of ``bdms`` (default: an iSCSI boot volume)."""
    from nova.virt import block_device as driver_block_device
    bdms = bdms or (volume_bdm(ctxt, instance),)
    return {'block_device_mapping':
            [driver_block_device.DriverVolumeBlockDevice(b) for b in bdms],
            'root_device_name': '/dev/sda'}


class ReservationTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node()
        self.instance = self.fake_instance(self.node)

    def test_reserves_with_one_unretried_patch(self) -> None:
        self.driver.prepare_for_spawn(self.instance)
        self.assertEqual(self.instance.uuid,
                         self.ironic.nodes[self.node]['instance_uuid'])
        self.assertEqual([(self.node, self.instance.uuid)],
                         self.ironic.calls_to('reserve'))

    def test_same_instance_may_reserve_again(self) -> None:
        self.driver.prepare_for_spawn(self.instance)
        self.driver.prepare_for_spawn(self.instance)
        self.assertEqual(2, len(self.ironic.calls_to('reserve')))

    def test_used_node_is_refused_so_nova_reschedules(self) -> None:
        self.ironic.nodes[self.node]['instance_uuid'] = 'someone-else'
        exc = self.assertRaises(exception.ComputeResourcesUnavailable,
                                self.driver.prepare_for_spawn, self.instance)
        self.assertIn('someone-else', str(exc))
        self.assertEqual([], self.ironic.calls_to('reserve'))

    def test_unavailable_node_is_refused(self) -> None:
        for change in ({'maintenance': True},
                       {'provision_state': states.CLEANING},
                       {'power_state': None}):
            self.ironic.nodes[self.node].update(
                maintenance=False, provision_state=states.AVAILABLE,
                power_state=states.POWER_OFF)
            self.ironic.nodes[self.node].update(change)
            self.assertRaises(exception.ComputeResourcesUnavailable,
                              self.driver.prepare_for_spawn, self.instance)

    def test_node_outside_the_scope_is_refused(self) -> None:
        # nova keeps scheduling onto the providers of nodes a reload moved
        # this service away from.
        self.flags(partition_key='rack-a', peer_list=[self.HOST],
                   group='ironic_multi')
        exc = self.assertRaises(exception.ComputeResourcesUnavailable,
                                self.driver.prepare_for_spawn, self.instance)
        self.assertIn("outside the scope of this service (conductor group "
                      "'rack-a')", str(exc))
        self.assertEqual([], self.ironic.calls_to('reserve'))
        self.ironic.nodes[self.node]['conductor_group'] = 'rack-a'
        self.driver.prepare_for_spawn(self.instance)

    def test_race_lost_at_the_patch_is_a_reschedule_not_a_retry(
            self) -> None:
        self.ironic.fail('reserve', ironic.Conflict(
            'Node is associated with instance other'))
        exc = self.assertRaises(exception.ComputeResourcesUnavailable,
                                self.driver.prepare_for_spawn, self.instance)
        self.assertIn('reserved by another instance', str(exc))
        self.assertEqual(1, len(self.ironic.calls_to('reserve')))

    def test_missing_node_is_refused(self) -> None:
        inst = self.fake_instance('no-such-node')
        self.assertRaises(exception.ComputeResourcesUnavailable,
                          self.driver.prepare_for_spawn, inst)

    def test_no_node_on_the_instance(self) -> None:
        inst = self.fake_instance(None)
        self.assertRaises(exception.NovaException,
                          self.driver.prepare_for_spawn, inst)

    def test_other_reservation_errors_reschedule_too(self) -> None:
        # e.g. Ironic has no conductor for the node's group (400).
        self.ironic.fail('reserve', ironic.BadRequest('No valid host'))
        exc = self.assertRaises(exception.ComputeResourcesUnavailable,
                                self.driver.prepare_for_spawn, self.instance)
        self.assertIn('No valid host', str(exc))

    def test_failed_spawn_cleanup_releases_only_our_node(self) -> None:
        self.driver.prepare_for_spawn(self.instance)
        self.driver.failed_spawn_cleanup(self.instance)
        self.assertIsNone(self.ironic.nodes[self.node]['instance_uuid'])
        # Nothing of ours anywhere: nothing to do, nothing touched.
        self.ironic.nodes[self.node]['instance_uuid'] = 'other'
        calls = len(self.ironic.calls)
        self.driver.failed_spawn_cleanup(self.instance)
        self.assertEqual('other',
                         self.ironic.nodes[self.node]['instance_uuid'])
        self.assertEqual(['node_for_instance'],
                         [c[0] for c in self.ironic.calls[calls:]])


class SpawnTest(base.DriverTestCase):


    def abandoned_deploys(self) -> dict[str, str]:
        """The deploys the periods still have to undo."""
        undo = [j for j in self.driver._inventory.jobs
                if isinstance(j, jobs.UndoAbandoned)]
        return undo[0].deploys.pending()
    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node()
        self.instance = self.fake_instance(self.node,
                                           image_ref=IMAGE_1,
                                           display_name='web1')
        self.instance.flavor.extra_specs = {
            'capabilities:boot_mode': 'uefi',
            'trait:CUSTOM_GOLD': 'required',
            'trait1:CUSTOM_FAST': 'required',
            'trait2:CUSTOM_NO': 'forbidden'}
        self.image = objects.ImageMeta.from_dict(
            {'id': IMAGE_1, 'properties': {}})
        self.driver.prepare_for_spawn(self.instance)

    def boot_volume(self) -> dict[str, Any]:
        """block_device_info of an iSCSI boot volume, vol-1."""
        return block_device_info(self.ctxt, self.instance)

    def spawn(self, **kwargs: Any) -> None:
        self.driver.spawn(self.ctxt, self.instance, self.image, [],
                          'secret', {},
                          network_info=self.network_info(), **kwargs)

    def test_deploys_and_waits_for_active(self) -> None:
        self.spawn()
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.ACTIVE, node['provision_state'])
        self.assertEqual(self.instance.uuid, node['instance_uuid'])
        info = node['instance_info']
        self.assertEqual(IMAGE_1, info['image_source'])
        self.assertEqual('web1', info['display_name'])
        self.assertEqual(['CUSTOM_GOLD', 'CUSTOM_FAST'], info['traits'])
        self.assertEqual('{"boot_mode": "uefi"}', info['capabilities'])
        self.assertEqual('1', info['ephemeral_gb'])
        self.assertNotIn('configdrive', info)
        self.assertEqual('/dev/sda1', self.instance.default_ephemeral_device)
        self.assertEqual(
            [(self.node, 'active', {'configdrive': None})],
            self.ironic.calls_to('set_provision_state'))

    def test_config_drive_is_sent_as_gzipped_base64_bytes(self) -> None:
        self.flags(force_config_drive=True)
        # nova's metadata needs a full instance from the database (the
        # functional tests build a real one); here, only the drive matters.
        uuid = self.instance.uuid

        class Metadata:
            def __init__(self, instance: Any, **kwargs: Any) -> None:
                self.kwargs = kwargs

            def metadata_for_config_drive(self) -> Any:
                yield ('openstack/latest/meta_data.json',
                       ('{"uuid": "%s"}' % uuid).encode())

        self.useFixture(fixtures.MockPatch(
            'nova.api.metadata.base.InstanceMetadata', Metadata))
        self.spawn()
        drive = self.ironic.nodes[self.node]['instance_info']['configdrive']
        self.assertIsInstance(drive, bytes)
        iso = gzip.decompress(base64.b64decode(drive))
        # An ISO 9660 image labelled config-2, carrying the metadata.
        self.assertEqual(b'CD001', iso[0x8001:0x8006])
        self.assertIn(b'config-2', iso)
        self.assertIn(self.instance.uuid.encode(), iso)

    def test_config_drive_failure_is_a_deploy_failure_and_undone(
            self) -> None:
        self.flags(force_config_drive=True)
        # Building the drive reads the node's ports from Ironic.
        self.ironic.fail('ports', ironic.IronicUnavailable('down'))
        exc = self.assertRaises(
            exception.InstanceDeployFailure, self.driver.spawn, self.ctxt,
            self.instance, self.image, [], 'secret', {},
            network_info=self.network_info('vif-1'))
        self.assertIn('config drive', str(exc))
        node = self.ironic.nodes[self.node]
        self.assertIsNone(node['instance_uuid'])
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))

    def test_failed_boot_from_volume_build_does_not_wait_for_cleaning(
            self) -> None:
        # nova reschedules the build once spawn fails: not after cleaning.
        self.flags(unprovision_timeout=1, group='ironic_multi')
        self.ironic.cleaning = True
        real = self.ironic.set_provision_state

        def deploy_fails_then_cleaning_lasts(node_uuid: str, target: str,
                                             **kw: Any) -> None:
            real(node_uuid, target, **kw)
            if target == 'active':
                self.ironic.nodes[node_uuid]['_pending']['final'].update(
                    provision_state=states.DEPLOYFAIL,
                    last_error='PXE timeout')
            else:
                self.ironic.steps = 10 ** 6

        self.ironic.set_provision_state = (  # type: ignore
            deploy_fails_then_cleaning_lasts)
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn,
                                block_device_info=self.boot_volume())
        self.assertIn('PXE timeout', str(exc))
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.CLEANING, node['provision_state'])
        self.assertIsNone(node['instance_uuid'])
        self.assertNotIn('did not finish', self.stdlog.logger.output)
        self.assertEqual([], self.ironic.calls_to('delete_volume_target'))

    def test_volume_target_outage_is_a_deploy_failure(self) -> None:
        bdi = self.boot_volume()
        self.ironic.fail('create_volume_target',
                         ironic.IronicUnavailable('down'))
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn,
                                block_device_info=bdi)
        self.assertIn('vol-1', str(exc))
        self.assertIsNone(self.ironic.nodes[self.node]['instance_uuid'])

    def test_validation_failure_releases_the_node_and_says_why(
            self) -> None:
        self.ironic.validation = {'power': {'result': False,
                                            'reason': 'no BMC address'}}
        exc = self.assertRaises(exception.ValidationError, self.spawn)
        self.assertIn('power: no BMC address', str(exc))
        node = self.ironic.nodes[self.node]
        self.assertIsNone(node['instance_uuid'])
        self.assertEqual({}, node['instance_info'])
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))

    def test_deploy_failure_undeploys_and_reports_ironics_error(
            self) -> None:
        real = self.ironic.set_provision_state

        def deploy_then_fail(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            if target == 'active':
                pending = self.ironic.nodes[node]['_pending']['final']
                pending.update(provision_state=states.DEPLOYFAIL,
                               last_error='PXE timeout')

        self.ironic.set_provision_state = deploy_then_fail  # type: ignore
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('PXE timeout', str(exc))
        self.assertEqual(['active', 'deleted'],
                         [c[1] for c in
                          self.ironic.calls_to('set_provision_state')])
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.AVAILABLE, node['provision_state'])
        self.assertIsNone(node['instance_uuid'])

    def requested(self) -> list[str]:
        return [c[1] for c in self.ironic.calls_to('set_provision_state')]

    def deploy_stops_in(self, state: str, reads: int | None = None) -> None:
        """The deploy Ironic starts stays in ``state``.

        With ``reads``, it is ``deploying`` for that many reads first.
        """
        real = self.ironic.set_provision_state

        def deploy(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            if target == 'active':
                stay = {'provision_state': state,
                        'target_provision_state': states.ACTIVE}
                if reads is None:
                    self.ironic.nodes[node].update(stay, _pending=None)
                else:
                    self.ironic.nodes[node]['_pending'] = {'left': reads,
                                                           'final': stay}

        self.ironic.set_provision_state = deploy  # type: ignore

    def assert_undone(self) -> None:
        node = self.ironic.nodes[self.node]
        self.assertEqual((states.AVAILABLE, None),
                         (node['provision_state'], node['instance_uuid']))
        self.assertNotIn('LEAKED', self.stdlog.logger.output)

    def test_deploy_that_never_ends_is_bounded_and_undone(self) -> None:
        # Ironic accepts no undeploy while it deploys: spawn says the node
        # leaked, and a later period undeploys it once Ironic allows. (The
        # old fake accepted "deleted" from deploying: this test, which
        # only looked at the last request, passed while Ironic refused it
        # and the node stayed deploying, holding the instance.)
        self.flags(deploy_timeout=1, unprovision_timeout=1,
                   group='ironic_multi')
        self.ironic.steps = 10 ** 6
        leaked = base.metric('nodes_leaked_total')
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('did not finish within 1 seconds', str(exc))
        self.assertEqual(leaked + 1, base.metric('nodes_leaked_total'))
        node = self.ironic.nodes[self.node]
        self.assertEqual((states.DEPLOYING, self.instance.uuid),
                         (node['provision_state'], node['instance_uuid']))
        self.assertIn('LEAKED: Ironic node %s still holds instance %s '
                      '(provision state deploying)'
                      % (self.node, self.instance.uuid),
                      self.stdlog.logger.output)
        # Nothing Ironic would refuse was asked, then or in a period.
        self.driver.get_available_nodes()
        self.assertEqual(['active'], self.requested())
        # Ironic's conductor gives up too: the next period undeploys.
        self.conductor_fails_the_deploy()
        self.assertEqual({}, self.abandoned_deploys())
        self.driver.get_available_nodes()
        self.assertEqual(['active', 'deleted'], self.requested())

    def conductor_fails_the_deploy(self, **node: Any) -> None:
        """Ironic fails the deploy left behind: the next period undoes it."""
        left = self.ironic.nodes[self.node]
        left.update(provision_state=states.DEPLOYFAIL, _pending=None,
                    target_provision_state=states.ACTIVE, **node)
        self.ironic.steps = 1
        self.driver.get_available_nodes()
        self.assertEqual(['active', 'deleted'], self.requested())
        self.driver.get_available_nodes()
        self.assertEqual((states.AVAILABLE, None),
                         (left['provision_state'], left['instance_uuid']))

    def test_deploy_no_conductor_serves_is_given_up_without_waiting(
            self) -> None:
        # Seen in the long soak: Ironic accepted the deploy, then the only
        # conductor of the node's group died; the node stays deploying
        # until one is back. The undo, then nova's clean-up destroy, each
        # waited unprovision_timeout (20 minutes in all) for nothing.
        self.flags(deploy_timeout=1, unprovision_timeout=600,
                   group='ironic_multi')
        self.ironic.steps = 10 ** 6
        real = self.ironic.set_provision_state

        def deploy(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            if target == 'active':
                self.ironic.nodes[node].update(conductor=None,
                                               conductor_group='g1')

        self.ironic.set_provision_state = deploy  # type: ignore
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        reads_in_the_undo = len(self.ironic.calls_to('get_node'))
        self.assertIn('LEAKED: Ironic node %s still holds instance %s '
                      '(provision state deploying)'
                      % (self.node, self.instance.uuid),
                      self.stdlog.logger.output)
        # nova's clean-up of the failed build: refused at once, saying why.
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                self.driver.destroy, self.ctxt,
                                self.instance, None)
        self.assertIn("is deploying and no live Ironic conductor of its "
                      "conductor group 'g1' serves it: Ironic accepts no "
                      "undeploy", str(exc))
        self.assertLessEqual(len(self.ironic.calls_to('get_node')),
                             reads_in_the_undo + 1)
        self.assertEqual(['active'], self.requested())
        # A conductor of g1 is back and fails the deploy: a period undoes.
        self.conductor_fails_the_deploy(conductor='c1')

    def deploy_stays(self, **node: Any) -> None:
        """The deploy stays ``deploying``, the node as ``node`` says.

        With long bounds, and a short grace for a stall.
        """
        self.driver._provision._stalls = stalls.Stalls(grace=0.3)
        self.flags(deploy_timeout=600, unprovision_timeout=600,
                   group='ironic_multi')
        self.ironic.steps = 10 ** 6
        self.ironic.nodes[self.node].update(node)

    def test_deploy_no_conductor_works_on_ends_and_is_given_up(
            self) -> None:
        # A conductor cleared the dead one's lock but never failed the
        # deploy: the node stays deploying, unlocked, for ever.
        self.deploy_stays(reservation=None, conductor='c1')
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('cannot finish: the node is deploying and no Ironic '
                      'conductor has held its lock for', str(exc))
        self.assertIn('LEAKED', self.stdlog.logger.output)
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                self.driver.destroy, self.ctxt,
                                self.instance, None)
        self.assertIn('(none is working on it): Ironic accepts no undeploy',
                      str(exc))
        self.assertEqual(['active'], self.requested())

    def test_deploy_wait_ends_once_no_conductor_serves_the_node(
            self) -> None:
        # The lock of the conductor that died, and none left in g1.
        self.deploy_stays(reservation='dead-conductor', conductor=None,
                          conductor_group='g1')
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn("cannot finish: the node is deploying and no live "
                      "Ironic conductor of its conductor group 'g1' serves "
                      "it", str(exc))
        self.assertIn('LEAKED', self.stdlog.logger.output)
        self.assertEqual(['active'], self.requested())

    def test_a_deploy_a_conductor_holds_is_waited_for(self) -> None:
        self.driver._provision._stalls = stalls.Stalls(grace=0.0)
        self.deploy_stops_in(states.ACTIVE, reads=15)
        self.ironic.nodes[self.node].update(reservation='c1',
                                            conductor='c1')
        self.spawn()
        self.assertEqual(['active'], self.requested())

    def test_undo_waits_for_a_deploy_a_live_conductor_serves(self) -> None:
        self.flags(deploy_timeout=1, group='ironic_multi')
        self.deploy_stops_in(states.DEPLOYWAIT, reads=15)
        self.ironic.nodes[self.node]['conductor'] = 'c1'
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertEqual(['active', 'deleted'], self.requested())
        self.assert_undone()

    def test_deploy_given_up_waiting_for_the_agent_is_undone_at_once(
            self) -> None:
        self.flags(deploy_timeout=1, group='ironic_multi')
        self.deploy_stops_in(states.DEPLOYWAIT)
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertEqual(['active', 'deleted'], self.requested())
        self.assert_undone()

    def test_deploy_given_up_in_a_hold_is_aborted_then_undone(self) -> None:
        self.flags(deploy_timeout=1, group='ironic_multi')
        self.deploy_stops_in(states.DEPLOYHOLD)
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertEqual(['active', 'abort', 'deleted'], self.requested())
        self.assert_undone()

    def test_deploy_that_leaves_deploying_during_the_undo_is_undone(
            self) -> None:
        # About 10 reads in the deploy's second, the rest in the undo's.
        self.flags(deploy_timeout=1, group='ironic_multi')
        self.deploy_stops_in(states.DEPLOYWAIT, reads=15)
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertEqual(['active', 'deleted'], self.requested())
        self.assert_undone()

    def test_node_left_by_a_deploy_given_up_is_not_reserved_again(
            self) -> None:
        self.ironic.nodes[self.node].update(
            provision_state=states.DEPLOYING)
        exc = self.assertRaises(exception.ComputeResourcesUnavailable,
                                self.driver.prepare_for_spawn, self.instance)
        self.assertIn('still holds instance %s from an earlier deploy '
                      '(provision state deploying)' % self.instance.uuid,
                      str(exc))

    def test_period_leaves_a_node_that_moved_on_to_another_instance(
            self) -> None:
        self.flags(deploy_timeout=1, unprovision_timeout=1,
                   group='ironic_multi')
        self.ironic.steps = 10 ** 6
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        # Someone undid it in Ironic, and another instance took the node.
        self.ironic.nodes[self.node].update(
            provision_state=states.ACTIVE, instance_uuid='another',
            _pending=None)
        self.driver.get_available_nodes()
        self.assertEqual(['active'], self.requested())
        self.assertEqual({}, self.abandoned_deploys())

    def test_instance_deleted_meanwhile_aborts(self) -> None:
        def deleting() -> None:
            self.instance.task_state = task_states.DELETING
        self.instance.refresh.side_effect = deleting
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('deleted or failed', str(exc))

    def test_node_of_another_instance_is_never_touched(self) -> None:
        self.ironic.nodes[self.node]['instance_uuid'] = 'other'
        self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertEqual([], self.ironic.calls_to('patch'))
        self.assertEqual([], self.ironic.calls_to('release'))
        self.assertEqual('other',
                         self.ironic.nodes[self.node]['instance_uuid'])

    def test_refused_deploy_request_is_undone(self) -> None:
        self.ironic.fail('set_provision_state',
                         ironic.BadRequest('node in maintenance'))
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('node in maintenance', str(exc))
        self.assertIsNone(self.ironic.nodes[self.node]['instance_uuid'])

    def test_invalid_image_aborts_instead_of_rescheduling(self) -> None:
        self.ironic.fail('set_provision_state',
                         ironic.BadRequest('InvalidImage: no such image'))
        self.assertRaises(exception.BuildAbortException, self.spawn)

    def test_stale_volume_targets_are_removed_before_a_deploy(self) -> None:
        # A previous tenant's targets (its tear-down ran into cleaning).
        for volume_id, index in (('old-root', 0), ('vol-1', 1)):
            self.ironic.create_volume_target(
                node_uuid=self.node, volume_id=volume_id,
                volume_type='iscsi', boot_index=index)
        self.spawn(block_device_info=self.boot_volume())
        self.assertEqual([('vol-1', 0)],
                         [(t.volume_id, t.boot_index)
                          for t in self.ironic.targets[self.node]])

    def test_image_deploy_removes_stale_volume_targets_too(self) -> None:
        self.ironic.create_volume_target(node_uuid=self.node,
                                         volume_id='old-root',
                                         volume_type='iscsi', boot_index=0)
        self.spawn()
        self.assertEqual([], self.ironic.targets[self.node])

    def test_stale_target_that_stays_fails_the_deploy(self) -> None:
        self.ironic.create_volume_target(node_uuid=self.node,
                                         volume_id='old-root',
                                         volume_type='iscsi', boot_index=0)
        self.ironic.fail('delete_volume_target',
                         ironic.BadRequest('node is powered on'))
        exc = self.assertRaises(exception.InstanceDeployFailure, self.spawn)
        self.assertIn('stale volume targets', str(exc))
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))
        self.assertIsNone(self.ironic.nodes[self.node]['instance_uuid'])

    def test_boot_from_volume_adds_targets_and_skips_image(self) -> None:
        bdi = self.boot_volume()
        self.spawn(block_device_info=bdi)
        (target,) = self.ironic.targets[self.node]
        self.assertEqual(('iscsi', 'vol-1', 0),
                         (target.volume_type, target.volume_id,
                          target.boot_index))
        self.assertNotIn('image_source',
                         self.ironic.nodes[self.node]['instance_info'])


class DestroyTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node()
        self.instance = self.fake_instance(self.node)

    def deployed(self) -> None:
        self.ironic.nodes[self.node].update(
            instance_uuid=self.instance.uuid, provision_state=states.ACTIVE,
            power_state=states.POWER_ON)

    def destroy(self, *vifs: str, bdi: Any = None) -> None:
        self.driver.destroy(self.ctxt, self.instance,
                            self.network_info(*vifs), block_device_info=bdi)

    def deployed_from_volume(self) -> dict[str, Any]:
        """A deployed boot-from-volume instance (vol-1 and data-1)."""
        self.deployed()
        bdi = block_device_info(
            self.ctxt, self.instance, volume_bdm(self.ctxt, self.instance),
            volume_bdm(self.ctxt, self.instance, 'data-1', 1))
        for volume_id, index in (('vol-1', 0), ('data-1', 1)):
            self.ironic.create_volume_target(
                node_uuid=self.node, volume_id=volume_id,
                volume_type='iscsi', boot_index=index)
        return bdi

    def states_at(self, method: str) -> list[str]:
        """The node's provision state at each call of ``method``."""
        seen: list[str] = []
        real = getattr(self.ironic, method)

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(self.ironic.nodes[self.node]['provision_state'])
            return real(*args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova_ironic_multi.tests.unit.fake_ironic.FakeIronic.' + method,
            lambda _self, *a, **kw: spy(*a, **kw)))
        return seen

    def periods_until_available(self) -> None:
        """Resource-tracker periods until Ironic's cleaning is over."""
        for _ in range(50):
            self.driver.get_available_nodes()
            if (self.ironic.nodes[self.node]['provision_state'] ==
                    states.AVAILABLE):
                self.driver.get_available_nodes()
                return
        self.fail('node %s never became available' % self.node)

    def test_regression_2019977_only_undeploy_never_patch(self) -> None:
        bdi = self.deployed_from_volume()
        self.ironic.vifs[self.node] = ['vif-1']
        self.ironic.steps = 3   # tear-down (with its node lock) takes a while
        self.ironic.cleaning = True
        deleted_in = self.states_at('delete_volume_target')
        listed_in = self.states_at('volume_targets')
        self.destroy('vif-1', bdi=bdi)
        self.assertEqual([(self.node, 'deleted', {})],
                         self.ironic.calls_to('set_provision_state'))
        for forbidden in ('patch', 'release', 'vif_detach'):
            self.assertEqual([], self.ironic.calls_to(forbidden), forbidden)
        # The delete is over once Ironic's tear-down is: it does not wait
        # for cleaning, and asks nothing of the node meanwhile.
        node = self.ironic.nodes[self.node]
        self.assertEqual(states.CLEANING, node['provision_state'])
        self.assertIsNone(node['instance_uuid'])
        self.assertEqual(2, len(self.ironic.targets[self.node]))
        # The periods remove the targets once cleaning is over.
        self.periods_until_available()
        self.assertEqual([], self.ironic.targets[self.node])
        self.assertEqual([states.AVAILABLE] * 2, deleted_in)
        self.assertEqual({states.AVAILABLE}, set(listed_in))

    def test_delete_does_not_wait_for_cleaning(self) -> None:
        # Cleaning lasts: nova's delete (its instance lock, an RPC worker,
        # the Cinder attachment) must not wait for it.
        self.flags(unprovision_timeout=1, group='ironic_multi')
        bdi = self.deployed_from_volume()
        self.ironic.cleaning = True
        self.ironic.steps = 2
        self.ironic.set_provision_state(self.node, 'deleted')
        self.ironic.steps = 10 ** 6     # cleaning, once it starts, lasts
        self.destroy(bdi=bdi)
        self.assertNotIn('Timeout', self.stdlog.logger.output)
        self.assertNotIn('did not finish', self.stdlog.logger.output)
        self.assertIn('the volume targets of the instance are removed once '
                      'Ironic is done with it', self.stdlog.logger.output)
        self.assertEqual(2, len(self.ironic.targets[self.node]))
        # Periods while it cleans: nothing is asked of the node.
        self.driver.get_available_nodes()
        self.driver.get_available_nodes()
        self.assertEqual([], self.ironic.calls_to('volume_targets'))
        self.assertEqual([], self.ironic.calls_to('delete_volume_target'))
        self.ironic.nodes[self.node].update(
            provision_state=states.AVAILABLE, target_provision_state=None,
            _pending=None)
        self.driver.get_available_nodes()
        self.assertEqual([], self.ironic.targets[self.node])

    def test_only_this_instances_volume_targets_are_removed(self) -> None:
        bdi = self.deployed_from_volume()
        self.ironic.create_volume_target(node_uuid=self.node,
                                         volume_id='not-mine',
                                         volume_type='iscsi', boot_index=5)
        self.destroy(bdi=bdi)
        self.assertEqual(['not-mine'], [t.volume_id for t in
                                        self.ironic.targets[self.node]])

    def test_image_backed_delete_lists_no_volume_target(self) -> None:
        self.deployed()
        self.destroy()
        self.assertEqual([], self.ironic.calls_to('volume_targets'))

    def test_targets_ironic_refuses_to_remove_are_logged(self) -> None:
        bdi = self.deployed_from_volume()
        self.ironic.fail('delete_volume_target',
                         ironic.BadRequest('node is powered on'), times=2)
        self.destroy(bdi=bdi)
        self.assertEqual(2, len(self.ironic.targets[self.node]))
        self.assertIn('node is powered on', self.stdlog.logger.output)
        self.assertIsNone(self.ironic.nodes[self.node]['instance_uuid'])

    def test_targets_of_a_node_another_instance_took_are_left(self) -> None:
        bdi = self.deployed_from_volume()
        real = self.ironic.set_provision_state

        def then_taken(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            self.ironic.nodes[node]['_pending']['final'].update(
                instance_uuid='next-tenant')

        self.ironic.set_provision_state = then_taken  # type: ignore
        self.destroy(bdi=bdi)
        self.assertEqual([], self.ironic.calls_to('delete_volume_target'))

    def test_destroy_is_idempotent(self) -> None:
        self.deployed()
        self.destroy()
        calls = len(self.ironic.calls)
        self.destroy()
        self.assertEqual(['node_for_instance'],
                         [c[0] for c in self.ironic.calls[calls:]])

    def test_node_already_tearing_down_is_only_waited_for(self) -> None:
        self.deployed()
        self.ironic.set_provision_state(self.node, 'deleted')
        self.ironic.calls.clear()
        self.destroy()
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))
        self.assertEqual(states.AVAILABLE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_reserved_node_is_cleaned_and_released(self) -> None:
        self.ironic.nodes[self.node]['instance_uuid'] = self.instance.uuid
        self.ironic.vifs[self.node] = ['vif-1']
        self.ironic.create_volume_target(node_uuid=self.node,
                                         volume_id='v', volume_type='iscsi')
        self.destroy('vif-1', 'vif-never-attached')
        node = self.ironic.nodes[self.node]
        self.assertIsNone(node['instance_uuid'])
        self.assertEqual([], self.ironic.vifs[self.node])
        self.assertEqual([], self.ironic.targets[self.node])
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))

    def test_unknown_state_is_undeployed_to_be_safe(self) -> None:
        self.deployed()
        self.ironic.nodes[self.node]['provision_state'] = 'brand new state'
        from nova_ironic_multi.tests.unit import fake_ironic
        self.useFixture(fixtures.MockPatchObject(
            fake_ironic, 'MACHINE', dict(fake_ironic.MACHINE, **{
                'brand new state': {'delete': states.DELETING}})))
        self.destroy()
        self.assertEqual('deleted',
                         self.ironic.calls_to('set_provision_state')[0][1])

    def test_tear_down_that_never_ends_fails_the_delete(self) -> None:
        self.flags(unprovision_timeout=1, group='ironic_multi')
        self.deployed()
        self.ironic.steps = 10 ** 6
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                self.destroy)
        self.assertIn('did not finish within 1 seconds', str(exc))

    def test_delete_during_a_deploy_waits_for_ironic_to_allow_it(
            self) -> None:
        self.deployed()
        # Still deploying for two reads, then waiting for the agent.
        self.ironic.nodes[self.node].update(
            provision_state=states.DEPLOYING, _pending={
                'left': 2, 'final': {'provision_state': states.DEPLOYWAIT}})
        self.destroy()
        self.assertEqual([(self.node, 'deleted', {})],
                         self.ironic.calls_to('set_provision_state'))
        node = self.ironic.nodes[self.node]
        self.assertEqual((states.AVAILABLE, None),
                         (node['provision_state'], node['instance_uuid']))

    def test_delete_of_a_node_ironic_keeps_deploying_fails_and_says_why(
            self) -> None:
        self.flags(unprovision_timeout=1, group='ironic_multi')
        self.deployed()
        self.ironic.nodes[self.node]['provision_state'] = states.SERVICING
        exc = self.assertRaises(exception.InstanceTerminationFailure,
                                self.destroy)
        self.assertIn('no undeploy is accepted while it is servicing',
                      str(exc))
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))

    def test_outage_fails_the_delete_instead_of_pretending(self) -> None:
        self.deployed()
        self.ironic.fail('node_for_instance',
                         ironic.IronicUnavailable('refused'))
        self.assertRaises(exception.InstanceTerminationFailure, self.destroy)

    def test_refused_undeploy_of_a_node_still_deployed_fails(self) -> None:
        self.deployed()
        self.ironic.fail('set_provision_state', ironic.BadRequest('locked'))
        self.assertRaises(exception.InstanceTerminationFailure, self.destroy)


class RebuildRescueTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        self.node = self.ironic.add_node(
            provision_state=states.ACTIVE, power_state=states.POWER_ON)
        self.instance = self.fake_instance(
            self.node, task_state=task_states.REBUILDING, image_ref=IMAGE_2)
        self.ironic.nodes[self.node]['instance_uuid'] = self.instance.uuid
        self.image = objects.ImageMeta.from_dict({'id': IMAGE_2,
                                                  'properties': {}})

    def rebuild(self, **kwargs: Any) -> None:
        self.driver.rebuild(self.ctxt, self.instance, self.image, [], None,
                            {}, [], None, None,
                            network_info=self.network_info(), **kwargs)

    def test_rebuild(self) -> None:
        self.rebuild(preserve_ephemeral=True)
        self.assertEqual(task_states.REBUILD_SPAWNING,
                         self.instance.task_state)
        self.instance.save.assert_called_with(
            expected_task_state=[task_states.REBUILDING])
        info = self.ironic.nodes[self.node]['instance_info']
        self.assertEqual(IMAGE_2, info['image_source'])
        self.assertEqual('True', info['preserve_ephemeral'])
        self.assertEqual('rebuild',
                         self.ironic.calls_to('set_provision_state')[0][1])
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_rebuild_at_2_93_of_an_image_backed_server(self) -> None:
        # nova's API passes reimage_boot_volume=True on every rebuild from
        # microversion 2.93; a data volume does not make the root a volume.
        data = volume_bdm(self.ctxt, self.instance, 'data-1', None)
        self.driver.rebuild(
            self.ctxt, self.instance, self.image, [], None, {}, [data],
            None, None, network_info=self.network_info(),
            block_device_info=block_device_info(self.ctxt, self.instance,
                                                data),
            reimage_boot_volume=True)
        self.assertEqual('rebuild',
                         self.ironic.calls_to('set_provision_state')[0][1])
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_rebuild_of_a_volume_backed_server_is_refused(self) -> None:
        root = volume_bdm(self.ctxt, self.instance)
        for kwargs in ({'block_device_info': block_device_info(
                            self.ctxt, self.instance, root)},
                       {'bdms': [root]}):
            for reimage in (True, False):
                exc = self.assertRaises(
                    exception.InstanceFaultRollback, self.driver.rebuild,
                    self.ctxt, self.instance, self.image, [], None, {},
                    kwargs.get('bdms', []), None, None,
                    network_info=self.network_info(),
                    block_device_info=kwargs.get('block_device_info'),
                    reimage_boot_volume=reimage)
                # nova keeps the server as it was and reports the reason.
                self.assertIsInstance(exc.inner_exception,
                                      exception.NovaException)
                self.assertIn('boots from a volume',
                              str(exc.inner_exception))
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))
        self.assertEqual([], self.ironic.calls_to('patch'))

    def test_rebuild_refused_by_ironic(self) -> None:
        self.ironic.fail('set_provision_state',
                         ironic.IronicUnavailable('500 auto_lessee'))
        exc = self.assertRaises(exception.InstanceDeployFailure,
                                self.rebuild)
        self.assertIn('auto_lessee', str(exc))

    def test_rescue_and_unrescue(self) -> None:
        self.driver.rescue(self.ctxt, self.instance, None, self.image, 'pw',
                           None, None)
        self.assertEqual(states.RESCUE,
                         self.ironic.nodes[self.node]['provision_state'])
        self.assertEqual({'rescue_password': 'pw'},
                         self.ironic.calls_to('set_provision_state')[0][2])
        self.driver.unrescue(self.ctxt, self.instance)
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_rescue_failures(self) -> None:
        real = self.ironic.set_provision_state

        def rescue_fails(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            self.ironic.nodes[node]['_pending']['final'].update(
                provision_state=states.RESCUEFAIL, last_error='no ramdisk')

        self.ironic.set_provision_state = rescue_fails  # type: ignore
        exc = self.assertRaises(exception.InstanceRescueFailure,
                                self.driver.rescue, self.ctxt, self.instance,
                                None, self.image, 'pw', None, None)
        self.assertIn('no ramdisk', str(exc))

    def test_rescue_losing_ironic_for_good_is_a_rescue_failure(self) -> None:
        # One failed poll is polled past (test_failed_polls); an outage
        # that outlasts the wait fails it, saying why.
        self.flags(rescue_timeout=1, group='ironic_multi')
        real = self.ironic.set_provision_state

        def then_outage(node: str, target: str, **kw: Any) -> None:
            real(node, target, **kw)
            self.ironic.fail('get_node', ironic.IronicUnavailable('down'),
                             times=10 ** 4)

        self.ironic.set_provision_state = then_outage  # type: ignore
        exc = self.assertRaises(exception.InstanceRescueFailure,
                                self.driver.rescue, self.ctxt, self.instance,
                                None, self.image, 'pw', None, None)
        self.assertIn('down', str(exc))

    def stale(self) -> str:
        """The node now holds another instance: the record is stale."""
        self.ironic.nodes[self.node]['instance_uuid'] = 'other-instance'
        return 'Ironic node %s does not hold instance %s (it holds ' \
            'other-instance)' % (self.node, self.instance.uuid)

    def assert_node_untouched(self) -> None:
        self.assertEqual([], self.ironic.calls_to('patch'))
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))
        self.assertEqual('other-instance',
                         self.ironic.nodes[self.node]['instance_uuid'])
        self.assertEqual(states.ACTIVE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_rebuild_never_touches_a_node_that_holds_another_instance(
            self) -> None:
        why = self.stale()
        exc = self.assertRaises(exception.InstanceDeployFailure,
                                self.rebuild)
        self.assertIn(why, str(exc))
        self.assert_node_untouched()
        self.instance.save.assert_not_called()

    def test_rescue_never_touches_a_node_that_holds_another_instance(
            self) -> None:
        why = self.stale()
        exc = self.assertRaises(exception.InstanceRescueFailure,
                                self.driver.rescue, self.ctxt, self.instance,
                                None, self.image, 'pw', None, None)
        self.assertIn(why, str(exc))
        self.assert_node_untouched()

    def test_unrescue_never_touches_a_node_that_holds_another_instance(
            self) -> None:
        self.ironic.nodes[self.node]['provision_state'] = states.RESCUE
        why = self.stale()
        exc = self.assertRaises(exception.InstanceUnRescueFailure,
                                self.driver.unrescue, self.ctxt,
                                self.instance)
        self.assertIn(why, str(exc))
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))
        self.assertEqual(states.RESCUE,
                         self.ironic.nodes[self.node]['provision_state'])

    def test_actions_on_a_node_ironic_cannot_read_fail_naming_it(
            self) -> None:
        self.ironic.fail('get_node', ironic.IronicUnavailable('down'))
        exc = self.assertRaises(exception.InstanceRescueFailure,
                                self.driver.rescue, self.ctxt, self.instance,
                                None, self.image, 'pw', None, None)
        self.assertIn('cannot read Ironic node %s of instance %s: down'
                      % (self.node, self.instance.uuid), str(exc))
        del self.ironic.nodes[self.node]
        self.assertRaises(exception.InstanceDeployFailure, self.rebuild)
        self.assertEqual([], self.ironic.calls_to('set_provision_state'))

    def test_unrescue_refused(self) -> None:
        self.assertRaises(exception.InstanceUnRescueFailure,
                          self.driver.unrescue, self.ctxt, self.instance)
