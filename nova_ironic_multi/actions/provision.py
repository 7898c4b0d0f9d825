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
"""Reserving, deploying, tearing down, rebuilding and rescuing nodes.

Every wait is bounded (``[ironic_multi] poll_interval`` and the per-action
timeouts). A deploy that fails for any reason tears down what it did and
releases the node before the error reaches nova, with the reason in the
message. Tear-down never fights Ironic: a deployed node is only asked to
undeploy (Ironic's tear-down detaches VIFs and clears the node itself), its
volume targets are removed at once if it already rests, else by a later
period (:mod:`leftovers`), and nothing is asked of a node Ironic is
cleaning (nova bug 2019977).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import excutils

from nova_ironic_multi.actions import configdrive
from nova_ironic_multi.actions import followups
from nova_ironic_multi.actions import instance_info
from nova_ironic_multi.actions import stalls
from nova_ironic_multi.actions import vifs
from nova_ironic_multi.actions import volumes
from nova_ironic_multi.actions import waits
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi.division import ownership
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)

#: Interfaces that must validate before a deploy.
REQUIRED_INTERFACES = ('deploy', 'power', 'storage')


def node_uuid_of(instance: Any) -> str:
    node_uuid: str | None = instance.get('node')
    if not node_uuid:
        raise exception.NovaException(
            'Ironic node uuid not supplied to driver for instance %s.'
            % instance.uuid)
    return node_uuid


def deploy_failure(reason: str) -> Exception:
    error: Exception = exception.InstanceDeployFailure(reason=reason)
    return error


class Provisioner:

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 nodes: followups.NodeCache,
                 later: followups.Followups) -> None:
        self._conf = conf
        self._ironic = client
        self._nodes = nodes
        self._later = later
        self._stalls = stalls.Stalls()

    def _wait(self, what: str, timeout_option: str, read: Any,
              done: Any) -> Any:
        """Poll until ``done``, bounded by ``[ironic_multi] <option>``.

        0 means no bound: the wait lasts as long as Ironic works on it. The
        tear-down wait is never shorter than nova's in-tree driver's.
        """
        opts = self._conf.ironic_multi
        timeout: float | None = opts[timeout_option]
        if timeout_option == 'unprovision_timeout':
            timeout = nova_options.unprovision_timeout(self._conf)
        return waits.until(read, done, timeout=timeout,
                           interval=opts.poll_interval, what=what)

    def _remember(self, node_uuid: str) -> None:
        """Refresh the cached copy of a node after changing it."""
        try:
            self.remember(self._ironic.get_node(node_uuid))
        except ironic.IronicError:
            LOG.debug('Cannot re-read node %s', node_uuid, exc_info=True)

    def remember(self, node: nodeinfo.NodeInfo) -> None:
        """Cache a node just read from Ironic after changing it."""
        self._nodes.update(node)

    def find_instance_node(self,
                           instance: Any) -> nodeinfo.NodeInfo | None:
        """The node an instance is on, fresh from Ironic, or None."""
        try:
            return self._ironic.node_for_instance(instance.uuid)
        except ironic.IronicError as e:
            raise exception.NovaException(
                'Cannot find the Ironic node of instance %s: %s'
                % (instance.uuid, e)) from e

    def held_node(self, instance: Any, error: Callable[[str], Exception],
                  or_free: bool = False) -> nodeinfo.NodeInfo:
        """``instance.node``, fresh from Ironic, if it holds the instance.

        Every action on ``instance.node`` checks this first: a stale record
        (the node torn down and deployed again meanwhile) must never act on
        whatever now occupies the node.

        :param error: makes the nova exception to raise, from a reason that
            names the instance and the node.
        :param or_free: a node that holds no instance will do too (for
            undoing what a failed build left behind).
        """
        node_uuid = node_uuid_of(instance)
        try:
            node = self._ironic.get_node(node_uuid)
        except ironic.IronicError as e:
            raise error('cannot read Ironic node %s of instance %s: %s'
                        % (node_uuid, instance.uuid, e)) from e
        holder = node.instance_uuid
        if holder != instance.uuid and not (or_free and holder is None):
            raise error('Ironic node %s does not hold instance %s (it holds '
                        '%s); refusing to act on it'
                        % (node_uuid, instance.uuid, holder or 'none'))
        return node

    def instance_node(self, instance: Any) -> nodeinfo.NodeInfo:
        """The node an instance is on, fresh from Ironic.

        :raises nova.exception.InstanceNotFound: no node holds it.
        """
        node = self.find_instance_node(instance)
        if node is None:
            raise exception.InstanceNotFound(instance_id=instance.uuid)
        return node

    # Reservation -----------------------------------------------------------

    def reserve(self, instance: Any) -> None:
        """Claim the scheduled node for ``instance`` (prepare_for_spawn).

        :raises nova.exception.ComputeResourcesUnavailable: the node is
            gone, used, unavailable, or another instance reserved it first;
            nova reschedules.
        """
        node_uuid = node_uuid_of(instance)
        node = self._read(node_uuid, exception.ComputeResourcesUnavailable)
        if node.instance_uuid not in (None, instance.uuid):
            raise exception.ComputeResourcesUnavailable(
                reason='Ironic node %s is used by instance %s'
                % (node_uuid, node.instance_uuid))
        if (node.instance_uuid is not None and
                node.provision_state not in states.UNPROVISIONED):
            # A deploy of this instance given up on earlier, not undone
            # yet: a period undeploys the node (see :mod:`abandoned`).
            raise exception.ComputeResourcesUnavailable(
                reason='Ironic node %s still holds instance %s from an '
                'earlier deploy (provision state %s)'
                % (node_uuid, node.instance_uuid, node.provision_state))
        scope = self._nodes.current_partition().scope
        if node.instance_uuid is None and not ownership.in_scope(node,
                                                                 scope):
            # nova still schedules onto nodes this service managed before a
            # reload moved it elsewhere; never deploy outside the scope.
            raise exception.ComputeResourcesUnavailable(
                reason='Ironic node %s (conductor group %r, shard %r) is '
                'outside the scope of this service (%s)'
                % (node_uuid, node.conductor_group, node.shard,
                   scope.describe()))
        if node.instance_uuid is None and node.unavailable:
            raise exception.ComputeResourcesUnavailable(
                reason='Ironic node %s is not available (provision state '
                '%s, power state %s, maintenance %s)'
                % (node_uuid, node.provision_state, node.power_state,
                   node.maintenance))
        try:
            self._ironic.reserve(node_uuid, instance.uuid)
        except ironic.Conflict as e:
            # The answer, not a glitch: another instance got there first.
            raise exception.ComputeResourcesUnavailable(
                reason='Ironic node %s was reserved by another instance: %s'
                % (node_uuid, e)) from e
        except ironic.IronicError as e:
            # Whatever stops this node (e.g. no conductor for its group),
            # another node may do: let nova reschedule.
            raise exception.ComputeResourcesUnavailable(
                reason='failed to reserve Ironic node %s: %s'
                % (node_uuid, e)) from e
        LOG.info('Reserved Ironic node %(node)s', {'node': node_uuid},
                 instance=instance)
        # Its node may be outside what this host lists (divide = shards).
        self._later.put(followups.Reserved(instance.uuid))

    # Deploy ------------------------------------------------------------------

    def spawn(self, context: Any, instance: Any, image_meta: Any,
              injected_files: Any, admin_password: str | None,
              network_info: Any, block_device_info: Any,
              metadata: Any) -> None:
        node = self.held_node(instance, deploy_failure)
        node_uuid = node.uuid
        try:
            self._deploy(context, instance, node, image_meta, injected_files,
                         admin_password, network_info, block_device_info,
                         metadata)
        except Exception as e:
            with excutils.save_and_reraise_exception():
                LOG.error('Deploy on Ironic node %(node)s failed, undoing '
                          'it: %(error)s', {'node': node_uuid, 'error': e},
                          instance=instance)
                try:
                    # (Refreshes the cached node when it succeeds.)
                    self.teardown(instance, network_info, block_device_info)
                except Exception:
                    LOG.exception('Undoing the failed deploy on node %s '
                                  'failed too', node_uuid, instance=instance)
                    self._abandon(instance, node_uuid)
                    self._remember(node_uuid)
        self._remember(node_uuid)
        LOG.info('Deployed on Ironic node %(node)s', {'node': node_uuid},
                 instance=instance)

    def _abandon(self, instance: Any, node_uuid: str) -> None:
        """A failed deploy could not be undone: say so, let periods undo it.

        nova reschedules the instance meanwhile, but Ironic keeps it on this
        node (one node per instance) until the node is undone.
        """
        try:
            node: nodeinfo.NodeInfo | None = self._ironic.get_node(node_uuid)
        except ironic.NodeNotFound:
            return
        except ironic.IronicError:
            node = None         # unknown: the period reads it again
        if node is not None and (node.instance_uuid != instance.uuid or
                                 node.provision_state in
                                 states.TEARING_DOWN):
            return
        LOG.error('LEAKED: Ironic node %(node)s still holds instance '
                  '%(inst)s (provision state %(state)s) after its deploy '
                  'was given up, and nova reschedules the instance, which '
                  'Ironic lets no other node take until this one is '
                  'undone. This host undeploys the node in a later period '
                  'once Ironic allows it; or undeploy it in Ironic.',
                  {'node': node_uuid, 'inst': instance.uuid,
                   'state': node.provision_state if node else 'unknown'},
                  instance=instance)
        self._later.put(followups.AbandonedDeploy(node_uuid, instance.uuid))

    def _read(self, node_uuid: str, error: type) -> nodeinfo.NodeInfo:
        try:
            return self._ironic.get_node(node_uuid)
        except ironic.IronicError as e:
            raise error(reason='cannot read Ironic node %s: %s'
                        % (node_uuid, e)) from e

    def _deploy(self, context: Any, instance: Any, node: nodeinfo.NodeInfo,
                image_meta: Any, injected_files: Any,
                admin_password: str | None, network_info: Any,
                block_device_info: Any, metadata: Any) -> None:
        flavor = instance.flavor
        bfv = volumes.boots_from_volume(block_device_info)
        patch = instance_info.deploy_patch(
            node, instance, image_meta, flavor, metadata,
            boot_from_volume=bfv,
            ephemeral_format=self._conf.default_ephemeral_format)
        self._call(instance, 'writing instance_info', self._ironic.patch,
                   node.uuid, patch)
        volumes.remove_stale_targets(self._ironic, node.uuid)
        volumes.add_targets(self._ironic, node.uuid, block_device_info)
        if flavor.ephemeral_gb:
            # cloud-init reads the default ephemeral device from metadata.
            instance.default_ephemeral_device = '/dev/sda1'
            instance.save()
        self._validate(node.uuid)
        drive = self._config_drive(instance, node.uuid, network_info,
                                   admin_password, injected_files)
        self._call(instance, 'requesting the deploy',
                   self._ironic.set_provision_state, node.uuid,
                   states.ACTIVE, configdrive=drive)
        self._wait_active(instance, 'deploy')

    def _config_drive(self, instance: Any, node_uuid: str,
                      network_info: Any, admin_password: str | None,
                      injected_files: Any) -> bytes | None:
        """The instance's config drive, if it needs one.

        :raises nova.exception.InstanceDeployFailure: it cannot be built.
        """
        if not configdrive.required(instance):
            return None
        try:
            drive = configdrive.build(self._ironic, instance, node_uuid,
                                      network_info, admin_password,
                                      injected_files)
        except Exception as e:
            raise exception.InstanceDeployFailure(
                reason='failed to build the config drive for node %s: %s'
                % (node_uuid, e)) from e
        LOG.info('Config drive for node %s built', node_uuid,
                 instance=instance)
        return drive

    @staticmethod
    def _call(instance: Any, what: str, fn: Any, node_uuid: str,
              *args: Any, **kwargs: Any) -> None:
        try:
            fn(node_uuid, *args, **kwargs)
        except ironic.IronicError as e:
            if 'InvalidImage' in str(e):
                # Rescheduling cannot fix a bad image.
                raise exception.BuildAbortException(
                    instance_uuid=instance.uuid, reason=str(e)) from e
            raise exception.InstanceDeployFailure(
                reason='%s on Ironic node %s failed: %s'
                % (what, node_uuid, e)) from e

    def _validate(self, node_uuid: str) -> None:
        try:
            result = self._ironic.validate(node_uuid)
        except ironic.IronicError as e:
            raise exception.InstanceDeployFailure(
                reason='cannot validate Ironic node %s: %s' % (node_uuid, e)
            ) from e
        failed = {name: result.get(name, {}).get('reason') or 'not valid'
                  for name in REQUIRED_INTERFACES
                  if not result.get(name, {}).get('result')}
        if failed:
            raise exception.ValidationError(detail=(
                'Ironic node %s failed to validate: %s' % (
                    node_uuid, ', '.join('%s: %s' % kv
                                         for kv in sorted(failed.items())))))

    def _wait_active(self, instance: Any, what: str) -> None:
        """Wait for the instance's node to become ``active``."""

        def read() -> nodeinfo.NodeInfo:
            instance.refresh()
            if (instance.task_state != task_states.REBUILD_SPAWNING and
                    (instance.task_state == task_states.DELETING or
                     instance.vm_state in (vm_states.ERROR,
                                           vm_states.DELETED))):
                raise exception.InstanceDeployFailure(
                    reason='instance %s was deleted or failed while its %s '
                    'was in progress' % (instance.uuid, what))
            # Ironic's errors reach the wait: a failed poll is not an
            # answer, and must not undo a deploy that is going fine.
            node = self._ironic.node_for_instance(instance.uuid)
            if node is None:
                raise exception.InstanceNotFound(instance_id=instance.uuid)
            if self._stalls.suspect(node):
                # (Whether a conductor serves it: a read by UUID says.)
                node = self._ironic.get_node(node.uuid)
            return node

        def done(node: nodeinfo.NodeInfo) -> bool:
            if node.provision_state == states.ACTIVE:
                return True
            stalled = self._stalls.reason(node)
            if stalled is not None:
                raise exception.InstanceDeployFailure(
                    reason='the %s of instance %s on Ironic node %s cannot '
                    'finish: the node is %s and %s'
                    % (what, instance.uuid, node.uuid, node.provision_state,
                       stalled))
            if node.provision_state == states.DEPLOYFAIL:
                raise exception.InstanceDeployFailure(
                    reason='Ironic failed to %s node %s: %s'
                    % (what, node.uuid, node.last_error))
            if node.target_provision_state in (states.DELETED,
                                               states.AVAILABLE):
                raise exception.InstanceNotFound(instance_id=instance.uuid)
            return False

        try:
            self._wait('the %s of instance %s' % (what, instance.uuid),
                       'deploy_timeout', read, done)
        except waits.Timeout as e:
            raise exception.InstanceDeployFailure(reason=str(e)) from e
        except ironic.IronicError as e:
            raise exception.InstanceDeployFailure(
                reason='cannot follow the %s of instance %s: %s'
                % (what, instance.uuid, e)) from e

    # Tear-down ----------------------------------------------------------

    def teardown(self, instance: Any, network_info: Any,
                 block_device_info: Any = None) -> None:
        """Undo everything of ``instance`` on its node; idempotent.

        A deployed node is asked to undeploy and waited for until Ironic's
        tear-down is done with it (cleaning counts as done, whatever the
        root disk); Ironic's own tear-down detaches VIFs and clears the
        node. The volume targets of the instance's volumes
        (``block_device_info``) are removed then if the node already
        rests, else once its cleaning is over, by a resource-tracker period
        (:mod:`leftovers`): the delete never waits for cleaning. A node
        that was only reserved gets its volume targets, VIFs and
        reservation removed here.

        :raises nova.exception.InstanceTerminationFailure: Ironic did not
            finish within ``unprovision_timeout`` or refused.
        """
        try:
            node = self._ironic.node_for_instance(instance.uuid)
        except ironic.IronicError as e:
            raise exception.InstanceTerminationFailure(
                reason='cannot find the Ironic node of instance %s: %s'
                % (instance.uuid, e)) from e
        if node is None:
            LOG.info('No Ironic node holds the instance; nothing to undo',
                     instance=instance)
            return
        state = node.provision_state
        if state in states.TEARING_DOWN:
            LOG.info('Ironic is already tearing node %(node)s down '
                     '(%(state)s); waiting', {'node': node.uuid,
                                              'state': state},
                     instance=instance)
            self._wait_unprovisioned(instance, node.uuid)
            self._remove_volume_targets(instance, node.uuid,
                                        block_device_info)
        elif (state in states.DEPLOYED_LIKE or
              state not in states.KNOWN_PROVISION_STATES):
            self._undeploy(instance, node)
            self._remove_volume_targets(instance, node.uuid,
                                        block_device_info)
        else:
            self._unreserve(instance, node, network_info)
        self._remember(node.uuid)
        LOG.info('Ironic node %(node)s no longer holds the instance',
                 {'node': node.uuid}, instance=instance)

    def _undeploy(self, instance: Any, node: nodeinfo.NodeInfo) -> None:
        node = self._undeployable(node)
        if node.provision_state in states.TEARING_DOWN:
            self._wait_unprovisioned(instance, node.uuid)
            return
        try:
            self._ironic.set_provision_state(node.uuid, states.DELETED)
        except ironic.BadRequest as e:
            # Possibly already on its way down; only fail if it is not.
            current = self._read(node.uuid,
                                 exception.InstanceTerminationFailure)
            if (current.provision_state not in states.TEARING_DOWN and
                    current.provision_state not in states.UNPROVISIONED):
                raise exception.InstanceTerminationFailure(
                    reason='Ironic refused to undeploy node %s: %s'
                    % (node.uuid, e)) from e
        except ironic.IronicError as e:
            raise exception.InstanceTerminationFailure(
                reason='cannot undeploy Ironic node %s: %s' % (node.uuid, e)
            ) from e
        self._wait_unprovisioned(instance, node.uuid)

    def _undeployable(self, node: nodeinfo.NodeInfo) -> nodeinfo.NodeInfo:
        """The node, once in a state Ironic 39 accepts ``deleted`` from.

        A hold is aborted first (to deploy failed, or through service
        failed back to active); a state a conductor is working in
        (deploying, rescuing, unrescuing, servicing) accepts no request
        until Ironic leaves it by itself: that is waited for, up to
        ``unprovision_timeout``, unless no conductor will move the node on
        (:mod:`stalls`): waiting would only hold nova's build or delete
        (and then its clean-up, a second wait) for nothing.

        :raises nova.exception.InstanceTerminationFailure: the node did not
            become undeployable in time, is stalled, or Ironic refused the
            abort.
        """
        if (node.provision_state not in states.ABORT_FIRST and
                node.provision_state not in states.CONDUCTOR_BUSY):
            return node
        self._refuse_stalled(node)
        if node.provision_state in states.ABORT_FIRST:
            try:
                self._ironic.set_provision_state(node.uuid, 'abort')
            except ironic.IronicError as e:
                raise exception.InstanceTerminationFailure(
                    reason='cannot abort the %s of Ironic node %s before '
                    'undeploying it: %s' % (node.provision_state, node.uuid,
                                            e)) from e
            LOG.info('Aborted the %(state)s of Ironic node %(node)s to '
                     'undeploy it', {'state': node.provision_state,
                                     'node': node.uuid})

        def done(current: nodeinfo.NodeInfo) -> bool:
            self._refuse_stalled(current)
            return (current.provision_state not in states.ABORT_FIRST and
                    current.provision_state not in states.CONDUCTOR_BUSY)

        try:
            settled: nodeinfo.NodeInfo = self._wait(
                'Ironic to let node %s be undeployed (no undeploy is '
                'accepted while it is %s)' % (node.uuid,
                                              node.provision_state),
                'unprovision_timeout',
                lambda: self._ironic.get_node(node.uuid), done)
        except waits.Timeout as e:
            raise exception.InstanceTerminationFailure(reason=str(e)) from e
        except ironic.IronicError as e:
            raise exception.InstanceTerminationFailure(
                reason='cannot follow Ironic node %s: %s' % (node.uuid, e)
            ) from e
        return settled

    def _refuse_stalled(self, node: nodeinfo.NodeInfo) -> None:
        """Fail at once if no conductor will move ``node`` on.

        :raises nova.exception.InstanceTerminationFailure: the node is in a
            state only a conductor leaves, and none will (:mod:`stalls`).
        """
        why = self._stalls.reason(node)
        if why is not None:
            raise exception.InstanceTerminationFailure(
                reason='Ironic node %s is %s and %s: Ironic accepts no '
                'undeploy until a conductor of its group moves it on '
                '(start or restart the ironic-conductor of that group: it '
                'fails what it cannot resume), then delete the instance '
                'again' % (node.uuid, node.provision_state, why))

    def _wait_unprovisioned(self, instance: Any, node_uuid: str) -> None:
        def done(node: nodeinfo.NodeInfo) -> bool:
            return node.provision_state in states.UNPROVISIONED

        try:
            node = self._wait('the tear-down of node %s' % node_uuid,
                              'unprovision_timeout',
                              lambda: self._ironic.get_node(node_uuid), done)
        except waits.Timeout as e:
            raise exception.InstanceTerminationFailure(reason=str(e)) from e
        except ironic.NodeNotFound:
            return
        except ironic.IronicError as e:
            raise exception.InstanceTerminationFailure(
                reason='cannot follow the tear-down of node %s: %s'
                % (node_uuid, e)) from e
        if (node.instance_uuid == instance.uuid and
                node.provision_state in (states.AVAILABLE,
                                         states.MANAGEABLE)):
            # Ironic normally clears this itself; never while cleaning.
            try:
                self._ironic.release(node_uuid)
            except ironic.IronicError as e:
                raise exception.InstanceTerminationFailure(
                    reason='cannot release Ironic node %s: %s'
                    % (node_uuid, e)) from e

    def _remove_volume_targets(self, instance: Any, node_uuid: str,
                               block_device_info: Any) -> None:
        """Remove the instance's volume targets if the node rests already.

        Ironic 39 removes volume targets only through its API, never in its
        tear-down, and not while it holds the node: nothing is asked of a
        node Ironic is cleaning (nova bug 2019977). The delete does not wait
        for cleaning (nova holds the instance's lock, an RPC worker and the
        Cinder attachment meanwhile): a node still busy is left to the
        periods (:mod:`leftovers`), and to its next deploy, which removes
        whatever it finds first. Failures are logged: the delete is done.
        """
        volume_ids = volumes.volume_ids(block_device_info)
        if not volume_ids:
            return
        error: Any = None
        try:
            node = self._ironic.get_node(node_uuid)
            if node.instance_uuid not in (None, instance.uuid):
                # The next instance's deploy removes them first.
                return
            if not nodeinfo.idle(node):
                LOG.info('Ironic node %(node)s is %(state)s: the volume '
                         'targets of the instance are removed once Ironic is '
                         'done with it', {'node': node_uuid,
                                         'state': node.provision_state},
                         instance=instance)
                self._later.put(followups.TargetsLeft(node_uuid))
                return
            if not volumes.has_targets(self._ironic, node_uuid, volume_ids):
                return
            if not volumes.remove_targets(self._ironic, node_uuid,
                                          volume_ids):
                error = 'Ironic refused to remove some (logged above)'
        except ironic.IronicError as e:
            error = e
        if error is None:
            LOG.info('Volume targets of the instance removed from node %s',
                     node_uuid, instance=instance)
        else:
            LOG.warning('Volume targets of the instance stay on node '
                        '%(node)s for now (a later period or its next deploy '
                        'removes them): %(error)s',
                        {'node': node_uuid, 'error': error},
                        instance=instance)
            self._later.put(followups.TargetsLeft(node_uuid))

    def _unreserve(self, instance: Any, node: nodeinfo.NodeInfo,
                   network_info: Any) -> None:
        try:
            volumes.remove_targets(self._ironic, node.uuid)
            vifs.unplug(self._ironic, node.uuid, network_info)
            self._ironic.release(node.uuid)
        except (ironic.IronicError,
                exception.VirtualInterfaceUnplugException) as e:
            raise exception.InstanceTerminationFailure(
                reason='cannot release Ironic node %s: %s' % (node.uuid, e)
            ) from e

    # Rebuild and rescue --------------------------------------------------

    def rebuild(self, context: Any, instance: Any, image_meta: Any,
                injected_files: Any, admin_password: str | None,
                network_info: Any, preserve_ephemeral: bool,
                metadata: Any) -> None:
        node = self.held_node(instance, deploy_failure)
        node_uuid = node.uuid
        instance.task_state = task_states.REBUILD_SPAWNING
        instance.save(expected_task_state=[task_states.REBUILDING])
        patch = instance_info.deploy_patch(
            node, instance, image_meta, instance.flavor, metadata,
            preserve_ephemeral=preserve_ephemeral,
            ephemeral_format=self._conf.default_ephemeral_format)
        self._call(instance, 'writing instance_info', self._ironic.patch,
                   node_uuid, patch)
        drive = self._config_drive(instance, node_uuid, network_info,
                                   admin_password, injected_files)
        self._call(instance, 'requesting the rebuild',
                   self._ironic.set_provision_state, node_uuid,
                   states.REBUILD, configdrive=drive)
        # Rebuild ends in "active" like a deploy.
        self._wait_active(instance, 'rebuild')
        self._remember(node_uuid)
        LOG.info('Rebuilt on Ironic node %s', node_uuid, instance=instance)

    def rescue(self, instance: Any, rescue_password: str) -> None:
        self._rescue_action(instance, 'rescue', states.RESCUE,
                            states.RESCUEFAIL,
                            exception.InstanceRescueFailure,
                            rescue_password=rescue_password)

    def unrescue(self, instance: Any) -> None:
        self._rescue_action(instance, 'unrescue', states.ACTIVE,
                            states.UNRESCUEFAIL,
                            exception.InstanceUnRescueFailure)

    def _rescue_action(self, instance: Any, verb: str, goal: str,
                       failed: str, error: type, **kwargs: Any) -> None:
        node_uuid = self.held_node(
            instance, lambda reason: error(reason=reason)).uuid
        try:
            self._ironic.set_provision_state(node_uuid, verb, **kwargs)
        except ironic.IronicError as e:
            raise error(reason='Ironic refused to %s node %s: %s'
                        % (verb, node_uuid, e)) from e

        def done(node: nodeinfo.NodeInfo) -> bool:
            if node.provision_state == failed:
                raise error(reason='Ironic failed to %s node %s: %s'
                            % (verb, node_uuid, node.last_error))
            return node.provision_state == goal

        try:
            self._wait('the %s of node %s' % (verb, node_uuid),
                       'rescue_timeout',
                       lambda: self._ironic.get_node(node_uuid), done)
        except waits.Timeout as e:
            raise error(reason=str(e)) from e
        except ironic.IronicError as e:
            raise error(reason='cannot follow the %s of node %s: %s'
                        % (verb, node_uuid, e)) from e
        self._remember(node_uuid)
        LOG.info('%(verb)s of Ironic node %(node)s done',
                 {'verb': verb.capitalize(), 'node': node_uuid},
                 instance=instance)
