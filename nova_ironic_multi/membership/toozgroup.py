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
"""Peers from a tooz group with heartbeats (``membership_driver = tooz``).

Every service joins the group of its partition (``tooz_group`` plus the
conductor group and shard in force) and heartbeats every
``tooz_heartbeat_interval`` seconds. A service that stops heartbeating
drops out after ``tooz_member_timeout`` seconds, so its free nodes are
taken over in seconds instead of nova's ``service_down_time``.

All talk with the back end happens on one background thread, which also
reads the members after each heartbeat. tooz retries an unreachable back
end for about a minute per call; the resource tracker never waits for that:
when the last reading is older than ``tooz_member_timeout`` it is told the
peers are unknown, and keeps its nodes as they are.

Healing. Every heartbeat checks that this host is in the members it reads,
not that it once joined: a membership that expired (a stalled process, a
network blip) or a group the back end lost (a restart without persistence,
a flushed database) is re-created and joined again in the same heartbeat.
Until its own membership is visible to itself, the host counts itself out
of its ring (it keeps only the nodes of its own instances): never in, or it
would claim a share its peers have already divided among themselves.

Giving the share away. A host that has not listed Ironic for
:data:`STEP_ASIDE_AFTER` periods in a row leaves the group, so its peers
take its free nodes, and joins again after its next good listing; each
member publishes whether its last listing worked (as its tooz capabilities).
It leaves only while another member says its own listing works: when Ironic
is down for everyone no host leaves (none could serve anyway, and hosts
coming back one by one would pass the free nodes around).

Liveness comes from the heartbeats; the operator's word still comes from
nova: a member whose nova-compute service is disabled or forced down is
not counted, by its peers or by itself, exactly as with ``servicegroup``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

from oslo_log import log as logging
import tooz
from tooz import coordination

from nova_ironic_multi import compat
from nova_ironic_multi.division import partition
from nova_ironic_multi.membership import base
from nova_ironic_multi.membership import servicegroup
from nova_ironic_multi.membership import tooz_backends as backends

LOG = logging.getLogger(__name__)

#: How long a caller waits for the first reading of a new group.
FIRST_READING_WAIT = 5.0

#: Failed Ironic listings in a row after which a host leaves its group.
STEP_ASIDE_AFTER = 3

#: The capability a member publishes: whether its last listing worked.
LISTING = 'listing'


def group_name(prefix: str, scope: partition.Scope) -> str:
    """The tooz group of a partition: peers of other scopes never mix."""
    parts = [prefix]
    if scope.conductor_group is not None:
        parts.append('cg=' + scope.conductor_group)
    if scope.shard is not None:
        parts.append('shard=' + scope.shard)
    return '/'.join(parts)


def backend_url(url: str, member_timeout: int) -> str:
    """``url`` with the member timeout, unless the URL sets its own."""
    return backends.with_member_timeout(url, member_timeout)


class Reading(NamedTuple):
    group: str
    at: float
    members: frozenset[str]
    #: The members whose last Ironic listing worked, as they published it.
    listing: frozenset[str] = frozenset()


def _decode(member: bytes | str) -> str:
    if isinstance(member, bytes):
        member = member.decode('utf-8')
    return member.lower()


class ToozMembership(base.Membership):
    """Members of a tooz group that keep heartbeating."""

    name = 'tooz'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._want: str | None = None
        self._reading: Reading | None = None
        self._error: str = 'no reading yet'
        #: The group the background thread last joined (its own state).
        self._joined: str | None = None
        #: What this host published as its capabilities there.
        self._published: dict[str, bool] | None = None
        #: False while this host steps aside (it cannot list Ironic).
        self._taking_part = True
        self._failed_listings = 0
        self._listing_ok = False
        #: How many times this host found itself missing and joined again.
        self.rejoins = 0

    def _opts(self) -> Any:
        return self.conf.ironic_multi

    def start(self) -> None:
        url = self._opts().tooz_backend_url
        try:
            backends.check(url)
        except backends.Unusable as e:
            raise base.MembershipMisconfigured(str(e)) from e
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                if backends.one_machine(url):
                    LOG.warning('%s reaches the processes of this machine '
                                'only: peers on other machines never see '
                                'this host.', backends.OPTION)
                self._stopped.clear()
                self._thread = threading.Thread(
                    target=self._run, name='nova-ironic-multi-tooz',
                    daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            # A back end that does not answer keeps tooz retrying; the
            # thread is a daemon and ends with the process.
            thread.join(timeout=2.0)

    # The background thread ------------------------------------------------

    def _connect(self, url: str, member: bytes) -> Any:
        """A started tooz coordinator (a seam for the fault tests)."""
        coordinator = coordination.get_coordinator(url, member)
        coordinator.start(start_heart=False)
        return coordinator

    def _run(self) -> None:
        url = backend_url(self._opts().tooz_backend_url,
                          self._opts().tooz_member_timeout)
        member = self.host.lower().encode('utf-8')
        coordinator: Any = None
        while not self._stopped.is_set():
            try:
                if coordinator is None:
                    coordinator = self._connect(url, member)
                coordinator.heartbeat()
                self._beat(coordinator)
            except Exception as e:
                self._error = str(e) or type(e).__name__
                LOG.warning('tooz membership: %s; retrying', self._error)
            self._wake.wait(self._opts().tooz_heartbeat_interval)
            self._wake.clear()
        if coordinator is not None:
            try:
                if self._joined is not None:
                    coordinator.leave_group(
                        self._joined.encode('utf-8')).get()
                coordinator.stop()
            except Exception:
                LOG.debug('Leaving tooz failed', exc_info=True)
            self._joined = None

    def _beat(self, coordinator: Any) -> None:
        """One heartbeat's work: be where this host should be, then read."""
        want = self._want
        member_of = (want if not self.observer and self._taking_part
                     else None)
        if self._joined is not None and self._joined != member_of:
            self._leave(coordinator, self._joined)
        if want is None:
            return
        me = self.host.lower()
        reading = self._read(coordinator, want)
        if member_of is not None and me not in reading.members:
            if self._joined is not None:
                # It was a member: stored now, so that until it sees itself
                # again the host counts itself out (self_excluded), however
                # long joining takes.
                self._reading = reading
                LOG.warning('This host (%(host)s) is missing from tooz group '
                            '%(group)s (its membership expired or the '
                            'group was lost): joining it again.',
                            {'host': self.host, 'group': want})
                self.rejoins += 1
            self._join(coordinator, want)
            reading = self._read(coordinator, want)
        elif member_of is not None and self._published != self._caps():
            self._publish(coordinator, want)
        self._reading = reading
        self._error = 'no error since the last reading'

    def _caps(self) -> dict[str, bool]:
        return {LISTING: self._listing_ok}

    def _read(self, coordinator: Any, group: str) -> Reading:
        try:
            found = compat.members_with_capabilities(
                coordinator, group.encode('utf-8'))
        except coordination.GroupNotCreated:
            # Lost with the back end's data, or never created yet.
            found = {}
        members = frozenset(_decode(m) for m in found)
        listing = frozenset(_decode(m) for m, caps in found.items()
                            if isinstance(caps, dict) and caps.get(LISTING))
        return Reading(group, time.monotonic(), members, listing)

    def _publish(self, coordinator: Any, group: str) -> None:
        """Publish this host's capabilities in ``group``, which it is in."""
        caps = self._caps()
        try:
            coordinator.update_capabilities(group.encode('utf-8'),
                                            caps).get()
        except tooz.NotImplemented:
            # (The file driver cannot update them: join again with them.)
            self._leave(coordinator, group)
            self._join(coordinator, group)
        self._published = caps

    def _join(self, coordinator: Any, group: str) -> None:
        """Join ``group``, creating it first if it does not exist."""
        encoded = group.encode('utf-8')
        caps = self._caps()
        try:
            coordinator.create_group(encoded).get()
        except coordination.GroupAlreadyExist:
            pass
        try:
            coordinator.join_group(encoded, caps).get()
        except coordination.MemberAlreadyExist:
            # Joined, though its last reading did not show it (a reading
            # before the join landed): publish and read again next beat.
            self._joined = group
            self._publish(coordinator, group)
            return
        self._joined = group
        self._published = caps
        LOG.info('Joined tooz group %s', group)

    def _leave(self, coordinator: Any, group: str) -> None:
        try:
            coordinator.leave_group(group.encode('utf-8')).get()
        except (coordination.GroupNotCreated, coordination.MemberNotJoined):
            pass
        self._joined = None
        self._published = None
        LOG.info('Left tooz group %s', group)

    # The periods ----------------------------------------------------------

    def _fresh(self, group: str) -> Reading | None:
        reading = self._reading
        if (reading is None or reading.group != group or
                time.monotonic() - reading.at >
                self._opts().tooz_member_timeout):
            return None
        return reading

    def _current(self, part: partition.Partition) -> Reading:
        """A fresh reading of the group of ``part`` (waits for a first).

        :raises MembershipUnavailable: none within :data:`FIRST_READING_WAIT`.
        """
        group = group_name(self._opts().tooz_group, part.scope)
        if self._want != group:
            self._want = group
            self._wake.set()
        self.start()
        deadline = time.monotonic() + FIRST_READING_WAIT
        reading = self._fresh(group)
        while reading is None and time.monotonic() < deadline:
            time.sleep(0.05)
            reading = self._fresh(group)
        if reading is None:
            raise base.MembershipUnavailable(
                'no fresh reading of tooz group %s (last error: %s)'
                % (group, self._error))
        return reading

    def observe(self, part: partition.Partition) -> frozenset[str]:
        members = self._current(part).members
        if part.peers is not None:
            members &= part.peers
        # The heartbeat says a host is alive, not that it may take nodes.
        dropped = {svc.host.lower() for ctxt in self.nova_contexts()
                   for svc in servicegroup.services(ctxt)
                   if servicegroup.exclusion(svc, None) is not None}
        return members - dropped

    def own_exclusion(self) -> str | None:
        return servicegroup.own_exclusion(self.host, None)

    def self_excluded(self, part: partition.Partition) -> str | None:
        reason = super().self_excluded(part)
        if reason is not None:
            return reason
        if not self._taking_part:
            return ('it has not listed Ironic for %d periods or more, so '
                    'it left its tooz group for its peers to take its free '
                    'nodes; it joins again after its next good listing'
                    % STEP_ASIDE_AFTER)
        reading = self._current(part)
        if self.host.lower() not in reading.members:
            return ('its membership of tooz group %s is not visible yet '
                    '(it expired, or the group was lost): it is joining '
                    'again' % reading.group)
        return None

    def listed(self, ok: bool) -> None:
        self._listing_ok = ok
        if ok:
            self._failed_listings = 0
            if not self._taking_part:
                LOG.info('This host (%s) lists Ironic again: it joins its '
                         'tooz group again.', self.host)
                self._taking_part = True
        else:
            self._failed_listings += 1
            if (self._taking_part and
                    self._failed_listings >= STEP_ASIDE_AFTER):
                self._step_aside()
        # Publish the outcome (and join or leave) now, not a beat later.
        self._wake.set()

    def _step_aside(self) -> None:
        me = self.host.lower()
        reading = self._fresh(self._want) if self._want else None
        serving = set(reading.listing) - {me} if reading else set()
        if not serving:
            log = (LOG.warning if self._failed_listings == STEP_ASIDE_AFTER
                   else LOG.debug)
            log('This host (%(host)s) has not listed Ironic for '
                        '%(n)d periods, and no peer in its tooz group '
                        'lists it either: it stays (leaving would leave '
                        'nobody to serve when Ironic is back).',
                        {'host': self.host, 'n': self._failed_listings})
            return
        LOG.warning('This host (%(host)s) has not listed Ironic for %(n)d '
                    'periods while its peers (%(peers)s) can: it leaves its '
                    'tooz group so they take its free nodes, and joins '
                    'again after its next good listing.',
                    {'host': self.host, 'n': self._failed_listings,
                     'peers': ', '.join(sorted(serving))})
        self._taking_part = False
