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
"""Which Ironic nodes each nova-compute managed, and when, from its log.

Each period the driver refreshes its division (``Managing N Ironic nodes``,
its own DEBUG line) and nova's resource tracker then audits every node the
driver returned (``Auditing locally available compute resources for HOST
(node: NODE)``, nova's DEBUG line). From one refresh to the next the host
manages exactly those nodes: it answers for them, syncs their power state
and writes their compute node records. Two hosts whose spans hold the same
node at the same moment both manage it, which the cell database alone
never shows (the record just follows whichever host wrote last).
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import re
import time
from typing import cast

REFRESH = re.compile(r'Managing \d+ Ironic nodes')
AUDIT = re.compile(r'Auditing locally available compute resources for '
                   r'\S+ \(node: ([^)\s]+)\)')
STAMP = re.compile(r'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?')


def log_time(line: str) -> float:
    """The UNIX time of an oslo.log line (``YYYY-MM-DD HH:MM:SS.mmm``)."""
    stamp = STAMP.match(line)
    assert stamp, line
    return time.mktime(time.strptime(stamp.group(1), '%Y-%m-%d %H:%M:%S')
                       ) + float('0' + (stamp.group(2) or ''))


@dataclasses.dataclass(frozen=True)
class Span:
    """From ``start`` to ``end`` (seconds), ``host`` managed ``nodes``."""

    host: str
    start: float
    end: float
    nodes: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Overlap:
    """A node two hosts managed at once, from ``start`` to ``end``."""

    node: str
    hosts: tuple[str, str]
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def spans(host: str, lines: Iterable[str], until: float) -> list[Span]:
    """The spans of one host's log, up to ``until`` (its death, the end).

    Lines before the first refresh belong to a period whose start the text
    does not show: they are left out, and so is every line from ``until``
    on. A refresh that audits nothing is a span of no node (a start-up
    read, or a host that manages nothing).
    """
    out: list[Span] = []
    start: float | None = None
    nodes: set[str] = set()
    for line in lines:
        if REFRESH.search(line):
            at = log_time(line)
            if at >= until:
                break
            if start is not None:
                out.append(Span(host, start, at, frozenset(nodes)))
            start, nodes = at, set()
        elif start is not None and (m := AUDIT.search(line)):
            nodes.add(m.group(1))
    if start is not None and start < until:
        out.append(Span(host, start, until, frozenset(nodes)))
    return out


def overlaps(all_spans: Iterable[Span]) -> list[Overlap]:
    """Every node that two hosts' spans held at the same moment."""
    found: list[Overlap] = []
    ordered = sorted(all_spans, key=lambda s: (s.start, s.host))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.start >= a.end:
                break
            if b.host == a.host:
                continue
            end = min(a.end, b.end)
            for node in sorted(a.nodes & b.nodes):
                hosts = cast('tuple[str, str]',
                             tuple(sorted((a.host, b.host))))
                found.append(Overlap(node, hosts, b.start, end))
    return found
