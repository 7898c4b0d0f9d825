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
"""``python -m nova_ironic_multi.tests.demo [--output FILE.svg]``."""

from __future__ import annotations

import argparse
import os
import sys

# nova picks its concurrency model at import time: native threads, as
# nova-compute runs by default.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
import nova.tests.functional  # noqa: E402,F401  (patches or poisons eventlet)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog='python -m nova_ironic_multi.tests.demo',
        description='A guided tour of nova-ironic-multi on a real Ironic '
        'and an in-process nova cell with three compute services.')
    parser.add_argument('--output', default='nova-ironic-multi-demo.svg',
                        help='Where to write the picture of nodes per host '
                        'over time (SVG).')
    args = parser.parse_args()
    from nova import objects
    objects.register_all()
    from nova_ironic_multi.tests.demo import tour
    return tour.run(args.output)


if __name__ == '__main__':
    sys.exit(main())
