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
"""Tables for people, JSON for scripts."""

from __future__ import annotations

from collections.abc import Sequence
import json
from typing import Any, TextIO


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells])
              for i, h in enumerate(headers)]
    lines = ['  '.join(h.ljust(w) for h, w in zip(headers, widths,
                                                  strict=True)).rstrip(),
             '  '.join('-' * w for w in widths)]
    lines += ['  '.join(c.ljust(w) for c, w in zip(row, widths,
                                                   strict=True)).rstrip()
              for row in cells]
    return '\n'.join(lines)


def emit(out: TextIO, fmt: str, data: Any, text: str) -> None:
    if fmt == 'json':
        out.write(json.dumps(data, indent=2, sort_keys=True) + '\n')
    else:
        out.write(text.rstrip('\n') + '\n')
