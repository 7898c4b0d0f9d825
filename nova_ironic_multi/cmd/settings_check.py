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
"""Whether this command's files divide as the running hosts do.

The command divides by its own configuration. Run from a controller
without the computes' ``[ironic_multi]`` options it would show, and
``shards apply`` would label, another division than the hosts run. The
hosts publish the settings they divide by (:mod:`.published`); this
module compares them with the command's own and says, by option and by
host, where they differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import published

#: What to do, after every difference.
FIX = ('Run this command with the nova.conf of a compute of that scope '
       '(its [ironic_multi] and [ironic] options), or give it the same '
       'options.')


def _hosts(hosts: Iterable[str]) -> str:
    return ', '.join(sorted(hosts))


def differences(part: partition_mod.Partition,
                by_host: Mapping[str, published.Settings]) -> list[str]:
    """How ``part`` differs from what the running hosts publish.

    :param by_host: host -> the settings it published (running hosts).
    :returns: one sentence per difference; none when the hosts publish
        nothing or divide as ``part`` does.
    """
    if not by_host:
        return []
    mine = published.Settings.of(part)
    scope = mine.scope()
    same = {h: s for h, s in by_host.items() if s.scope() == scope}
    if not same:
        scopes: dict[str, list[str]] = {}
        for host, settings in by_host.items():
            scopes.setdefault(settings.scope(), []).append(host)
        return ['No running host divides %s, as this command\'s files '
                'say; the hosts divide %s. %s' % (
                    scope, '; '.join('%s (%s)' % (s, _hosts(h))
                                     for s, h in sorted(scopes.items())),
                    FIX)]
    found = []
    want = mine.division()
    for option, value in want.items():
        theirs: dict[str, list[str]] = {}
        for host, settings in same.items():
            other = settings.division()[option]
            if other != value:
                theirs.setdefault(other, []).append(host)
        for other, hosts in sorted(theirs.items()):
            found.append('%s is %s in this command\'s files and %s on %s, '
                         'which divide%s %s. %s' % (
                             option, value, other, _hosts(hosts),
                             '' if len(hosts) > 1 else 's', scope, FIX))
    return found


def running(services: Iterable[Any], up: Any) -> dict[str, published.Settings]:
    """Host -> the settings it published, for the running services.

    :param up: whether a service is up (nova's servicegroup API).
    :raises marker.MarkerError: placement cannot say.
    """
    settings = published.read()
    return {svc.host.lower(): settings[svc.uuid][0]
            for svc in services
            if len(settings.get(svc.uuid, ())) == 1 and up(svc)}


def check(part: partition_mod.Partition, services: Iterable[Any],
          up: Any) -> tuple[list[str], str | None,
                            dict[str, published.Settings]]:
    """:func:`differences` against the running hosts; never raises.

    :returns: the differences, why the hosts' settings could not be read
        (None when they were), and what each running host published.
    """
    try:
        by_host = running(services, up)
    except marker.MarkerError as e:
        return [], ('Cannot read the settings the hosts publish, so this '
                    'command cannot tell whether it divides as they do: %s'
                    % e), {}
    return differences(part, by_host), None, by_host


def scope_of(settings: published.Settings) -> partition_mod.Scope | None:
    """The nodes a host published that it divides.

    None when not knowable: a value too long for the trait was published
    as its digest.
    """
    values = (settings.conductor_group, settings.shard)
    if any(v is not None and v.startswith('#') for v in values):
        return None
    return partition_mod.Scope(*values)


def elsewhere(hosts: Mapping[str, Any], scope: partition_mod.Scope
              ) -> dict[str, list[str]]:
    """Running hosts that divide another scope than ``scope`` (as they
    publish) -> the nodes of their servers in it, which nobody manages.
    """
    found = {}
    for name, host in sorted(hosts.items()):
        kept = (host.with_instance | host.orphaned) - host.managed
        if (host.running and host.scope is not None and
                host.scope != scope and kept):
            found[name] = sorted(kept)
    return found


def lines(differ: list[str], unread: str | None) -> list[str]:
    """The output lines of a comparison (none when all is the same)."""
    if unread:
        return ['', 'Note: %s' % unread]
    if not differ:
        return []
    return ['', 'Warning: this division is this command\'s, not the '
            'running hosts\':'] + ['  %s' % d for d in differ]
