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
"""Volume targets left on free nodes, removed once Ironic is done with them.

Ironic 39 removes volume targets only through its API, never in its
tear-down or cleaning, and refuses while it holds the node. Deleting a
boot-from-volume server does not wait for cleaning (that would hold nova's
delete, an RPC worker and the Cinder attachment for as long as cleaning
lasts): the targets of a node still cleaning are left, and removed here, at
the end of a resource-tracker period, by the host that:

* manages the free node and saw it in use or being torn down in its
  previous period, and now sees it at rest (``available`` or
  ``manageable``, no instance); or
* deleted the server itself (:meth:`LeftoverTargets.note`), wherever the
  free node went since, so a cleaning shorter than a period is not missed.

Nothing is asked of a node while Ironic tears it down or cleans it (nova
bug 2019977). Every request is made once, never retried: the next period
is the retry. At most :data:`BATCH` nodes are looked at per period, the
rest wait for the next one. A node that takes an instance meanwhile is left
alone: its deploy removes whatever targets it finds first.
"""

from __future__ import annotations

from collections.abc import Mapping
import enum
import threading

from oslo_log import log as logging

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)

#: Nodes looked at per period, at most (each costs one to three reads).
BATCH = 10

#: States Ironic leaves by itself: a noted node in one is looked at again.
_BUSY = frozenset({states.DELETING, states.CLEANING, states.CLEANWAIT})


class _Outcome(enum.Enum):
    DONE = 'done'
    AGAIN = 'again'
    STOP = 'stop'


def resting(node: nodeinfo.NodeInfo) -> bool:
    """Free and idle: volume targets left on it belong to no instance."""
    return node.instance_uuid is None and nodeinfo.idle(node)


class LeftoverTargets:
    """The free nodes of one host that may carry leftover volume targets."""

    def __init__(self, client: ironic.Ironic) -> None:
        self._ironic = client
        self._lock = threading.Lock()
        #: Noted by this host's deletes since the last period (any thread).
        self._noted: dict[str, None] = {}
        #: Waiting to be looked at, oldest first (the period's thread).
        self._waiting: dict[str, None] = {}

    def note(self, node_uuid: str) -> None:
        """A delete left volume targets on a node that Ironic still holds."""
        with self._lock:
            self._noted[node_uuid] = None

    def sweep(self, before: Mapping[str, nodeinfo.NodeInfo] | None,
              after: Mapping[str, nodeinfo.NodeInfo]) -> None:
        """Look at up to :data:`BATCH` nodes; remove what is left on them.

        :param before: the nodes this host managed last period (None at
            the first period: nothing is known to have changed).
        :param after: the nodes it manages now, as just listed.
        """
        if before is not None:
            for uuid, node in after.items():
                old = before.get(uuid)
                if old is not None and not resting(old) and resting(node):
                    self._waiting[uuid] = None
        with self._lock:
            for uuid in self._noted:
                self._waiting[uuid] = None
            self._noted.clear()
        for uuid in list(self._waiting)[:BATCH]:
            del self._waiting[uuid]
            outcome = self._sweep_one(uuid, after.get(uuid))
            if outcome is not _Outcome.DONE:
                self._waiting[uuid] = None      # at the end of the queue
            if outcome is _Outcome.STOP:
                break

    def _sweep_one(self, uuid: str,
                   listed: nodeinfo.NodeInfo | None) -> _Outcome:
        try:
            node = (listed if listed is not None else
                    self._ironic.get_node(uuid, once=True))
            if node.instance_uuid is not None:
                # Another instance's deploy removes them before it starts.
                return _Outcome.DONE
            if not resting(node):
                # Ironic holds it (nova bug 2019977): next period, as long
                # as Ironic gets out of that state by itself.
                return (_Outcome.AGAIN if node.provision_state in _BUSY
                        else _Outcome.DONE)
            targets = self._ironic.volume_targets(uuid, once=True)
            if not targets:
                return _Outcome.DONE
            # Listed first, then checked free: a deploy that reserves the
            # node from now on adds targets that are not in this list.
            if not resting(self._ironic.get_node(uuid, once=True)):
                return _Outcome.AGAIN
            for target in targets:
                try:
                    self._ironic.delete_volume_target(target.uuid, once=True)
                except ironic.NodeNotFound:
                    pass        # (the target is gone: a deploy removed it)
        except ironic.NodeNotFound:
            return _Outcome.DONE
        except ironic.Conflict as e:
            if not ironic.is_node_locked(e):
                raise
            # A conductor holds the node for a moment: next period.
            return _Outcome.AGAIN
        except ironic.IronicUnavailable as e:
            LOG.warning('Cannot remove leftover volume targets of Ironic '
                        'node %(node)s now, Ironic is unreachable (%(error)s);'
                        ' next period', {'node': uuid, 'error': e})
            return _Outcome.STOP
        except ironic.IronicError as e:
            LOG.warning('Cannot remove leftover volume targets of Ironic '
                        'node %(node)s: %(error)s; they are removed before '
                        'its next deploy', {'node': uuid, 'error': e})
            return _Outcome.DONE
        LOG.info('Removed %(n)d leftover volume target(s) (volumes '
                 '%(volumes)s) from free Ironic node %(node)s',
                 {'n': len(targets), 'node': uuid,
                  'volumes': ', '.join(sorted(str(t.volume_id)
                                              for t in targets))})
        return _Outcome.DONE
