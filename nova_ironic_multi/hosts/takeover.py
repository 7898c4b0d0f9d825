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
"""Automatic takeover of a fenced host's instances (``takeover = fenced``).

A node that carries an instance stays with the instance's host (ownership
rule 1), so a dead host's instances cannot be managed until they change
hosts. Once the host is *fenced* (its nova-compute service forced down:
``openstack compute service set --down``), each of its nodes in scope goes
to the live peer the ring names for it among the members (the node is in
that peer's ``share``), and that peer moves the instance to itself. A host
that is merely down (missed heartbeats) is not fenced: nothing moves.

The move itself, a compare-and-swap on the task state, and the claims it
leaves if cut off, are :mod:`hosts.moves`.

The compute node row follows by itself: the node is now in this host's
division, and nova's resource tracker moves an existing row (same id, UUID
and resource provider) to the host that reports its node.

An instance nova deleted while its host was down (an *orphan*) moves the
same way, so the new host's reaper tears its node down.

Each instance taken over gets an instance action :data:`ACTION` (``openstack
server event list``) with one event, ``takeover_from_<old host>``, recorded
by the host that took it over: what ``ring show`` lists as recent
takeovers. An instance taken over with a task state set is then recovered
under that action's request (:mod:`hosts.recovery`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
import dataclasses
from typing import Any

from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.division import ownership
from nova_ironic_multi.hosts import moves
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import zones

LOG = logging.getLogger(__name__)

MANUAL = 'manual'
FENCED = 'fenced'
# The guarded move, from where it lives (callers name it here too).
BINARY = moves.BINARY
CLAIM_PREFIX = moves.CLAIM_PREFIX
CLAIM_BOUND = moves.CLAIM_BOUND
RELEASE_EVERY = moves.RELEASE_EVERY
ACTION = moves.ACTION
MANUAL_ACTION = moves.MANUAL_ACTION
EVENT_PREFIX = moves.EVENT_PREFIX
claim_state = moves.claim_state
parse_claim = moves.parse_claim
abandoned = moves.abandoned
release_claims = moves.release_claims
MovedAway = moves.MovedAway
read_now = moves.read_now
ensure_here = moves.ensure_here
record = moves.record
move = moves.move


@dataclasses.dataclass(frozen=True)
class Moved:
    """What one period took over."""

    #: Live instances now on this host.
    live: frozenset[str] = frozenset()
    #: Deleted instances (orphans) now on this host, for its reaper.
    orphans: frozenset[str] = frozenset()
    #: Live instances taken over in flight (see :mod:`hosts.recovery`): UUID ->
    #: the request ID of the takeover's instance action.
    inflight: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.live or self.orphans)


NOTHING = Moved()


def candidates(nodes: Iterable[ownership.NodeLike],
               pool: Collection[str],
               mine: Collection[str]) -> dict[str, str]:
    """Instance -> node, for the nodes of ``pool`` (those a ring gives this
    host) that carry an instance that is not this host's (rule 3 keeps them
    from it today).
    """
    return {n.instance_uuid: n.uuid for n in nodes
            if n.uuid in pool and n.instance_uuid is not None and
            n.instance_uuid not in mine}


def fenced_hosts(services: Iterable[Any]) -> frozenset[str]:
    """Names of the nova-compute ``services`` forced down (nova's fence)."""
    return frozenset(svc.host for svc in services if svc.forced_down)


def building(fenced: Collection[str], free: Collection[str],
             known: Collection[str]) -> list[Any]:
    """Builds of ``fenced`` hosts on ``free`` nodes (none reserved yet).

    nova records the node of a build when the host claims it; the host
    reserves it in Ironic later, in spawn. One that died in between leaves
    a building instance on a node that carries nothing: it moves with the
    node too, and its new host puts it in ERROR (:mod:`hosts.recovery`).
    """
    found = objects.InstanceList.get_by_filters(
        nova_context.get_admin_context(),
        {'host': sorted(fenced), 'vm_state': [vm_states.BUILDING],
         'deleted': False}, expected_attrs=[])
    return [i for i in found if i.node in free and i.uuid not in known]


class Takeover:
    """One host's automatic takeover, run once per period."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf

    def enabled(self) -> bool:
        # Mutable: read at use time.
        return bool(self._conf.ironic_multi.takeover == FENCED)

    def run(self, host: str, nodes: Iterable[ownership.NodeLike],
            division: ownership.Division, mine: Collection[str],
            members: Collection[str],
            share_among: Callable[[frozenset[str]],
                                  Sequence[ownership.NodeLike]] | None
            = None) -> Moved:
        """Take over the fenced hosts' instances the ring gives ``host``.

        The ring of a fenced host's nodes is that of the members that may
        take its instances (:func:`zones.eligible`: its cell and
        availability zone): the period's own ring (``division.share``)
        when all of them may, else ``share_among`` those.

        Failures are logged and left for the next period; nothing here is
        retried or waited for.

        :param share_among: members -> the in-scope nodes their ring
            gives ``host`` (with ``divide = shards`` it may list more).
        """
        if not self.enabled():
            return NOTHING
        nodes = list(nodes)
        lowered = frozenset(m.lower() for m in members)
        try:
            ctxt = nova_context.get_admin_context()
            services = list(objects.ServiceList.get_by_binary(
                ctxt, BINARY, include_disabled=True))
            fenced = fenced_hosts(services)
            if not fenced:
                return NOTHING
            seen = {n.uuid: n for n in nodes}
            shares = self._shares(ctxt, host, fenced, lowered, services,
                                  division.share, share_among, seen)
            nodes = list(seen.values())
            pool = frozenset().union(*shares.values())
            found = candidates(nodes, pool, mine)
            # A build the fenced host had claimed a node for but not
            # reserved it in Ironic yet: the node looks free (building()).
            free = frozenset(n.uuid for n in nodes
                             if n.uuid in pool and n.instance_uuid is None)
            instances: list[Any] = []
            if found:
                deleted = nova_context.get_admin_context(read_deleted='yes')
                instances.extend(objects.InstanceList.get_by_filters(
                    deleted, {'uuid': sorted(found),
                              'host': sorted(fenced)},
                    expected_attrs=[]))
            if free:
                extra = building(fenced, free, found)
                instances.extend(extra)
                found = dict(found, **{i.uuid: i.node for i in extra})
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot look for instances of fenced hosts, the next '
                        'period looks again: %s', e)
            return NOTHING
        # Only the nodes the ring of each instance's host gives this one.
        instances = [i for i in instances
                     if found[i.uuid] in shares.get(i.host.lower(), ())]
        return self._move_all(host, instances, found,
                              {h.lower() for h in fenced}, lowered)

    @staticmethod
    def _shares(ctxt: Any, host: str, fenced: Collection[str],
                members: frozenset[str], services: Iterable[Any],
                share: frozenset[str],
                share_among: Callable[[frozenset[str]],
                                      Sequence[ownership.NodeLike]] | None,
                seen: dict[str, ownership.NodeLike]
                ) -> dict[str, frozenset[str]]:
        """Fenced host (lower-cased) -> the nodes of it this host may take.

        Nodes ``share_among`` gives beyond those listed go into ``seen``.

        :raises nova.exception.NovaException:
        :raises oslo_messaging.MessagingException:
        """
        found: dict[str, frozenset[str]] = {}
        for source, why in zones.eligible(ctxt, fenced, members,
                                          services).items():
            accepted = frozenset(m for m, no in why.items() if no is None)
            if host.lower() not in accepted:
                LOG.debug('Not taking over instances of fenced host '
                          '%(src)s: %(why)s', {'src': source,
                                               'why': why.get(host.lower())})
                found[source.lower()] = frozenset()
            elif accepted == members:
                found[source.lower()] = share
            elif share_among is None:
                found[source.lower()] = frozenset()
            else:
                LOG.debug('Fenced host %(src)s: its nodes go among '
                          '%(ok)s; refused: %(no)s',
                          {'src': source, 'ok': sorted(accepted),
                           'no': {m: w for m, w in why.items() if w}})
                got = share_among(accepted)
                seen.update((n.uuid, n) for n in got if n.uuid not in seen)
                found[source.lower()] = frozenset(n.uuid for n in got)
        return found

    def _move_all(self, host: str, instances: Iterable[Any],
                  found: Mapping[str, str], fenced: Collection[str],
                  members: Collection[str]) -> Moved:
        live: set[str] = set()
        orphans: set[str] = set()
        in_flight: dict[str, str] = {}
        for inst in instances:
            node = found[inst.uuid]
            if inst.node and inst.node != node:
                LOG.debug('Instance %(inst)s is recorded on node %(rec)s, '
                          'not %(node)s: not taken over',
                          {'inst': inst.uuid, 'rec': inst.node,
                           'node': node})
                continue
            old = inst.host
            try:
                if not move(inst, host, fenced, members):
                    continue
            except exception.InstanceUpdateConflict as e:
                LOG.info('Instance %(inst)s on node %(node)s was not taken '
                         'over from %(old)s: another writer came first '
                         '(%(err)s)', {'inst': inst.uuid, 'node': node,
                                       'old': old, 'err': e})
                continue
            except (exception.NovaException,
                    oslo_messaging.MessagingException) as e:
                LOG.error('Taking over instance %(inst)s on node %(node)s '
                          'from fenced host %(old)s failed, the next period '
                          'tries again: %(err)s',
                          {'inst': inst.uuid, 'node': node, 'old': old,
                           'err': e})
                continue
            (orphans if inst.deleted else live).add(inst.uuid)
            recover = (not inst.deleted and
                       recovery.needs_recovery(inst.vm_state,
                                               inst.task_state))
            LOG.warning('Took over Ironic node %(node)s with %(kind)s '
                        '%(inst)s from %(old)s: nova-compute on %(old)s is '
                        'forced down (fenced) and the ring names this host '
                        '(%(host)s) for the node.%(state)s',
                        {'node': node, 'inst': inst.uuid, 'old': old,
                         'host': host,
                         'kind': ('deleted instance' if inst.deleted
                                  else 'instance'),
                         'state': (' It was %s/%s: this host recovers it.'
                                   % (inst.vm_state, inst.task_state)
                                   if recover else '')})
            try:
                request_id = record(inst.uuid, old, host)
            except (exception.NovaException,
                    oslo_messaging.MessagingException) as e:
                LOG.warning('Cannot record the takeover of instance '
                            '%(inst)s as an instance action: %(err)s',
                            {'inst': inst.uuid, 'err': e})
                request_id = str(nova_context.get_admin_context().request_id)
            if recover:
                in_flight[inst.uuid] = request_id
        return Moved(frozenset(live), frozenset(orphans), in_flight)
