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
"""Reserving, deploying, rebuilding and rescuing nodes.

Every wait is bounded (``[ironic_multi] poll_interval`` and the per-action
timeouts). A deploy that fails for any reason tears down what it did and
releases the node before the error reaches nova, with the reason in the
message (the tear-down: :mod:`teardown`).
"""

from __future__ import annotations

from typing import Any

from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from oslo_log import log as logging
from oslo_utils import excutils

from nova_ironic_multi.actions import configdrive
from nova_ironic_multi.actions import followups
from nova_ironic_multi.actions import held
from nova_ironic_multi.actions import instance_info
from nova_ironic_multi.actions import teardown
from nova_ironic_multi.actions import volumes
from nova_ironic_multi.actions import waits
from nova_ironic_multi.division import ownership
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

# The name callers use, from where it lives.
node_uuid_of = held.node_uuid_of

#: Interfaces that must validate before a deploy.
REQUIRED_INTERFACES = ('deploy', 'power', 'storage')


def deploy_failure(reason: str) -> Exception:
    error: Exception = exception.InstanceDeployFailure(reason=reason)
    return error


class Provisioner(teardown.Teardown):
    """Reserving, deploying, rebuilding and rescuing nodes."""

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
        metrics.NODES_LEAKED.inc()
        self._later.put(followups.AbandonedDeploy(node_uuid, instance.uuid))

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
