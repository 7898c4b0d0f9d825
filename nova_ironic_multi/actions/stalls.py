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
"""Nodes Ironic leaves in a state only a conductor leaves, with none on it.

Ironic 39 accepts no request for a node that is ``deploying`` (or
rescuing, unrescuing, servicing) until its conductor moves it on. If that
conductor dies, nothing does: with no other conductor of the node's group
alive, Ironic says no conductor serves the node; and a conductor that
clears the dead one's lock without failing the deploy (seen in the long
soak) leaves the node with no lock at all, which a conductor at work always
holds. Waiting for such a node only holds nova's build or delete: the
waits of :mod:`provision` end when this module names a stall.
"""

from __future__ import annotations

from collections.abc import Callable
import time

from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

#: Seconds a node may be seen busy with no lock held before it counts as
#: stalled: a conductor drops the lock only between two steps.
GRACE = 60.0


class Stalls:
    """What each wait has seen of busy nodes nobody works on."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 grace: float = GRACE) -> None:
        self._clock = clock
        self._grace = grace
        #: node UUID -> when it was first seen busy; and busy, unlocked.
        self._busy: dict[str, float] = {}
        self._unlocked: dict[str, float] = {}

    def _seen(self, node: nodeinfo.NodeInfo) -> bool:
        """Note what ``node`` shows; whether it is busy."""
        if node.provision_state not in states.CONDUCTOR_BUSY:
            self._busy.pop(node.uuid, None)
            self._unlocked.pop(node.uuid, None)
            return False
        now = self._clock()
        self._busy.setdefault(node.uuid, now)
        if node.unlocked:
            self._unlocked.setdefault(node.uuid, now)
        else:
            self._unlocked.pop(node.uuid, None)
        return True

    def suspect(self, node: nodeinfo.NodeInfo) -> bool:
        """Busy for the grace already: ask whether a conductor serves it.

        (Only a read of the node by UUID says; a wait polling otherwise
        asks that once it suspects a stall, not on every poll.)
        """
        return (self._seen(node) and
                self._clock() - self._busy[node.uuid] >= self._grace)

    def reason(self, node: nodeinfo.NodeInfo) -> str | None:
        """Why no conductor will move ``node`` on, or None if one may."""
        if not self._seen(node):
            return None
        if node.unserved:
            return ('no live Ironic conductor of its conductor group %r '
                    'serves it' % (node.conductor_group or ''))
        if node.uuid not in self._unlocked:
            return None
        idle = self._clock() - self._unlocked[node.uuid]
        if idle < self._grace:
            return None
        return ('no Ironic conductor has held its lock for %.0f seconds '
                '(none is working on it)' % idle)
