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
"""Whether Ironic acted on a request whose answer was lost, from the node.

A connection that breaks after the request was sent ("Connection aborted",
``RemoteDisconnected``, a reset) leaves the request's fate unknown: Ironic
may have acted and the answer was lost on the way back. Repeating a
deploy, rebuild, tear-down or rescue then gets a 400 (that fails a deploy
that is running), a repeated reboot reboots twice, a repeated volume
target gets a 409. Instead :class:`~nova_ironic_multi.ironic.Ironic` reads
the node and asks these functions: True means "Ironic took it" (the
request succeeded), False "Ironic shows no trace of it" (asking again is
safe).

Each takes the node's fields as read after the failure (and, where the
request's end state is its start state, as read before sending).
"""

from __future__ import annotations

from typing import Any

from nova_ironic_multi.ironic import states

#: Fields a provision-state verdict reads.
PROVISION_FIELDS = ['provision_state', 'target_provision_state',
                    'provision_updated_at']

#: Verb -> the target Ironic sets while it works on it.
_TARGETS = {
    states.ACTIVE: {states.ACTIVE},
    states.REBUILD: {states.ACTIVE},
    states.DELETED: {states.AVAILABLE, states.MANAGEABLE},
    'rescue': {states.RESCUE},
    'unrescue': {states.ACTIVE},
}
#: Verb -> provision states a node only reaches once Ironic took the verb
#: (from the state the driver asks it in).
_AFTER = {
    states.ACTIVE: states.DEPLOYED_LIKE - {states.RESCUE, states.RESCUING,
                                           states.RESCUEWAIT,
                                           states.RESCUEFAIL,
                                           states.UNRESCUING,
                                           states.UNRESCUEFAIL},
    states.DELETED: states.TEARING_DOWN | states.UNPROVISIONED,
    'rescue': {states.RESCUE, states.RESCUING, states.RESCUEWAIT,
               states.RESCUEFAIL},
    'unrescue': {states.ACTIVE, states.UNRESCUING, states.UNRESCUEFAIL},
}


def needs_before(verb: str) -> bool:
    """Whether judging ``verb`` needs the node as it was before sending.

    A rebuild ends in ``active``, where it started.
    """
    return verb not in _AFTER


def provision(verb: str, now: Any, before: Any = None) -> bool:
    """Whether Ironic took a provision-state change to ``verb``."""
    target = getattr(now, 'target_provision_state', None)
    if target is not None:
        return target in _TARGETS.get(verb, {target})
    if verb in _AFTER:
        return getattr(now, 'provision_state', None) in _AFTER[verb]
    # Back where it started: only the time of its last move tells.
    return (before is not None and
            getattr(now, 'provision_updated_at', None) !=
            getattr(before, 'provision_updated_at', None))


def power(target: str, now: Any, before: Any) -> bool:
    """Whether Ironic took a power change (a reboot: it wrote the node).

    A reboot ends where it started (powered on): only a power target, or
    the node's ``updated_at`` moved since ``before``, show it.
    """
    if getattr(now, 'target_power_state', None) is not None:
        return True
    return getattr(now, 'updated_at', None) != getattr(before, 'updated_at',
                                                       None)


def volume_target(fields: dict[str, Any], targets: list[Any]) -> bool:
    """Whether the node has the volume target that was being created."""
    return any(getattr(t, 'volume_id', None) == fields.get('volume_id') and
               getattr(t, 'boot_index', None) == fields.get('boot_index')
               for t in targets)
