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
"""VNC and serial consoles of bare-metal instances, through Ironic."""

from __future__ import annotations

from typing import Any
from urllib import parse

from nova.console import type as console_type
from nova import exception
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.actions import provision
from nova_ironic_multi.actions import waits
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi import ironic

LOG = logging.getLogger(__name__)


class Unavailable(Exception):
    """The console cannot be had; the message says why."""


class Consoles:

    def __init__(self, conf: cfg.ConfigOpts, client: ironic.Ironic,
                 provisioner: provision.Provisioner) -> None:
        self._conf = conf
        self._ironic = client
        self._provisioner = provisioner

    def _get(self, node_uuid: str) -> dict[str, Any]:
        try:
            return self._ironic.get_console(node_uuid)
        except ironic.IronicError as e:
            raise Unavailable('cannot read the console of node %s: %s'
                              % (node_uuid, e)) from e

    def _set(self, node_uuid: str, enabled: bool,
             kind: str) -> dict[str, Any]:
        """Enable or disable the console and wait for Ironic to.

        The wait is bounded by nova's ``[ironic]
        <kind>_console_state_timeout`` (0: no bound).
        """
        try:
            self._ironic.set_console_mode(node_uuid, enabled)
            opts = self._conf.ironic_multi
            console: dict[str, Any] = waits.until(
                # Ironic's errors reach the wait, which outlasts failed
                # polls.
                lambda: self._ironic.get_console(node_uuid),
                lambda c: bool(c['console_enabled']) == enabled,
                timeout=nova_options.console_timeout(self._conf, kind),
                interval=opts.poll_interval,
                what='console of node %s to be %s' % (
                    node_uuid, 'enabled' if enabled else 'disabled'))
        except (ironic.IronicError, waits.Timeout) as e:
            raise Unavailable(str(e)) from e
        return console

    def vnc(self, instance: Any) -> console_type.ConsoleVNC:
        """The node's VNC server; the console is enabled if it is not."""
        try:
            return self._vnc(instance)
        except Unavailable as e:
            LOG.warning('No VNC console: %s', e, instance=instance)
            raise exception.ConsoleTypeUnavailable(console_type='vnc') from e

    def _vnc(self, instance: Any) -> console_type.ConsoleVNC:
        node = self._provisioner.instance_node(instance)
        console = self._get(node.uuid)
        if not console['console_enabled']:
            console = self._set(node.uuid, True, nova_options.VNC)
        info = console.get('console_info') or {}
        if info.get('type') != 'vnc':
            raise Unavailable('node %s has a %r console, not vnc'
                              % (node.uuid, info.get('type')))
        # console_info's URL is Ironic's own noVNC proxy; nova needs the
        # VNC server behind it, which Ironic keeps in driver_internal_info.
        try:
            raw = self._ironic.get_fields(node.uuid,
                                          ['uuid', 'driver_internal_info'])
        except ironic.IronicError as e:
            raise Unavailable(str(e)) from e
        internal = getattr(raw, 'driver_internal_info', None) or {}
        host, port = internal.get('vnc_host'), internal.get('vnc_port')
        if host is None or port is None:
            raise Unavailable('node %s does not report its VNC host and '
                              'port' % node.uuid)
        return console_type.ConsoleVNC(host=host, port=port)

    def serial(self, instance: Any) -> console_type.ConsoleSerial:
        """The node's socat serial console, reset for this user."""
        try:
            return self._serial(instance)
        except Unavailable as e:
            LOG.warning('No serial console: %s', e, instance=instance)
            raise exception.ConsoleTypeUnavailable(
                console_type='serial') from e

    def _serial(self, instance: Any) -> console_type.ConsoleSerial:
        node = self._provisioner.instance_node(instance)
        console = self._get(node.uuid)
        if not console['console_enabled']:
            raise Unavailable('the console of node %s is disabled'
                              % node.uuid)
        # A serial line has one user: re-enabling drops whoever held it.
        try:
            self._set(node.uuid, False, nova_options.SERIAL)
        except Unavailable:
            LOG.warning('Could not disable the console of node %s; '
                        're-enabling it anyway', node.uuid)
        console = self._set(node.uuid, True, nova_options.SERIAL)
        info = console.get('console_info') or {}
        if info.get('type') != 'socat':
            raise Unavailable('node %s has a %r console, not socat'
                              % (node.uuid, info.get('type')))
        url = parse.urlparse(info.get('url') or '')
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme != 'tcp' or not url.hostname or not port:
            raise Unavailable('node %s has an unusable serial console URL '
                              '%r (only tcp://host:port works)'
                              % (node.uuid, info.get('url')))
        return console_type.ConsoleSerial(host=url.hostname, port=port)
