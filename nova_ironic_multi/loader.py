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
"""Stevedore look-ups shared by the shim and the plugin points."""

from __future__ import annotations

from typing import Any

from stevedore import driver as sd_driver
from stevedore import exception as sd_exc
from stevedore import extension

DRIVERS_NAMESPACE = 'nova_ironic_multi.drivers'
RINGS_NAMESPACE = 'nova_ironic_multi.rings'
MEMBERSHIP_NAMESPACE = 'nova_ironic_multi.membership'


class PluginNotFound(LookupError):
    """No entry point of that name is installed in the namespace."""

    def __init__(self, namespace: str, name: str, option: str | None):
        self.available = available(namespace)
        where = ' (option %s)' % option if option else ''
        super().__init__(
            '%r is not a known plugin in namespace %s%s; installed: %s. '
            'Fix the name or install the package that provides it.'
            % (name, namespace, where, ', '.join(self.available) or 'none'))


def available(namespace: str) -> list[str]:
    """Names registered in ``namespace``, sorted."""
    mgr: extension.ExtensionManager[Any] = extension.ExtensionManager(
        namespace, invoke_on_load=False)
    return sorted(mgr.names())


def plugin(namespace: str, name: str, option: str | None = None) -> Any:
    """The object registered as ``name`` in ``namespace``, not invoked."""
    try:
        mgr: sd_driver.DriverManager[Any] = sd_driver.DriverManager(
            namespace, name, invoke_on_load=False)
    except sd_exc.NoMatches as e:
        raise PluginNotFound(namespace, name, option) from e
    return mgr.driver


def driver_class(name: str) -> type:
    """Resolve ``nova.virt.nova_ironic_multi.<name>`` to a driver class.

    nova resolves the class with ``getattr`` on the shim module and turns an
    ``AttributeError`` into "Unable to load the virtualization driver", so an
    unknown name is reported as one, with the names that would work.
    """
    if name.startswith('__'):
        # Python's import machinery probes dunder names; never answer them
        # with a plugin look-up.
        raise AttributeError(name)
    try:
        cls: type = plugin(DRIVERS_NAMESPACE, name, 'compute_driver')
    except PluginNotFound as e:
        raise AttributeError(str(e)) from e
    return cls
