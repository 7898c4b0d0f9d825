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
"""Test-session set-up shared by every tier.

nova chooses its concurrency model at import time: it must be patched (or
eventlet poisoned, in the default native-threading mode) before anything
imports futurist or oslo.service, exactly as nova's own test packages do.
"""

# Patch (or poison) eventlet first, as nova's own test packages do on
# import (nova 33 and 34's functional package, every release's unit
# package; nova 32's functional package does not, so call it here).
from nova import monkey_patch

monkey_patch.patch()

from typing import Any  # noqa: E402
import unittest  # noqa: E402

# python-ironicclient fixes its version cache's path (under $HOME) when
# this module is imported; nova's tests give each test a temporary $HOME.
# Before 6.3 (2026.2) the module is imported with the first client, inside
# a test, whose $HOME is gone in the next one: import it before any test.
from ironicclient.common import filecache  # noqa: E402,F401
from nova import objects  # noqa: E402

objects.register_all()

from nova import test as nova_test  # noqa: E402

# nova's TestCase deletes every public instance attribute when a test ends.
# pytest's unittest integration stores the test method as an instance
# attribute of that name and deletes it afterwards itself, so keep it.
_orig_clear_attrs = nova_test.TestCase._clear_attrs


def _clear_attrs_keep_test_method(self: unittest.TestCase) -> None:
    name = self._testMethodName
    method = self.__dict__.get(name)
    _orig_clear_attrs(self)
    if method is not None:
        self.__dict__[name] = method


nova_test.TestCase._clear_attrs = _clear_attrs_keep_test_method


def pytest_terminal_summary(terminalreporter: Any, config: Any) -> None:
    # Just before pytest's own summary line: CI pairs the two to know that
    # this tier and mode ran on this nova, and what it counted
    # (.ci/summarize.py). A worker of a parallel run leaves it to the
    # launcher, which prints it once with the whole run's summary
    # (nova_ironic_multi/tests/parallel.py).
    from nova_ironic_multi.tests import claims
    from nova_ironic_multi.tests import run_label
    if claims.in_worker():
        return
    terminalreporter.write_line(
        run_label.MARKER + run_label.this_run(config.args))
