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
"""The table a soak ends with (pure: the run's records in, text out)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import statistics
from typing import Any

#: Outcome columns, in order (others are appended).
OUTCOMES = ('ok', 'error', 'failed', 'rejected', 'gone', 'partial', 'other',
            'stuck')


def _grid(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[
        str]:
    text_rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in text_rows])
              for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return '  '.join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths,
                                                        strict=True)))

    return [line(header), line(['-' * w for w in widths])] + [
        line(r) for r in text_rows]


def requests_table(counts: Mapping[str, Mapping[str, int]]) -> list[str]:
    """``{kind: {outcome: n}}`` as rows of kinds, columns of outcomes."""
    seen = {o for by in counts.values() for o in by}
    columns = [o for o in OUTCOMES if o in seen] + sorted(
        seen - set(OUTCOMES))
    rows = [[kind] + [by.get(o, 0) for o in columns] + [sum(by.values())]
            for kind, by in sorted(counts.items())]
    totals = ['all'] + [sum(by.get(o, 0) for by in counts.values())
                        for o in columns]
    totals.append(sum(int(t) for t in totals[1:]))
    return _grid(['requests'] + columns + ['total'], rows + [totals])


def faults_table(counts: Mapping[str, int],
                 converge: Mapping[str, Sequence[float]],
                 unconverged: Mapping[str, int],
                 cut_short: Mapping[str, int] | None = None) -> list[str]:
    """Faults by kind, then the time to converge after each transition.

    ``cut_short``: transitions the next one came before they converged
    (the fault was held shorter than that), not counted as converged nor
    as not converged.
    """
    cut_short = cut_short or {}
    lines = _grid(['faults', 'count'], sorted(counts.items()) + [
        ('all', sum(counts.values()))])
    rows = []
    for label in sorted(set(converge) | set(unconverged) | set(cut_short)):
        times = sorted(converge.get(label, []))
        rows.append([
            label, len(times),
            '%.1f' % statistics.median(times) if times else '-',
            '%.1f' % times[-1] if times else '-',
            unconverged.get(label, 0), cut_short.get(label, 0)])
    lines += [''] + _grid(['converged after', 'n', 'median s', 'max s',
                           'not converged', 'held shorter'], rows)
    return lines


def table(requests: Mapping[str, Mapping[str, int]],
          faults: Mapping[str, int],
          converge: Mapping[str, Sequence[float]],
          unconverged: Mapping[str, int],
          violations: Sequence[str], header: str,
          cut_short: Mapping[str, int] | None = None,
          causes: Mapping[str, int] | None = None,
          outside: Sequence[str] = ()) -> str:
    """The whole table.

    :param causes: how often each cause ended a request other than ``ok``
        (the most frequent are listed).
    :param outside: problems of servers no compute ever had, listed apart
        from the violations.
    """
    lines = [header, ''] + requests_table(requests)
    if causes:
        lines += ['', 'requests not ok, by cause:'] + [
            '  %4d  %s' % (n, cause) for cause, n in sorted(
                causes.items(), key=lambda kv: (-kv[1], kv[0]))[:12]]
    lines += [''] + faults_table(faults, converge, unconverged, cut_short)
    lines += ['', 'violations: %d' % len(violations)]
    lines += ['  ' + v for v in violations]
    if outside:
        lines += ['', 'outside the driver (no compute had the server): %d'
                  % len(outside)]
        lines += ['  ' + v for v in outside]
    return '\n'.join(lines)


def _add(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


def combine(results: Sequence[Mapping[str, Any]]) -> str:
    """One table for several runs' ``--report`` files (their JSON, loaded).

    Requests, faults and causes add up; the times to converge are pooled,
    so the median and the maximum are over every run; each violation keeps
    the seed of its run.
    """
    if not results:
        raise ValueError('no soak report to combine')
    requests: dict[str, dict[str, int]] = {}
    faults: dict[str, int] = {}
    converge: dict[str, list[float]] = {}
    unconverged: dict[str, int] = {}
    cut_short: dict[str, int] = {}
    causes: dict[str, int] = {}
    violations: list[str] = []
    outside: list[str] = []
    for r in results:
        for kind, by in r['requests'].items():
            _add(requests.setdefault(kind, {}), by)
        _add(faults, r['faults'])
        for label, times in r['converge'].items():
            converge.setdefault(label, []).extend(times)
        _add(unconverged, r['unconverged'])
        _add(cut_short, r['cut_short'])
        _add(causes, r['notes'].get('request outcomes', {}))
        violations += ['seed %s: %s' % (r['seed'], v)
                       for v in r['violations']]
        outside += ['seed %s: %s' % (r['seed'], v)
                    for v in r.get('outside', [])]
    header = '%d runs, seeds %s, profiles %s: %.0f minutes of faults' % (
        len(results), ', '.join(str(r['seed']) for r in results),
        ', '.join(sorted({str(r['profile']) for r in results})),
        sum(float(r['minutes']) for r in results))
    return table(requests, faults, converge, unconverged, violations,
                 header, cut_short, causes, outside)
