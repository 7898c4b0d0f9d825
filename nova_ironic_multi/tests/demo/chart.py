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
"""An SVG step chart of nodes per host, one step per demo event."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import html

COLOURS = ('#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd')
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 880, 420, 60, 170, 40, 120


def render(title: str, events: Sequence[str],
           series: Mapping[str, Sequence[int]]) -> str:
    """``series[host][i]``: nodes the host manages after ``events[i]``."""
    steps = max(1, len(events))
    peak = max([1] + [v for values in series.values() for v in values])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + plot_w * i / steps

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / peak)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (WIDTH, HEIGHT),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="24" font-size="16">%s</text>'
           % (LEFT, html.escape(title))]
    for v in range(0, peak + 1, max(1, peak // 6)):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" '
                   'stroke="#ddd"/>' % (LEFT, LEFT + plot_w, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>'
                   % (LEFT - 6, y(v) + 4, v))
    for i, event in enumerate(events):
        xm = (x(i) + x(i + 1)) / 2
        out.append('<text text-anchor="end" transform="translate(%.1f,%d) '
                   'rotate(-30)">%s</text>' % (xm + 4, TOP + plot_h + 16,
                                               html.escape(event)))
    for n, (host, values) in enumerate(sorted(series.items())):
        colour = COLOURS[n % len(COLOURS)]
        points = []
        for i, v in enumerate(values):
            # Offset the lines a little so equal counts stay visible.
            yy = y(v) - 2 * n
            points += ['%.1f,%.1f' % (x(i), yy),
                       '%.1f,%.1f' % (x(i + 1), yy)]
        out.append('<polyline fill="none" stroke="%s" stroke-width="3" '
                   'points="%s"/>' % (colour, ' '.join(points)))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>'
                   % (LEFT + plot_w + 12, TOP + 16 + 18 * n, colour,
                      html.escape(host)))
    out.append('<text x="%d" y="%d" transform="rotate(-90 16 %d)">'
               'nodes managed</text>' % (16, TOP + plot_h // 2,
                                         TOP + plot_h // 2))
    out.append('</svg>')
    return '\n'.join(out) + '\n'
