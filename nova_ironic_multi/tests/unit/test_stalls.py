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
"""How often a wait asks Ironic about a busy node, and what it remembers."""

from __future__ import annotations

import unittest

from nova_ironic_multi.actions import stalls
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import states


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def deploying(uuid: str = 'n1', **kw: object) -> nodeinfo.NodeInfo:
    return nodeinfo.NodeInfo(uuid, provision_state=states.DEPLOYING,
                             **kw)  # type: ignore[arg-type]


class StallsTest(unittest.TestCase):

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.stalls = stalls.Stalls(clock=self.clock, grace=60, keep=600)

    def polls(self, seconds: int, every: int = 2,
              uuid: str = 'n1') -> list[float]:
        """Poll for ``seconds``; when the wait would read the node by UUID."""
        asked = []
        for _ in range(seconds // every):
            if self.stalls.suspect(deploying(uuid)):
                asked.append(self.clock.now)
            self.clock.now += every
        return asked

    def test_a_busy_node_is_read_by_uuid_once_per_grace(self) -> None:
        # Polled every 2 s for 5 minutes: asked at 60, 120, 180 and 240 s,
        # not on each of the 120 polls after the first minute.
        asked = self.polls(300)
        self.assertEqual([1060.0, 1120.0, 1180.0, 1240.0], asked)

    def test_a_node_that_rests_starts_its_grace_again(self) -> None:
        self.polls(120)
        self.stalls.suspect(nodeinfo.NodeInfo(
            'n1', provision_state=states.ACTIVE))
        self.assertEqual([self.clock.now + 60], self.polls(100))

    def test_a_stall_seen_by_one_wait_is_known_to_the_next(self) -> None:
        # The deploy's wait saw the node unlocked for the grace: the
        # clean-up delete that follows knows at once.
        for _ in range(31):
            self.stalls.reason(deploying(unlocked=True))
            self.clock.now += 2
        self.assertIn('has held its lock for 62 seconds',
                      self.stalls.reason(deploying(unlocked=True)) or '')

    def test_a_node_no_wait_looks_at_any_more_is_forgotten(self) -> None:
        for _ in range(31):
            self.stalls.reason(deploying('gone', unlocked=True))
            self.clock.now += 2
        self.clock.now += 600
        # Any look at another node sweeps it.
        self.assertIsNone(self.stalls.reason(deploying('other')))
        self.assertEqual({'other'}, set(self.stalls._looked))
        self.assertEqual({'other'}, set(self.stalls._busy))
        self.assertFalse(self.stalls._unlocked)
        # Seen again, it starts afresh.
        self.assertIsNone(self.stalls.reason(deploying('gone',
                                                       unlocked=True)))
