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

#: Seconds after which a node no wait has looked at is forgotten (it was
#: deleted, or no action waits on it any more).
KEEP = 3600.0


class Stalls:
    """What each wait has seen of busy nodes nobody works on.

    Kept across the waits of one action (a deploy's wait, its undo and
    nova's clean-up delete all know a stall the first one saw), and for
    :data:`KEEP` after the last look at a node.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 grace: float = GRACE, keep: float = KEEP) -> None:
        self._clock = clock
        self._grace = grace
        self._keep = keep
        #: node UUID -> when it was first seen busy; busy and unlocked;
        #: last asked about by UUID (:meth:`suspect`); last looked at.
        self._busy: dict[str, float] = {}
        self._unlocked: dict[str, float] = {}
        self._asked: dict[str, float] = {}
        self._looked: dict[str, float] = {}

    def _forget(self, uuid: str) -> None:
        for seen in (self._busy, self._unlocked, self._asked, self._looked):
            seen.pop(uuid, None)

    def _seen(self, node: nodeinfo.NodeInfo) -> bool:
        """Note what ``node`` shows; whether it is busy."""
        now = self._clock()
        for uuid in [u for u, at in self._looked.items()
                     if now - at >= self._keep]:
            self._forget(uuid)
        if node.provision_state not in states.CONDUCTOR_BUSY:
            self._forget(node.uuid)
            return False
        self._looked[node.uuid] = now
        self._busy.setdefault(node.uuid, now)
        if node.unlocked:
            self._unlocked.setdefault(node.uuid, now)
        else:
            self._unlocked.pop(node.uuid, None)
        return True

    def suspect(self, node: nodeinfo.NodeInfo) -> bool:
        """Time to ask whether a conductor serves ``node``.

        Only a read of the node by UUID says. A wait polling otherwise asks
        once the node has been busy for the grace, and then once per grace
        at most, not on every poll.
        """
        if not self._seen(node):
            return False
        now = self._clock()
        if (now - self._busy[node.uuid] < self._grace or
                now - self._asked.get(node.uuid, now - self._grace) <
                self._grace):
            return False
        self._asked[node.uuid] = now
        return True

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
