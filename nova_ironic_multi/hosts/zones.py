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
"""Where a host's instances may go: the same cell and availability zone.

The one rule for every path that moves instances between hosts: the
operator's ``takeover`` (and the destinations ``ring show`` names), the
automatic takeover of a fenced host (:mod:`hosts.takeover`) and a draining
host's
hand-over (:mod:`drain`). A host manages only the instances of its own
cell, and an instance must not change availability zone.
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable
from typing import Any

import nova.conf
from nova import objects

#: The host aggregate metadata that names an availability zone.
AZ_KEY = 'availability_zone'


def of(ctxt: Any, hosts: Collection[str]) -> dict[str, str]:
    """Host (as nova spells it) -> its availability zone.

    nova's rule: the ``availability_zone`` of the host aggregates it is in,
    else ``[DEFAULT] default_availability_zone``. One query.

    :raises nova.exception.NovaException:
    :raises oslo_messaging.MessagingException: (in nova-compute, through
        nova-conductor)
    """
    wanted = set(hosts)
    found: dict[str, set[str]] = collections.defaultdict(set)
    if wanted:
        for agg in objects.AggregateList.get_by_metadata_key(
                ctxt, AZ_KEY, hosts=wanted):
            for name in set(agg.hosts) & wanted:
                found[name].add(agg.metadata[AZ_KEY])
    default = nova.conf.CONF.default_availability_zone
    return {name: ','.join(sorted(found[name])) or default
            for name in wanted}


def refusal(source: str, source_cell: str | None, source_zone: str | None,
            dest: str, dest_cell: str | None,
            dest_zone: str | None) -> str | None:
    """Why ``dest`` may not take ``source``'s instances, or None."""
    if dest_cell != source_cell:
        return ('the destination %s is in cell %r and the source %s in %r: '
                'a host manages only the instances of its own cell. Choose '
                'a destination in cell %r'
                % (dest, dest_cell, source, source_cell, source_cell))
    if dest_zone != source_zone:
        return ('the destination %s is in availability zone %r and the '
                'source %s in %r: the instances would change zone. Choose '
                'a destination in availability zone %r'
                % (dest, dest_zone, source, source_zone, source_zone))
    return None


def eligible(ctxt: Any, sources: Iterable[str], members: Iterable[str],
             services: Iterable[Any]) -> dict[str, dict[str, str | None]]:
    """Per source host: each member (lower-cased) and why it may not take
    that host's instances (None: it may), by :func:`refusal`.

    Run in a nova-compute, which sees only its own cell: ``services`` are
    that cell's nova-compute services (the sources among them); a member
    without one there is of another cell (a membership back end such as
    tooz may group hosts of several cells). One query for the zones.

    :raises nova.exception.NovaException:
    :raises oslo_messaging.MessagingException:
    """
    here = 'this cell'
    names = {svc.host.lower(): svc.host for svc in services}
    wanted = sorted(set(members))
    sources = [names.get(s.lower(), s) for s in sources]
    zone = of(ctxt, [names.get(m, m) for m in wanted] + sources)
    return {src: {m: refusal(src, here, zone[src], names.get(m, m),
                             here if m in names else None,
                             zone[names.get(m, m)])
                  for m in wanted}
            for src in sources}
