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

Liveness comes from the heartbeats; the operator's word still comes from
nova: a member whose nova-compute service is disabled or forced down is
not counted, by its peers or by itself, exactly as with ``servicegroup``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple
from urllib import parse

from oslo_log import log as logging
from tooz import coordination

from nova_ironic_multi.membership import base
from nova_ironic_multi.membership import servicegroup
from nova_ironic_multi import partition

LOG = logging.getLogger(__name__)

#: How long a caller waits for the first reading of a new group.
FIRST_READING_WAIT = 5.0


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
    parsed = parse.urlsplit(url)
    query = parse.parse_qs(parsed.query)
    if 'membership_timeout' not in query:
        query['membership_timeout'] = [str(member_timeout)]
    return parse.urlunsplit(parsed._replace(
        query=parse.urlencode(query, doseq=True)))


class Reading(NamedTuple):
    group: str
    at: float
    members: frozenset[str]


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

    def _opts(self) -> Any:
        return self.conf.ironic_multi

    def start(self) -> None:
        if not self._opts().tooz_backend_url:
            raise base.MembershipUnavailable(
                '[ironic_multi] membership_driver = tooz needs '
                '[ironic_multi] tooz_backend_url (for example '
                'redis://127.0.0.1:6379).')
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
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

    def _run(self) -> None:
        url = backend_url(self._opts().tooz_backend_url,
                          self._opts().tooz_member_timeout)
        member = self.host.lower().encode('utf-8')
        coordinator: Any = None
        joined: str | None = None
        while not self._stopped.is_set():
            try:
                if coordinator is None:
                    coordinator = coordination.get_coordinator(url, member)
                    coordinator.start(start_heart=False)
                coordinator.heartbeat()
                want = self._want
                if (want is not None and want != joined and
                        not self.observer):
                    self._join(coordinator, joined, want)
                    joined = want
                group = want if self.observer else joined
                if group is not None:
                    members = coordinator.get_members(
                        group.encode('utf-8')).get()
                    self._reading = Reading(
                        group, time.monotonic(),
                        frozenset(m.decode('utf-8').lower()
                                  for m in members))
                    self._error = 'no error since the last reading'
            except Exception as e:
                self._error = str(e) or type(e).__name__
                LOG.warning('tooz membership: %s; retrying', self._error)
            self._wake.wait(self._opts().tooz_heartbeat_interval)
            self._wake.clear()
        if coordinator is not None:
            try:
                if joined is not None:
                    coordinator.leave_group(joined.encode('utf-8')).get()
                coordinator.stop()
            except Exception:
                LOG.debug('Leaving tooz failed', exc_info=True)

    @staticmethod
    def _join(coordinator: Any, old: str | None, new: str) -> None:
        if old is not None:
            try:
                coordinator.leave_group(old.encode('utf-8')).get()
            except coordination.ToozError:
                LOG.debug('Leaving %s failed', old, exc_info=True)
        try:
            coordinator.create_group(new.encode('utf-8')).get()
        except coordination.GroupAlreadyExist:
            pass
        try:
            coordinator.join_group(new.encode('utf-8')).get()
        except coordination.MemberAlreadyExist:
            pass
        LOG.info('Joined tooz group %s', new)

    def _fresh(self, group: str) -> Reading | None:
        reading = self._reading
        if (reading is None or reading.group != group or
                time.monotonic() - reading.at >
                self._opts().tooz_member_timeout):
            return None
        return reading

    def observe(self, part: partition.Partition) -> frozenset[str]:
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
        members = reading.members
        if part.peers is not None:
            members &= part.peers
        # The heartbeat says a host is alive, not that it may take nodes.
        dropped = {svc.host.lower() for ctxt in self.nova_contexts()
                   for svc in servicegroup.services(ctxt)
                   if servicegroup.exclusion(svc, None) is not None}
        return members - dropped

    def own_exclusion(self) -> str | None:
        return servicegroup.own_exclusion(self.host, None)
