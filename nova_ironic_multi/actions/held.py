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
"""A node this host holds for an instance, and what every action needs.

Every action on ``instance.node`` reads the node fresh from Ironic first
and checks that it holds the instance (:meth:`Held.held_node`): a stale
record must never act on whatever occupies the node now. The waits are
bounded as ``[ironic_multi]`` says (:mod:`waits`); a node changed here is
read again into the period's cache (:meth:`Held.remember`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nova import exception
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.actions import followups
from nova_ironic_multi.actions import stalls
from nova_ironic_multi.actions import waits
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo

LOG = logging.getLogger(__name__)


def node_uuid_of(instance: Any) -> str:
    node_uuid: str | None = instance.get('node')
    if not node_uuid:
        raise exception.NovaException(
            'Ironic node uuid not supplied to driver for instance %s.'
            % instance.uuid)
    return node_uuid


class Held:
    """Finding, reading and waiting for the nodes of instances."""

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

    def _read(self, node_uuid: str, error: type) -> nodeinfo.NodeInfo:
        try:
            return self._ironic.get_node(node_uuid)
        except ironic.IronicError as e:
            raise error(reason='cannot read Ironic node %s: %s'
                        % (node_uuid, e)) from e
