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
"""Stevedore look-ups shared by the shim and the plugin points.

A deployment replaces one of this package's plugins (the driver class
itself included) by registering an entry point of the same name in the
same namespace from a distribution of its own: that one is loaded instead.
Two or more other distributions registering the name are refused, naming
them, rather than one of them being picked by the order of ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

from oslo_log import log as logging
from stevedore import driver as sd_driver
from stevedore import exception as sd_exc
from stevedore import extension

DRIVERS_NAMESPACE = 'nova_ironic_multi.drivers'
RINGS_NAMESPACE = 'nova_ironic_multi.rings'
MEMBERSHIP_NAMESPACE = 'nova_ironic_multi.membership'

#: This package's distribution name, normalised.
DISTRIBUTION = 'nova-ironic-multi'

LOG = logging.getLogger(__name__)

#: ``(namespace, name, target)`` of the replacements already logged: a ring
#: is loaded again at every change of the members.
_LOGGED: set[tuple[str, str, str]] = set()


class PluginError(LookupError):
    """No one plugin answers to the name: its message says why and the fix."""


class PluginNotFound(PluginError):
    """No entry point of that name is installed in the namespace."""

    def __init__(self, namespace: str, name: str, option: str | None):
        self.available = available(namespace)
        where = ' (option %s)' % option if option else ''
        super().__init__(
            '%r is not a known plugin in namespace %s%s; installed: %s. '
            'Fix the name or install the package that provides it.'
            % (name, namespace, where, ', '.join(self.available) or 'none'))


class AmbiguousPlugin(PluginError):
    """Several distributions other than this one register the name."""


def available(namespace: str) -> list[str]:
    """Names registered in ``namespace``, sorted."""
    mgr: extension.ExtensionManager[Any] = extension.ExtensionManager(
        namespace, invoke_on_load=False)
    return sorted(set(mgr.names()))


def plugin(namespace: str, name: str, option: str | None = None) -> Any:
    """The object registered as ``name`` in ``namespace``, not invoked."""
    try:
        mgr: sd_driver.DriverManager[Any] = sd_driver.DriverManager(
            namespace, name, invoke_on_load=False)
    except sd_exc.NoMatches as e:
        raise PluginNotFound(namespace, name, option) from e
    except sd_exc.MultipleMatches:
        pass        # (resolved below, out of stevedore's exception)
    else:
        return mgr.driver
    return _replacement(namespace, name, option)


def _distribution(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, 'dist', None)
    name = dist.name if dist is not None else '(unknown distribution)'
    return re.sub(r'[-_.]+', '-', name).lower()


def _replacement(namespace: str, name: str, option: str | None) -> Any:
    """The entry point of ``name`` that another distribution registers.

    :raises AmbiguousPlugin: more than one other distribution registers
        it, or this package's own entry points disagree.
    """
    found = {(_distribution(ep), ep.value): ep
             for ep in importlib.metadata.entry_points(group=namespace)
             if ep.name == name}
    theirs = [key for key in found if key[0] != DISTRIBUTION]
    if len(theirs) == 1:
        (dist, target), = theirs
        if (namespace, name, target) not in _LOGGED:
            _LOGGED.add((namespace, name, target))
            LOG.info('%(name)s in %(ns)s: %(target)s from distribution '
                     '%(dist)s, which replaces nova-ironic-multi\'s',
                     {'name': name, 'ns': namespace, 'target': target,
                      'dist': dist})
        return found[theirs[0]].load()
    if not theirs and len(found) == 1:
        # This package twice on sys.path with the same entry point.
        return next(iter(found.values())).load()
    where = ' (option %s)' % option if option else ''
    raise AmbiguousPlugin(
        '%r in namespace %s%s is registered by %s; one distribution besides '
        'nova-ironic-multi may replace it. Fix: uninstall all but one of '
        'them.' % (name, namespace, where, ', '.join(
            '%s (%s)' % key for key in sorted(found))))


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
    except PluginError as e:
        raise AttributeError(str(e)) from e
    return cls
