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
"""Tearing an instance's node down, the way Ironic 39 allows.

Tear-down never fights Ironic: a deployed node is only asked to undeploy
(Ironic's tear-down detaches VIFs and clears the node itself), a hold is
aborted first, a node a conductor works on is waited for (never one no
conductor will move on: :mod:`stalls`), its volume targets are removed at
once if it already rests, else by a later period (:mod:`leftovers`), and
nothing is asked of a node Ironic is cleaning (nova bug 2019977).
"""

from __future__ import annotations

from typing import Any

from nova import exception
from oslo_log import log as logging

from nova_ironic_multi.actions import followups
from nova_ironic_multi.actions import held
from nova_ironic_multi.actions import vifs
from nova_ironic_multi.actions import volumes
from nova_ironic_multi.actions import waits
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)


def _deleted(instance: Any) -> bool:
    """Whether nova had deleted the instance already (without loading)."""
    is_set = getattr(instance, 'obj_attr_is_set', None)
    return bool(is_set is not None and is_set('deleted') and
                instance.deleted)


class Teardown(held.Held):
    """Undoing what an instance has on its node; idempotent."""

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
        if _deleted(instance):
            # nova's reaper of running deleted instances: an orphan.
            metrics.ORPHANS_REAPED.inc()
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
