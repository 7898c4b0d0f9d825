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
"""Deploys given up on that Ironic would not let spawn undo at once.

A deploy that fails or runs out of time is undone by spawn itself when
Ironic allows it (:mod:`provision`). Ironic 39 accepts no undeploy while a
conductor works on the node (``deploying``, and the like), nor from a hold
before an ``abort``; a tear-down can also fail on an outage. Spawn then
logs the node as leaked, notes it here, and lets nova reschedule: Ironic
keeps the instance on that node meanwhile (an instance is on one node at
most), so the reschedule cannot succeed before the node is undone.

Each resource-tracker period looks at the noted nodes (at most
:data:`BATCH`), and undoes a node as soon as Ironic allows, provided it
still holds the instance whose deploy was given up. Every request is made
once, never retried: the next period reads the node again first, and
Ironic moves a node out of the state it accepted a request in before
answering, so a request is repeated only if it surely did not take.
"""

from __future__ import annotations

import enum
import threading

from oslo_log import log as logging

from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states

LOG = logging.getLogger(__name__)

#: Nodes looked at per period, at most (each costs one or two requests).
BATCH = 10


class _Outcome(enum.Enum):
    DONE = 'done'
    AGAIN = 'again'
    STOP = 'stop'


def undeployable(node: nodeinfo.NodeInfo) -> bool:
    """Ironic 39 accepts ``deleted`` for the node now (or may: unknown)."""
    state = node.provision_state
    return (state in states.UNDEPLOYABLE or
            state not in states.KNOWN_PROVISION_STATES)


class AbandonedDeploys:
    """Nodes whose deploy this host gave up on, and left holding it."""

    def __init__(self, client: ironic.Ironic) -> None:
        self._ironic = client
        self._lock = threading.Lock()
        #: node UUID -> the instance whose deploy was given up, oldest
        #: first (spawn threads note, the period's thread sweeps).
        self._noted: dict[str, str] = {}

    def note(self, node_uuid: str, instance_uuid: str) -> None:
        with self._lock:
            self._noted.pop(node_uuid, None)
            self._noted[node_uuid] = instance_uuid

    def pending(self) -> dict[str, str]:
        """The nodes still to be undone: node UUID -> instance UUID."""
        with self._lock:
            return dict(self._noted)

    def sweep(self) -> None:
        """Undo what Ironic now allows, of up to :data:`BATCH` nodes."""
        with self._lock:
            batch = list(self._noted.items())[:BATCH]
        for node_uuid, instance_uuid in batch:
            outcome = self._sweep_one(node_uuid, instance_uuid)
            with self._lock:
                if self._noted.get(node_uuid) != instance_uuid:
                    continue        # noted again meanwhile: keep that
                del self._noted[node_uuid]
                if outcome is not _Outcome.DONE:
                    self._noted[node_uuid] = instance_uuid  # queue's end
            if outcome is _Outcome.STOP:
                break

    def _sweep_one(self, node_uuid: str, instance_uuid: str) -> _Outcome:
        args: dict[str, object] = {'node': node_uuid, 'inst': instance_uuid}
        try:
            node = self._ironic.get_node(node_uuid, once=True)
            args['state'] = node.provision_state
            if node.instance_uuid != instance_uuid:
                LOG.info('Ironic node %(node)s no longer holds instance '
                         '%(inst)s, whose deploy this host gave up on: '
                         'nothing left to undo', args)
                return _Outcome.DONE
            if undeployable(node):
                self._ironic.set_provision_state(node_uuid, states.DELETED)
                LOG.warning('Undeploying Ironic node %(node)s (%(state)s), '
                            'left holding instance %(inst)s by a deploy '
                            'this host gave up on', args)
                return _Outcome.DONE
            if node.provision_state in states.ABORT_FIRST:
                self._ironic.set_provision_state(node_uuid, 'abort')
                LOG.warning('Aborted the %(state)s of Ironic node %(node)s, '
                            'left holding instance %(inst)s by a deploy '
                            'this host gave up on; the next period '
                            'undeploys it', args)
                return _Outcome.AGAIN
            if node.provision_state in states.CONDUCTOR_BUSY:
                LOG.debug('Ironic node %(node)s is still %(state)s; it is '
                          'undeployed once Ironic allows', args)
                return _Outcome.AGAIN
            if node.provision_state in (states.AVAILABLE,
                                        states.MANAGEABLE):
                # Only reserved: Ironic's tear-down never cleared it.
                self._ironic.release(node_uuid)
                LOG.info('Released Ironic node %(node)s from instance '
                         '%(inst)s, whose deploy this host gave up on',
                         args)
            # Anything else (tearing down, cleaning): Ironic is on it.
            return _Outcome.DONE
        except ironic.NodeNotFound:
            return _Outcome.DONE
        except ironic.IronicUnavailable as e:
            LOG.warning('Cannot undo the deploy given up on Ironic node '
                        '%(node)s now, Ironic is unreachable (%(error)s); '
                        'next period', dict(args, error=e))
            return _Outcome.STOP
        except ironic.IronicError as e:
            # (A refusal means the node moved meanwhile: read it again.)
            LOG.warning('Cannot undo the deploy given up on Ironic node '
                        '%(node)s now: %(error)s; next period',
                        dict(args, error=e))
            return _Outcome.AGAIN
