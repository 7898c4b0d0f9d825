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
"""Moving an instance to another host, guarded by its task state.

The takeover of a fenced host, the drain of a stopping one and the
``nova-ironic-multi takeover`` command all move instances this way.

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
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from nova import context as nova_context
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging
from oslo_utils import timeutils

from nova_ironic_multi.hosts import recovery

LOG = logging.getLogger(__name__)

BINARY = 'nova-compute'
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
