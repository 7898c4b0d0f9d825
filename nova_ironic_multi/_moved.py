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
"""Old import paths of modules that moved, kept for one release.

A module that plugins import (for example the partition types a membership
plugin is given) moved into a package of its concern. Its old path still
imports, with a :class:`DeprecationWarning` naming the new one, and gives
the same module, so classes compare equal under either name.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make module *old*, being imported now, the module *new*."""
    warnings.warn('%s moved to %s: import it from there; the old path is '
                  'removed in the next release' % (old, new),
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
