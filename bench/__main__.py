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
"""``python -m bench <name> [args]``: run one benchmark."""

from __future__ import annotations

import importlib
import sys

BENCHES = {'rings': 'bench.rings', 'scale': 'bench.scale',
           'churn': 'bench.churn', 'fleet': 'bench.fleet',
           'shards': 'bench.shards', 'period': 'bench.period',
           'boots': 'bench.boots'}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHES:
        print('usage: python -m bench {%s} [options]' % ','.join(BENCHES),
              file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHES[sys.argv[1]])
    return int(module.main(sys.argv[2:]))


if __name__ == '__main__':
    sys.exit(main())
