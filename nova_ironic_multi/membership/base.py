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
name split the ring). This host is a member unless its own service is
disabled: a disabled service is dropped by its peers, so it must drop
itself too or its share is claimed twice for ever.
"""

from __future__ import annotations

import abc

from oslo_config import cfg

from nova_ironic_multi import partition


class MembershipUnavailable(RuntimeError):
    """The peers cannot be determined now; the caller keeps its last state."""


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

    def start(self) -> None:  # noqa: B027 - optional hook
        """Begin taking part (join groups, start heartbeats)."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop taking part; peers see this host leave."""

    @abc.abstractmethod
    def observe(self, part: partition.Partition) -> frozenset[str]:
        """The live peers of ``part`` as seen from outside (lower-cased).

        Only hosts of ``part.peers`` when that is set; this host is not
        added. What ``nova-ironic-multi ring show`` reports.

        :raises MembershipUnavailable: the answer cannot be known now.
        """

    @abc.abstractmethod
    def self_disabled(self) -> bool:
        """Whether this host's own nova-compute service is disabled."""

    def live_peers(self, part: partition.Partition) -> frozenset[str]:
        """Lower-cased hosts that share the nodes of ``part`` now.

        :meth:`observe`, plus this host unless its own service is disabled
        (a new service is not yet visible to nova as an Ironic compute, but
        is a member all the same), minus it if it is.

        :raises MembershipUnavailable: the answer cannot be known now.
        """
        live = set(self.observe(part))
        me = self.host.lower()
        if self.self_disabled():
            live.discard(me)
        else:
            live.add(me)
        return frozenset(live)
