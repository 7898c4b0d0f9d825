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
"""Power actions on an instance's node, each waited for until Ironic is done.

The wait is bounded only by ``[ironic_multi] power_timeout`` when it is set
(by default it is not: Ironic's own power timeouts end a stuck change).
"""

from __future__ import annotations

from typing import Any

from nova import exception
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.actions import provision
from nova_ironic_multi.actions import waits
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)


class Power:

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 provisioner: provision.Provisioner) -> None:
        self._conf = conf
        self._ironic = client
        self._provisioner = provisioner

    def _settle(self, node_uuid: str, what: str,
                timeout: float | None = None) -> nodeinfo.NodeInfo:
        """Wait until Ironic has no power change in progress."""
        opts = self._conf.ironic_multi
        node: nodeinfo.NodeInfo = waits.until(
            lambda: self._ironic.get_node(node_uuid),
            lambda n: n.target_power_state is None,
            timeout=timeout or opts.power_timeout or None,
            interval=opts.poll_interval, what=what)
        return node

    def _request(self, node_uuid: str, target: str, what: str,
                 soft: bool = False,
                 timeout: int | None = None) -> nodeinfo.NodeInfo:
        self._ironic.set_power_state(node_uuid, target, soft=soft,
                                     timeout=timeout)
        # A soft power off with nova's timeout: Ironic gives up on it after
        # ``timeout``; a bound of ours, if set, comes on top.
        bound = self._conf.ironic_multi.power_timeout
        wait_for = timeout + bound if timeout and bound else None
        node = self._settle(node_uuid, '%s of node %s' % (what, node_uuid),
                            wait_for)
        # nova's power sync reads the cache: it must see the change now,
        # not after the next period's listing.
        self._provisioner.remember(node)
        return node

    def reboot(self, instance: Any, soft: bool) -> None:
        """Reboot; a soft reboot Ironic cannot do or finish becomes hard.

        :raises nova.exception.InstanceRebootFailure:
        """
        node = self._provisioner.instance_node(instance)
        if soft:
            try:
                self._request(node.uuid, 'reboot', 'soft reboot', soft=True)
                LOG.info('Soft rebooted Ironic node %s', node.uuid,
                         instance=instance)
                return
            except (ironic.BadRequest, waits.Timeout) as e:
                LOG.info('Soft reboot of Ironic node %(node)s not possible '
                         '(%(error)s); rebooting hard',
                         {'node': node.uuid, 'error': e}, instance=instance)
            except ironic.IronicError as e:
                raise exception.InstanceRebootFailure(reason=str(e)) from e
        try:
            self._request(node.uuid, 'reboot', 'reboot')
        except (ironic.IronicError, waits.Timeout) as e:
            raise exception.InstanceRebootFailure(reason=str(e)) from e
        LOG.info('Rebooted Ironic node %s', node.uuid, instance=instance)

    def power_off(self, instance: Any, timeout: int = 0) -> None:
        """Power off: with a timeout, softly first, then hard if needed.

        :raises nova.exception.InstancePowerOffFailure:
        """
        node = self._provisioner.instance_node(instance)
        if timeout:
            try:
                result = self._request(node.uuid, 'off', 'soft power off',
                                       soft=True, timeout=timeout)
                if result.power_state == states.POWER_OFF:
                    LOG.info('Soft powered off Ironic node %s', node.uuid,
                             instance=instance)
                    return
                reason = result.last_error or 'still %s' % result.power_state
            except (ironic.IronicError, waits.Timeout) as e:
                reason = str(e)
            LOG.info('Soft power off of Ironic node %(node)s within %(t)ds '
                     'failed (%(reason)s); powering off hard',
                     {'node': node.uuid, 't': timeout, 'reason': reason},
                     instance=instance)
        self._hard(node.uuid, 'off', states.POWER_OFF,
                   exception.InstancePowerOffFailure, instance)

    def power_on(self, instance: Any) -> None:
        """:raises nova.exception.InstancePowerOnFailure:"""
        node = self._provisioner.instance_node(instance)
        self._hard(node.uuid, 'on', states.POWER_ON,
                   exception.InstancePowerOnFailure, instance)

    def _hard(self, node_uuid: str, target: str, goal: str, error: type,
              instance: Any) -> None:
        """Power ``target`` and check the node really ends up in ``goal``."""
        what = 'power %s' % target
        try:
            result = self._request(node_uuid, target, what)
        except (ironic.IronicError, waits.Timeout) as e:
            raise error(reason=str(e)) from e
        if result.power_state != goal:
            raise error(reason='Ironic node %s is %s after %s: %s'
                        % (node_uuid, result.power_state, what,
                           result.last_error))
        LOG.info('Ironic node %(node)s: %(what)s done',
                 {'node': node_uuid, 'what': what}, instance=instance)

    def crash_dump(self, instance: Any) -> None:
        """Inject an NMI.

        :raises nova.exception.TriggerCrashDumpNotSupported: the node's
            hardware type cannot.
        """
        node = self._provisioner.instance_node(instance)
        try:
            self._ironic.inject_nmi(node.uuid)
        except ironic.BadRequest as e:
            raise exception.TriggerCrashDumpNotSupported() from e
        except ironic.IronicError as e:
            raise exception.NovaException(
                'Injecting an NMI into Ironic node %s failed: %s'
                % (node.uuid, e)) from e
        LOG.info('Injected an NMI into Ironic node %s', node.uuid,
                 instance=instance)
