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
"""Planned scale-in: a host that stops for good hands its instances over.

A node that carries an instance stays with the instance's host, so a host
removed from the fleet strands its instances. With ``[ironic_multi]
drain_on_stop = true`` (read when the service stops), stopping nova-compute
(SIGTERM) hands them to the peers before the process exits:

1. No new builds: the host's nova-compute service is disabled with a reason
   that starts with :data:`REASON`, so the scheduler skips it and the peers
   drop it from their rings (their next period takes its free nodes). In
   threading mode (nova's default) this happens as soon as SIGTERM arrives;
   in eventlet mode, where oslo.service's launcher owns the handlers, as
   soon as the signal's number comes through the process's wake-up pipe
   (both: ``service/signals.on_sigterm``), and at the latest when nova
   calls the driver's ``cleanup_host``.
2. nova's graceful shutdown stops taking requests, skips periodic tasks,
   waits for the operations under way (nova 34: at most ``[DEFAULT]
   manager_shutdown_timeout`` less the 20 seconds it keeps for the clean-up;
   nova 33 sleeps that whole time; nova 32 does not wait) and calls
   ``cleanup_host``, whose time :func:`compat.cleanup_host_seconds` gives.
3. In ``cleanup_host``, each node that carries one of the host's instances,
   or an orphan (an instance nova deleted while the host was down), goes to
   the peer the ring names for it among the eligible peers without this
   host: the members of its partition (up, enabled, running this driver,
   same conductor group or peer list) in the same availability zone. Each
   instance moves with :func:`takeover.move`, the compare-and-swap on the
   task state that the takeover of a fenced host uses: if a peer takes the
   instance over meanwhile (the host was fenced), this host leaves it
   alone; if nova's API acts on it first, the move is tried again with the
   instance as it is now (the action's request waits in this stopping
   host's queue: nobody else would act on it), until the time runs out.
   Each destination is checked (up, enabled, not forced down) before the
   move and again once it holds the instance: a peer that began draining
   meanwhile hands it on to the next host its ring names. The peer's next
   period manages the node (its instance is the peer's now: ownership rule
   1) and nova's resource tracker moves the compute node record, same UUID
   and provider.
   An instance whose action was cut short (a task state still set) gets
   an instance action :data:`recovery.HANDOVER` first; the peer that finds
   it among its instances recovers it as after a takeover
   (:mod:`hosts.recovery`).
4. The process exits. Started again, the host enables its service if it is
   still disabled for the drain (:func:`reenable`), and claims its share of
   the free nodes; the instances stay where they went.

No fence is needed: the host itself stops acting before it hands over.
nova may stop waiting for the operations under way before they end (its
threads go on meanwhile): an instance whose build this process still holds
or runs is handed over only once the build ends, as the build left it.
The moves stop when the time nova leaves ``cleanup_host`` runs out; what is
left stays with this host and is logged with how to finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import dataclasses
import threading
import time
from typing import Any

from nova import context as nova_context
from nova import exception
from nova import objects
from nova import servicegroup
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi import compat
from nova_ironic_multi.hosts import drained
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.hosts import zones
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

# The drained service, from where it lives (callers name it here too).
REASON = drained.REASON
BINARY = drained.BINARY
disable = drained.disable
reenable = drained.reenable

#: Seconds kept back from the time nova leaves ``cleanup_host``: a move
#: under way when nova stops waiting could leave its claim behind.
MARGIN = 2.0
#: Seconds between two looks at an instance a live peer holds a claim on.
RETRY = 0.5
#: :meth:`Drain._after_build` at the deadline.
_STILL_BUILDING = object()


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a draining host hands over (:meth:`Inventory.handover`)."""

    #: The eligible peers, lower-cased.
    members: frozenset[str]
    #: Instance UUID -> the node that carries it, for this host's live
    #: instances and its orphans.
    instances: Mapping[str, str]
    #: Node UUID -> the member the ring gives it without this host.
    destinations: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Result:
    """What a drain did."""

    #: Instance UUID -> the host it went to.
    moved: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Instance UUIDs left with this host.
    left: frozenset[str] = frozenset()
    #: No hand-over could be tried (no time, or no plan).
    refused: bool = False


def enabled(conf: cfg.ConfigOpts) -> bool:
    # Mutable: read at use time.
    return bool(conf.ironic_multi.drain_on_stop)


def budget(conf: cfg.ConfigOpts) -> tuple[float, str]:
    """Seconds the moves may take: what nova leaves ``cleanup_host``.

    With the options that set them (:func:`compat.cleanup_host_seconds`).
    """
    seconds, options = compat.cleanup_host_seconds(conf)
    return max(0.0, seconds - MARGIN), options


