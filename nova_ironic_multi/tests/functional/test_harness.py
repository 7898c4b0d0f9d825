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
"""The functional base leaves nothing running when a set-up fails.

Regression: the base starts its Ironic before nova's set-up, to overlap
the two; a nova set-up that failed left that Ironic process (and its
files) behind, one more per failing test, until the machine was rebooted.
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

from nova.tests.functional import integrated_helpers
import testtools

from nova_ironic_multi.tests.fixtures import ironic_server
from nova_ironic_multi.tests.functional import base


class SetUpFailureTest(testtools.TestCase):

    def test_ironic_is_stopped_when_novas_set_up_fails(self) -> None:
        # (Defined here: a module-level test case would be collected.)
        class Broken(base.IronicCellTestCase):
            def test_nothing(self) -> None:
                raise AssertionError('set-up was meant to fail')

        spawned: list[ironic_server.IronicFixture] = []
        real = ironic_server.IronicFixture.spawn

        def spawn(fixture: ironic_server.IronicFixture) -> None:
            real(fixture)
            spawned.append(fixture)

        def fail(*args: Any) -> None:
            raise RuntimeError('nova set-up failed')

        result = testtools.TestResult()
        with mock.patch.object(ironic_server.IronicFixture, 'spawn',
                               spawn), \
                mock.patch.object(integrated_helpers.ProviderUsageBaseTestCase,
                                  'setUp', fail):
            Broken('test_nothing').run(result)
        self.assertEqual(1, len(result.errors))
        self.assertIn('nova set-up failed', str(result.errors[0][1]))
        (fixture,) = spawned
        self.assertIsNone(fixture.process.proc)
        self.assertFalse(os.path.exists(fixture.workdir))
