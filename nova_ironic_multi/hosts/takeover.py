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

nova-compute has no database access, and the only conditional write nova's
objects offer is ``Instance.save(expected_task_state=...)``. Writing the
host with the task state read as the condition is not enough (two peers
that read the same task state would both succeed: the second write does
not change it). So the move is a claim on the task state, which changes
the compared value, then the move itself:

1. a fresh read of the instance: if its host is no longer the fenced one
   (a peer moved it since the period's listing), nothing is written; if
   its task state changed since, the move loses as a claim would;
2. ``task_state: T -> CLAIM`` where CLAIM names this host and holds ``T``;
   at most one peer can succeed, and nova's API refuses actions meanwhile;
3. with the claim held, the instance as saved says where it is: if its host
   is still the fenced one, ``host: FENCED -> this host`` and
   ``task_state: CLAIM -> T`` in one write; otherwise only the task state
   is given back (another peer moved it first). The loser does nothing.

The compared value ``T`` recurs: a peer's move ends with the task state it
found. A claim compared with a read from before that move would succeed,
which is why step 1 reads again: a stale read never writes. (nova-compute
cannot compare anything that never recurs, such as the host: its
conductor's ``Instance.save`` compares the task and VM states only. What
is left is a peer's whole move, two conductor calls, falling between
another's fresh read and its claim, one call apart; step 3 then gives the
claim back and the instance keeps its new host.)

A claim left behind (this host died between the two writes, or the second
write failed) is finished by its own host, or by any live peer once its
claimer is no longer a member or the claim is older than
:data:`CLAIM_BOUND` (the two writes follow each other at once: a claim that
old is nobody's move any more). A host also gives back, at its start and
every :data:`RELEASE_EVERY` periods, the claims left on its own instances
that nobody is finishing (:func:`release_claims`), so that a drain or move
cut off between its writes never leaves a server that nova's API refuses
to act on.
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
from oslo_utils import timeutils

from nova_ironic_multi.division import ownership
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import zones

LOG = logging.getLogger(__name__)

MANUAL = 'manual'
FENCED = 'fenced'
#: The task state of an instance a host is taking over.
CLAIM_PREFIX = 'nim-takeover:'
BINARY = 'nova-compute'
#: Seconds after which a claim is nobody's move (its two writes follow each
#: other within a second).
CLAIM_BOUND = 120
#: Periods between two looks at the claims left on this host's instances.
RELEASE_EVERY = 10
#: The instance action of a takeover, and its event's prefix.
ACTION = recovery.ACTION
#: The instance action of ``nova-ironic-multi takeover`` (the same event).
MANUAL_ACTION = recovery.MANUAL
EVENT_PREFIX = recovery.TAKEOVER_EVENT


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


def claim_state(host: str, original: str | None) -> str:
    """The task state that says ``host`` is taking an instance over."""
    return '%s%s|%s' % (CLAIM_PREFIX, host, original or '')


def parse_claim(task_state: str | None) -> tuple[str, str | None] | None:
    """``(claimer, original task state)`` of a claim, or None."""
    if not task_state or not task_state.startswith(CLAIM_PREFIX):
        return None
    claimer, _, original = task_state[len(CLAIM_PREFIX):].partition('|')
    return claimer, original or None


def abandoned(instance: Any) -> bool:
    """Whether the claim ``instance`` holds is older than the bound.

    The claim's write is the instance's last: its ``updated_at``.
    """
    changed = instance.updated_at or instance.created_at
    return changed is None or timeutils.is_older_than(changed, CLAIM_BOUND)


def release_claims(host: str) -> list[str]:
    """Give back the claims left on ``host``'s instances; their UUIDs.

    A claim of this host (its previous life: it died or failed between a
    move's two writes), or of anyone, older than :data:`CLAIM_BOUND`, is
    nobody's move: the task state the claim holds is put back, and the
    instance stays where it is (a fenced host's is taken over again by the
    takeover; a drained host's waits for the host, as the drain's log
    said). A young claim of another host is that host's move under way.

    Never retried: what fails is left for the next look.

    :raises nova.exception.NovaException:
    :raises oslo_messaging.MessagingException:
    """
    ctxt = nova_context.get_admin_context()
    found = objects.InstanceList.get_by_host(ctxt, host, expected_attrs=[])
    released = []
    for inst in found:
        held = parse_claim(inst.task_state)
        if held is None:
            continue
        claimer, original = held
        if claimer.lower() != host.lower() and not abandoned(inst):
            continue
        claim = inst.task_state
        inst.task_state = original
        try:
            inst.save(expected_task_state=[claim])
        except exception.InstanceUpdateConflict:
            continue        # its claimer finished it meanwhile
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot give back the claim %(claim)s left on '
                        'instance %(inst)s; looked at again later: %(err)s',
                        {'claim': claim, 'inst': inst.uuid, 'err': e})
            continue
        released.append(inst.uuid)
        LOG.warning('Gave back the claim %(claim)s left on instance '
                    '%(inst)s of this host (%(host)s): a move by %(by)s was '
                    'cut off between its two writes. Its task state is %(t)s '
                    'again and it stays on this host.',
                    {'claim': claim, 'inst': inst.uuid, 'host': host,
                     'by': claimer, 't': original})
    return released


class MovedAway(exception.UnexpectedTaskStateError):
    """A request for an instance that another host took over.

    A subclass of nova's unexpected task state error, the one failure after
    which nova's manager leaves the instance alone (it reverts no task
    state: the instance's new host may be acting on it).
    """

    msg_fmt = ('Instance %(instance_uuid)s is now on host %(host)s, not on '
               '%(here)s: a request queued for this host while it was down '
               'is dropped.')


def read_now(uuid: str, deleted: bool = False) -> Any | None:
    """The instance as nova has it now, or None if nova has no such one.

    :param deleted: a deleted instance too.
    :raises nova.exception.NovaException: nova cannot say now.
    :raises oslo_messaging.MessagingException: nova cannot say now.
    """
    ctxt = nova_context.get_admin_context(
        read_deleted='yes' if deleted else 'no')
    try:
        return objects.Instance.get_by_uuid(ctxt, uuid, expected_attrs=[])
    except exception.InstanceNotFound:
        return None


def ensure_here(instance: Any, here: str) -> None:
    """Refuse to act on an instance nova says is on another host.

    A request nova's API queued for a host while it was dead reaches it
    when it comes back, with the instance as it was then: the instance may
    have been taken over since. Its record in nova says where it is now.

    :raises MovedAway: it is on another host now.
    """
    current = read_now(instance.uuid)
    if current is None:
        return
    if current.host and current.host.lower() != here.lower():
        LOG.warning('Instance %(inst)s is now on host %(host)s, not on this '
                    'one (%(here)s): refusing to act on it',
                    {'inst': instance.uuid, 'host': current.host,
                     'here': here})
        raise MovedAway(instance_uuid=instance.uuid, host=current.host,
                        here=here, expected=None, actual=None)


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


def record(instance_uuid: str, old: str, host: str,
           action: str = ACTION, ctxt: Any = None) -> str:
    """Record the takeover as an instance action; its request ID.

    :param action: :data:`ACTION`, or :data:`MANUAL_ACTION` for
        ``nova-ironic-multi takeover``.
    :param ctxt: the context (its cell and request ID) to record it in; a
        new admin context when None.
    :raises nova.exception.NovaException:
    :raises oslo_messaging.MessagingException:
    """
    ctxt = ctxt or nova_context.get_admin_context()
    event = EVENT_PREFIX + old
    objects.InstanceAction.action_start(ctxt, instance_uuid, action,
                                        want_result=False)
    objects.InstanceActionEvent.event_start(ctxt, instance_uuid, event,
                                            want_result=False, host=host)
    objects.InstanceActionEvent.event_finish(ctxt, instance_uuid, event,
                                             want_result=False)
    return str(ctxt.request_id)


def fenced_hosts(services: Iterable[Any]) -> frozenset[str]:
    """Names of the nova-compute ``services`` forced down (nova's fence)."""
    return frozenset(svc.host for svc in services if svc.forced_down)


def move(instance: Any, host: str, fenced: Collection[str],
         members: Collection[str], to: str | None = None) -> bool:
    """Move ``instance`` from one of ``fenced`` to ``to``; True if this call
    did.

    ``host`` claims the instance, and takes it itself unless ``to`` names
    another host: a draining host (:mod:`drain`) hands its own instances
    to its peers the same way, ``fenced`` being itself.

    Never retried: a write that fails leaves the instance for the next
    period (a claim this host holds is finished then).

    :param fenced: lower-cased names of the hosts the instance may be moved
        from (the fenced hosts, or the draining host).
    :param members: the live peers (lower-cased), as the ring knows them.
    :param to: the host the instance moves to; ``host`` when None.
    :raises nova.exception.InstanceUpdateConflict: another writer (a peer,
        nova's API) changed the task state first: this host lost.
    """
    # The read may be a period old: a peer may have moved the instance
    # since and put its task state back, so that a claim compared with the
    # old task state would still succeed. A fresh read first: an instance
    # no longer on a host it may be moved from is left untouched, and one
    # whose task state changed since the caller's read is the caller's to
    # look at again (as if its claim had lost).
    state = instance.task_state
    instance.refresh()
    if (instance.host or '').lower() not in fenced:
        return False
    if instance.task_state != state:
        raise exception.InstanceUpdateConflict(
            instance_uuid=instance.uuid, expected=state,
            actual=instance.task_state)
    held = parse_claim(state)
    if held is None:
        original = state
    else:
        claimer, original = held
        if (claimer.lower() != host.lower() and claimer.lower() in members
                and not abandoned(instance)):
            # A live peer is moving it right now.
            return False
    claim = claim_state(host, original)
    if state != claim:
        instance.task_state = claim
        instance.save(expected_task_state=[state])
    # The claim is held: nobody else writes the task state, and the saved
    # instance shows the host as it is now. (Only if a peer's whole move
    # fell between the fresh read and the claim, one conductor call apart,
    # does the host differ here: the claim is given back below and nothing
    # else changes.)
    moved = (instance.host or '').lower() in fenced
    if moved:
        instance.host = to or host
    instance.task_state = original
    instance.save(expected_task_state=[claim])
    return moved


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