class Drain:
    """One host's drain: :meth:`begin` at SIGTERM, :meth:`run` at stop."""

    def __init__(self, conf: cfg.ConfigOpts,
                 handover: Callable[[Callable[[frozenset[str]],
                                              frozenset[str]]], Plan],
                 building: Callable[[str], bool] = lambda uuid: False
                 ) -> None:
        """:param handover: :meth:`inventory.Inventory.handover`.

        :param building: whether this process still holds or runs the build
            of an instance (nova may stop waiting for the operations under
            way before they end: its threads go on meanwhile).
        """
        self._conf = conf
        self._handover = handover
        self._building = building
        self._lock = threading.Lock()
        self._begun = False
        #: Lower-cased member -> its host name as nova writes it.
        self._names: dict[str, str] = {}
        #: The plan the moves follow, re-made when a peer is refused.
        self._plan: Plan | None = None
        #: Lower-cased peers found draining or down during the moves.
        self._refused: set[str] = set()
        self._servicegroup: Any = None

    def begin(self, host: str) -> None:
        """Stop taking new builds (once), if the drain is on."""
        if not enabled(self._conf):
            return
        with self._lock:
            if self._begun:
                return
            self._begun = True
            try:
                disable(host)
            except (exception.NovaException,
                    oslo_messaging.MessagingException) as e:
                # The hand-over goes on: the peers keep the nodes of their
                # instances whatever their rings say.
                LOG.error('Draining: cannot disable nova-compute on %(host)s '
                          '(%(err)s); the scheduler may still send it '
                          'builds until it is down', {'host': host, 'err': e})

    def eligible(self, host: str, members: frozenset[str]) -> frozenset[str]:
        """The members that may take this host's instances.

        Up, enabled and running this driver in the same partition: the
        membership plugin said so. And in this host's cell and
        availability zone (:func:`zones.refusal`, the rule of every move),
        so that no instance changes zones.

        :raises NovaException, MessagingException: nova cannot say.
        """
        ctxt = nova_context.get_admin_context()
        services = list(objects.ServiceList.get_by_binary(ctxt, BINARY))
        names = {svc.host.lower(): svc.host for svc in services
                 if svc.host.lower() in members}
        # The rule of every move (zones.refusal): same cell and zone.
        (why,) = zones.eligible(ctxt, [host], names, services).values()
        chosen = {}
        for lower, name in names.items():
            if why[lower] is None:
                chosen[lower] = name
            else:
                LOG.info('Draining: %(peer)s takes none of this host\'s '
                         'instances: %(why)s', {'peer': name,
                                                 'why': why[lower]})
        self._names = chosen
        return frozenset(chosen)

    def run(self, host: str) -> Result:
        """Hand this host's instances over (``cleanup_host``).

        Never raises: what cannot move stays, and the log says what to do.
        """
        if not enabled(self._conf):
            return Result()
        result = self._run(host)
        if result.refused:
            metrics.DRAINS.labels('refused').inc()
        else:
            metrics.DRAINS.labels('left' if result.left else 'done').inc()
        metrics.HANDOVERS.inc(len(result.moved))
        return result

    def _run(self, host: str) -> Result:
        started = time.monotonic()
        seconds, options = budget(self._conf)
        deadline = started + seconds
        self.begin(host)
        if deadline <= started:
            LOG.error('Draining: %(options)s leaves no time to hand the '
                      'instances of %(host)s over: they stay with it. nova '
                      'must leave its driver\'s clean-up more than %(min)d '
                      's (see the operations guide, "Planned scale-in").',
                      {'options': options, 'host': host,
                       'min': int(MARGIN)})
            return Result(refused=True)
        try:
            plan = self._handover(lambda m: self.eligible(host, m))
            found = self._instances(host, plan)
        except Exception as e:
            LOG.error('Draining: cannot hand the instances of %(host)s over '
                      '(%(err)s). They stay with %(host)s: start it again '
                      'and stop it with drain_on_stop, or fence it and let '
                      'its peers take them over.', {'host': host, 'err': e})
            return Result(refused=True)
        if not plan.instances:
            LOG.info('Draining: %s has no instance to hand over', host)
            return Result()
        if not plan.members:
            LOG.error('Draining: no eligible peer (up, enabled, running this '
                      'driver in the same partition and availability zone) '
                      'can take the %(n)d instance(s) of %(host)s: they '
                      'stay with it until it starts again.',
                      {'n': len(plan.instances), 'host': host})
            return Result(left=frozenset(plan.instances))
        result = self._move_all(host, plan, found, deadline)
        LOG.info('Draining: %(moved)d instance(s) of %(host)s handed over, '
                 '%(left)d left, in %(secs).1fs',
                 {'moved': len(result.moved), 'host': host,
                  'left': len(result.left),
                  'secs': time.monotonic() - started})
        if result.left:
            LOG.error('Draining: instances %(left)s stay with %(host)s. '
                      'Start it again and stop it with drain_on_stop, or '
                      'fence it ("openstack compute service set --down '
                      '%(host)s nova-compute") and run "nova-ironic-multi '
                      'takeover".', {'left': ', '.join(sorted(result.left)),
                                     'host': host})
        return result

    @staticmethod
    def _instances(host: str, plan: Plan) -> list[Any]:
        if not plan.instances:
            return []
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        return list(objects.InstanceList.get_by_filters(
            ctxt, {'uuid': sorted(plan.instances), 'host': host},
            expected_attrs=[]))

    def refusal(self, peer: str) -> str | None:
        """Why ``peer`` may not take an instance now (:func:`refusal`)."""
        if self._servicegroup is None:
            self._servicegroup = servicegroup.API()
        return drained.refusal(peer, self._servicegroup)

    def _destination(self, host: str, node: str) -> str | None:
        """The peer ``node`` goes to, or None.

        The plan's, or a new plan's when the plan's peer was refused since
        (it is left out of the new ring).
        """
        plan = self._plan
        assert plan is not None
        lower = plan.destinations.get(node)
        if lower is not None and lower not in self._refused:
            return self._names.get(lower)
        if lower is None or not plan.members - self._refused:
            return None
        refused = frozenset(self._refused)
        try:
            self._plan = plan = self._handover(
                lambda m: self.eligible(host, m - refused))
        except Exception as e:
            LOG.error('Draining: cannot plan again without %(refused)s: '
                      '%(err)s', {'refused': ', '.join(sorted(refused)),
                                  'err': e})
            return None
        lower = plan.destinations.get(node)
        if lower is None or lower in self._refused:
            return None
        return self._names.get(lower)

    def _move_all(self, host: str, plan: Plan, found: Iterable[Any],
                  deadline: float) -> Result:
        moved: dict[str, str] = {}
        left: set[str] = set()
        self._plan, self._refused = plan, set()
        for inst in found:
            node = plan.instances[inst.uuid]
            if self._building(inst.uuid):
                built = self._after_build(host, inst, deadline)
                if built is _STILL_BUILDING:
                    left.add(inst.uuid)
                    continue
                if built is None:
                    continue
                inst = built
            if inst.node and inst.node != node:
                LOG.warning('Draining: instance %(inst)s is recorded on node '
                            '%(rec)s, but node %(node)s carries it: not '
                            'handed over', {'inst': inst.uuid,
                                            'rec': inst.node, 'node': node})
                left.add(inst.uuid)
                continue
            went = self._hand_over(host, inst, node, deadline)
            if went is None:
                left.add(inst.uuid)
            else:
                moved[inst.uuid] = went
        return Result(moved, frozenset(left))

    def _after_build(self, host: str, inst: Any, deadline: float) -> Any:
        """Wait for this process's build of ``inst`` to end, then re-read it.

        Handed over while its build thread still runs here, the instance
        would be written by both hosts: the new one recovers it (ERROR),
        this one's build then fails to save and nova, as for any failed
        build, clears its host, which leaves the node deployed for a server
        no host manages (seen in the long soak, seed 2, with nova's wait
        for the operations under way at 0 s).

        :returns: the instance as its build left it; None if it is no
            longer this host's (deleted, or its build failed and nova
            cleared its host); :data:`_STILL_BUILDING` at the deadline.
        """
        LOG.info('Draining: the build of instance %s still runs on this '
                 'host; handing it over once it ends', inst.uuid)
        while self._building(inst.uuid):
            if time.monotonic() >= deadline:
                LOG.error('Draining: the build of instance %(inst)s still '
                          'runs on %(host)s: not handed over; it stays '
                          'with %(host)s, whose start recovers it.',
                          {'inst': inst.uuid, 'host': host})
                return _STILL_BUILDING
            time.sleep(RETRY)
        current = self._reread(inst)
        if current is None:
            return None
        if (current.host or '').lower() != host.lower():
            LOG.info('Draining: instance %(inst)s is no longer on this host '
                     'after its build (host %(other)s): nothing to hand over',
                     {'inst': inst.uuid, 'other': current.host})
            return None
        return current

    def _hand_over(self, host: str, inst: Any, node: str,
                   deadline: float) -> str | None:
        """Move one instance to a peer; the host it is on then, or None
        (it stays with this host).

        A move that loses to another writer (nova's API acting on the
        instance, a peer's claim) is tried again with the instance as it is
        now, until the deadline. A peer found draining or down once it
        holds the instance hands it on to the next one the ring names.
        """
        source = host
        recorded: tuple[str | None] | None = None
        while True:
            if time.monotonic() >= deadline:
                return self._not_handed_over(inst, source, host)
            dest = self._destination(host, node)
            if dest is None:
                LOG.warning('Draining: no eligible peer for node %(node)s '
                            'of instance %(inst)s',
                            {'inst': inst.uuid, 'node': node})
                return self._not_handed_over(inst, source, host)
            why = self.refusal(dest)
            if why is not None:
                LOG.warning('Draining: %(peer)s takes none of the instances '
                            'of %(host)s: %(why)s', {'peer': dest,
                                                      'host': host,
                                                      'why': why})
                self._refused.add(dest.lower())
                continue
            state = inst.task_state
            held = takeover.parse_claim(state)
            plain = held[1] if held is not None else state
            recover = (not inst.deleted and
                       recovery.needs_recovery(inst.vm_state, plain))
            if recover and recorded != (plain,):
                # Before the move, and again if nova's API acted since:
                # the new host recovers the instance under the last action.
                drained.record_handover(inst.uuid, source)
                recorded = (plain,)
            try:
                done = takeover.move(inst, host,
                                    frozenset([source.lower()]),
                                    self._plan.members if self._plan
                                    else frozenset(), to=dest)
            except exception.InstanceUpdateConflict as e:
                LOG.info('Draining: instance %(inst)s changed while it was '
                         'handed over (%(err)s): trying again',
                         {'inst': inst.uuid, 'err': e})
                done = False
            except (exception.NovaException,
                    oslo_messaging.MessagingException) as e:
                LOG.error('Draining: handing instance %(inst)s on node '
                          '%(node)s over to %(dest)s failed: %(err)s',
                          {'inst': inst.uuid, 'node': node, 'dest': dest,
                           'err': e})
                return self._not_handed_over(inst, source, host)
            if not done:
                current = self._reread(inst)
                if current is None:
                    return self._not_handed_over(inst, source, host)
                inst = current
                if (inst.host or '').lower() != source.lower():
                    LOG.info('Draining: instance %(inst)s was moved to '
                             '%(other)s by another host meanwhile',
                             {'inst': inst.uuid, 'other': inst.host})
                    return str(inst.host)
                if takeover.parse_claim(inst.task_state) is not None:
                    # A live peer's claim is being finished: look again.
                    time.sleep(RETRY)
                continue
            LOG.info('Draining: handed Ironic node %(node)s with %(kind)s '
                     '%(inst)s over to %(dest)s, which the ring names for '
                     'it without this host (%(host)s).%(state)s',
                     {'node': node, 'inst': inst.uuid, 'dest': dest,
                      'host': host,
                      'kind': ('deleted instance' if inst.deleted
                               else 'instance'),
                      'state': (' It was %s/%s when the operations under '
                                'way were waited for: its new host '
                                'recovers it.' % (inst.vm_state, plain)
                                if recover else '')})
            # The window between the check and the move: a peer that began
            # draining meanwhile may have read its instances before this
            # one arrived. Checked again now that it holds it.
            why = self.refusal(dest)
            if why is None:
                return dest
            LOG.warning('Draining: %(peer)s, which now holds instance '
                        '%(inst)s, cannot keep it: %(why)s; handing it on',
                        {'peer': dest, 'inst': inst.uuid, 'why': why})
            self._refused.add(dest.lower())
            source = dest

    @staticmethod
    def _not_handed_over(inst: Any, source: str, host: str) -> str | None:
        """None (it stays with this host), or the peer that holds it.

        A peer that holds it but cannot keep it is named at ERROR, with
        what to do.
        """
        if source == host:
            return None
        LOG.error('Draining: instance %(inst)s is on %(peer)s, which cannot '
                  'keep it, and could not be handed on. Fence %(peer)s '
                  '("openstack compute service set --down %(peer)s '
                  'nova-compute") so that its peers take it over, or start '
                  'it again.', {'inst': inst.uuid, 'peer': source})
        return source

    @staticmethod
    def _reread(inst: Any) -> Any | None:
        """The instance as nova has it now, or None (gone, or unreadable)."""
        try:
            return takeover.read_now(inst.uuid, deleted=True)
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.error('Draining: cannot read instance %(inst)s again: '
                      '%(err)s', {'inst': inst.uuid, 'err': e})
            return None
