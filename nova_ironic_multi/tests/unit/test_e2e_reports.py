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
"""The end-to-end tier's reading of which host managed which node when."""

from __future__ import annotations

from nova_ironic_multi.tests.e2e import reports

DAY = '2026-03-01 10:00:'


def refresh(sec: str, count: int = 1) -> str:
    return ('%s%s 123 DEBUG '
            'nova_ironic_multi.period.inventory [-] Managing %d '
            'Ironic nodes (0 with this host\'s instances) of 6 listed'
            % (DAY, sec, count))


def audit(sec: str, host: str, node: str) -> str:
    return ('%s%s 123 DEBUG nova.compute.resource_tracker [None req-1 - - '
            '- - - -] Auditing locally available compute resources for %s '
            '(node: %s) update_available_resource /x/resource_tracker.py:'
            '938' % (DAY, sec, host, node))


def at(sec: float) -> float:
    return reports.log_time(DAY + '00.000') + sec


def test_spans_run_from_one_refresh_to_the_next() -> None:
    lines = [
        audit('00.500', 'host1', 'before-the-first-refresh'),
        refresh('01.000', 2), audit('01.100', 'host1', 'n1'),
        audit('01.200', 'host1', 'n2'),
        'some other line',
        refresh('06.000'), audit('06.300', 'host1', 'n2'),
        # A start-up read: nothing audited after it.
        refresh('11.250', 0),
    ]
    got = reports.spans('host1', lines, until=at(14))
    assert got == [
        reports.Span('host1', at(1), at(6), frozenset({'n1', 'n2'})),
        reports.Span('host1', at(6), at(11.25), frozenset({'n2'})),
        reports.Span('host1', at(11.25), at(14), frozenset()),
    ]
    # Until its death: the span it was in ends there, nothing follows.
    assert reports.spans('host1', lines, until=at(3)) == [
        reports.Span('host1', at(1), at(3), frozenset({'n1', 'n2'}))]
    assert reports.spans('host1', [], until=at(3)) == []


def test_overlaps_name_each_node_two_hosts_held_at_once() -> None:
    spans = [
        reports.Span('host1', at(0), at(5), frozenset({'n1', 'n2'})),
        reports.Span('host1', at(5), at(10), frozenset({'n1'})),
        # host3 takes n2 at 3 s, before host1 lets it go at 5 s.
        reports.Span('host3', at(3), at(8), frozenset({'n2', 'n3'})),
        # host2 takes n1 only after host1's spans end.
        reports.Span('host2', at(10), at(15), frozenset({'n1'})),
        # The same host twice is never an overlap.
        reports.Span('host3', at(7), at(9), frozenset({'n3'})),
    ]
    got = reports.overlaps(spans)
    assert got == [reports.Overlap('n2', ('host1', 'host3'), at(3), at(5))]
    assert got[0].seconds == 2
    assert reports.overlaps(spans[:2] + spans[3:4]) == []
