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
"""The side jobs of a period, run one way.

After a period has computed this host's division and swapped its snapshot
in, each side job gets the :class:`Period` and does a bounded piece of work:
remove leftover volume targets, undo deploys given up on, recover instances
taken over in flight, sweep builds no compute claimed, release claims left
on this host's instances, publish how long its instances hold task states
and the settings it divides by.
A job never holds the period and never fails it: :func:`run` times each
one, logs its failure with its own message (the division stands; the next
period tries again) and goes on to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import dataclasses
import time
from typing import Protocol

from nova import context as nova_context
from nova import exception as nova_exc
from nova import objects
from oslo_log import log as logging
import oslo_messaging
from oslo_utils import timeutils

from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi.hosts import moves
from nova_ironic_multi.hosts import recovery
from nova_ironic_multi.hosts import takeover
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import published
from nova_ironic_multi.period import abandoned
from nova_ironic_multi.period import leftovers
from nova_ironic_multi.period import task_ages
from nova_ironic_multi.period import unclaimed

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Period:
    """One period, as its side jobs see it."""

    host: str
    #: 1 for the first period of this process (its start), then 2, 3...
    number: int
    #: The nodes this host managed last period (None at the first).
    before: Mapping[str, nodeinfo.NodeInfo] | None
    #: The nodes it manages now, as just listed.
    after: Mapping[str, nodeinfo.NodeInfo]
    #: The partition the period divided by (None: none known).
    partition: partition_mod.Partition | None = None


class Job(Protocol):
    #: What the log says when the job fails, and when it is tried again.
    failure: str

    def run(self, period: Period) -> None:
        """Do a bounded piece of work; an exception is logged, not raised."""


def run(jobs: Iterable[Job], period: Period) -> None:
    """Run every job once, each contained, in order."""
    for job in jobs:
        started = time.monotonic()
        try:
            job.run(period)
        except Exception:
            LOG.exception('%s', job.failure)
        else:
            LOG.debug('%(job)s took %(seconds).3fs',
                      {'job': type(job).__name__,
                       'seconds': time.monotonic() - started})


class RemoveLeftovers:
    failure = ('Looking for leftover volume targets failed; the next period '
               'looks again')

    def __init__(self, targets: leftovers.LeftoverTargets) -> None:
        self.targets = targets

    def run(self, period: Period) -> None:
        self.targets.sweep(period.before, period.after)


class UndoAbandoned:
    failure = 'Undoing deploys given up on failed; the next period tries again'

    def __init__(self, deploys: abandoned.AbandonedDeploys) -> None:
        self.deploys = deploys

    def run(self, period: Period) -> None:
        self.deploys.sweep()


class Recover:
    # After the snapshot's swap: what a recovery casts to this host's
    # manager finds the taken over nodes among this host's.
    failure = ('Recovering instances taken over in flight failed; the next '
               'period tries again')

    def __init__(self, recovering: recovery.Recovery) -> None:
        self.recovering = recovering

    def run(self, period: Period) -> None:
        self.recovering.sweep(period.host)


class SweepUnclaimed:
    failure = ('Looking for builds no compute claimed failed; the next '
               'period looks again')

    def __init__(self, builds: unclaimed.UnclaimedBuilds) -> None:
        self.builds = builds

    def run(self, period: Period) -> None:
        self.builds.sweep(period.host, period.after)


class ReleaseClaims:
    failure = ("Looking for claims left on the instances of this host "
               "failed; looked at again later")

    def run(self, period: Period) -> None:
        # The first period (the start), then every few.
        if (period.number - 1) % takeover.RELEASE_EVERY == 0:
            takeover.release_claims(period.host)


class PublishTaskAges:
    failure = ("Reading the task states of this host's instances failed; "
               "the next period reads them again")

    def run(self, period: Period) -> None:
        task_ages.publish(task_ages.read(period.host), timeutils.utcnow())


class PublishSettings:
    """Publish the settings in force (:mod:`.published`).

    When they change, and every few periods in case the trait was removed.
    """

    failure = ("Publishing this host's settings in placement failed; the "
               "next period tries again")
    #: Periods between two checks that the settings are still published.
    AGAIN_EVERY = 10

    def __init__(self) -> None:
        #: (host, service UUID) of this host's nova-compute service.
        self._service: tuple[str, str] | None = None
        #: The trait last published, and the period that did it.
        self._done: tuple[str, int] | None = None
        self._warned = False

    def _service_uuid(self, host: str) -> str | None:
        if self._service is None or self._service[0] != host:
            svc = objects.Service.get_by_host_and_binary(
                nova_context.get_admin_context(), host, moves.BINARY)
            if svc is None:
                return None     # nova creates the record at start
            self._service = (host, svc.uuid)
        return self._service[1]

    def run(self, period: Period) -> None:
        if period.partition is None:
            return
        settings = published.Settings.of(period.partition)
        try:
            service = self._service_uuid(period.host)
            if service is None:
                return
            trait = published.name(service, settings)
            if (self._done is not None and self._done[0] == trait and
                    period.number - self._done[1] < self.AGAIN_EVERY):
                return
            changed = published.publish(service, settings)
        except (marker.MarkerError, nova_exc.NovaException,
                oslo_messaging.MessagingException) as e:
            if not self._warned:
                LOG.warning('Cannot publish the settings of this host '
                            '(%(host)s) for "nova-ironic-multi upgrade '
                            'check"; tried again each period: %(error)s',
                            {'host': period.host, 'error': e})
            self._warned = True
            return
        self._warned = False
        if changed:
            LOG.info('Published the settings of this host (%(host)s) for '
                     '"nova-ironic-multi upgrade check": %(settings)s',
                     {'host': period.host,
                      'settings': ', '.join(
                          '%s %s' % kv for kv in
                          settings.division().items())})
        self._done = (trait, period.number)
