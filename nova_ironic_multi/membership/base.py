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
"""The interface of membership plugins (``nova_ironic_multi.membership``).

A membership plugin answers one question per period: which nova-compute
services, this one included, share the nodes of this partition right now.
Names are lower-cased (nova bug 1866380: upstream let the case of a host
name split the ring). Every plugin must give every host the same member set
for the same facts: a host its peers drop (disabled, forced down, down, not
in ``peer_list``) must drop itself too, or its share is claimed twice; and
a host that drops itself must be dropped by its peers, or its share is
managed by nobody.
"""

from __future__ import annotations

import abc
from typing import Any

from nova import context as nova_context
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.division import partition

LOG = logging.getLogger(__name__)


class MembershipUnavailable(RuntimeError):
    """The peers cannot be determined now; the caller keeps its last state."""


class MembershipMisconfigured(MembershipUnavailable):
    """The plugin's configuration can never work; the message says the fix.

    Raised by :meth:`Membership.start`: nova-compute refuses to start.
    """


class Membership(abc.ABC):
    """Who the live peers are."""

    #: The name the plugin is registered under.
    name: str = ''

    def __init__(self, conf: cfg.ConfigOpts, host: str,
                 observer: bool = False) -> None:
        #: This service's host name as nova knows it (original case).
        self.host = host
        self.conf = conf
        #: Only looking (the CLI): never become a member others can see.
        self.observer = observer
        #: Why this host last left its own ring (None: it is a member).
        self._excluded: str | None = None
        #: nova contexts targeted at the cells whose records
        #: :meth:`observe` reads. None (a compute): this service's own
        #: cell. The CLI, which runs where nova-manage runs and whose
        #: untargeted context reaches ``[database] connection`` (cell0 or
        #: a superconductor's database), sets every cell.
        self.cells: list[Any] | None = None

    def nova_contexts(self) -> list[Any]:
        """The contexts to read nova's records through (see ``cells``)."""
        if self.cells is not None:
            return list(self.cells)
        return [nova_context.get_admin_context()]

    def start(self) -> None:  # noqa: B027 - optional hook
        """Begin taking part (join groups, start heartbeats).

        The driver calls it once from ``init_host``, before the first
        period, and again for a plugin that replaces another. It must not
        wait for a back end (an outage is reported by the periods), but
        should check its configuration.

        :raises MembershipMisconfigured: the configuration cannot work;
            nova-compute refuses to start with the message.
        """

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop taking part; peers see this host leave.

        The driver calls it from ``cleanup_host`` (the service stops) and
        for a plugin being replaced.
        """

    def listed(self, ok: bool) -> None:  # noqa: B027 - optional hook
        """Whether this period's listing of Ironic worked.

        The driver calls it every period, after listing the nodes and
        before asking for the peers. A plugin may let a host that cannot
        list Ironic give its share away (``tooz`` does).
        """

    @abc.abstractmethod
    def observe(self, part: partition.Partition) -> frozenset[str]:
        """The live peers of ``part`` as seen from outside (lower-cased).

        Only hosts of ``part.peers`` when that is set; this host is not
        added. What ``nova-ironic-multi ring show`` reports. nova's
        records are read through :meth:`nova_contexts`.

        :raises MembershipUnavailable: the answer cannot be known now.
        """

    @abc.abstractmethod
    def own_exclusion(self) -> str | None:
        """Why this host's peers do not count it now, or None.

        The same facts :meth:`observe` applies to peers (for example
        ``'disabled'`` or ``'forced down'``), read for this host's own
        nova-compute service.

        :raises MembershipUnavailable: the answer cannot be known now.
        """

    def self_excluded(self, part: partition.Partition) -> str | None:
        """Why this host is not a member of its own ring, or None."""
        me = self.host.lower()
        if part.peers is not None and me not in part.peers:
            return ('it is not in %s (%s); add it there to give it a '
                    'share of the free nodes again'
                    % (part.peers_option, ','.join(sorted(part.peers))))
        reason = self.own_exclusion()
        if reason is not None:
            return 'its nova-compute service is %s' % reason
        return None

    def live_peers(self, part: partition.Partition) -> frozenset[str]:
        """Lower-cased hosts that share the nodes of ``part`` now.

        :meth:`observe`, plus this host unless :meth:`self_excluded` (a new
        service is not yet visible to nova as an Ironic compute, but is a
        member all the same), minus it if it is.

        :raises MembershipUnavailable: the answer cannot be known now.
        """
        live = set(self.observe(part))
        me = self.host.lower()
        reason = self.self_excluded(part)
        if reason is not None:
            live.discard(me)
        else:
            live.add(me)
        if reason != self._excluded:
            if reason is not None:
                LOG.warning('This host (%(host)s) claims no free Ironic '
                            'node and keeps only the nodes of its own '
                            'instances: %(reason)s.',
                            {'host': self.host, 'reason': reason})
            else:
                LOG.info('This host (%(host)s) is a member of its ring '
                         'again and claims its share of the free nodes.',
                         {'host': self.host})
            self._excluded = reason
        return frozenset(live)
