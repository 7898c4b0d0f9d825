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
"""The line each pytest run prints so CI can tell which tier it was.

``.ci/summarize.py`` works out from tox.ini which tiers and modes the
README's test command runs, on which nova release, then finds this line,
followed by pytest's summary, for each of them: a tier that crashed or
never started has no such pair and fails the run by name. The summarizer
runs without this package installed, so it keeps its own copy of
:data:`MARKER`; a unit test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Iterable
import re

MARKER = 'nova-ironic-multi pytest run: '
#: A tier is the package under ``nova_ironic_multi.tests`` a run names.
TIER = re.compile(r'nova_ironic_multi[./]tests[./](\w+)')


def label(args: Iterable[str], eventlet: bool, nova: int) -> str:
    """``novaNN tier/mode``, e.g. ``nova34 functional/eventlet``.

    :param args: pytest's command-line arguments (``--pyargs`` names or
        paths); the tiers are the test packages they name.
    :param eventlet: whether nova patched eventlet in this process.
    :param nova: the major version of the nova the run imports.
    """
    tiers = sorted({m.group(1) for a in args for m in TIER.finditer(a)})
    return 'nova%d %s/%s' % (nova, '+'.join(tiers) or 'unknown',
                             'eventlet' if eventlet else 'threading')


def this_run(args: Iterable[str]) -> str:
    """The label of the pytest run in this process (nova imported)."""
    from nova import monkey_patch

    from nova_ironic_multi import compat
    return label(args, monkey_patch.is_patched(), compat.nova_release())
