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
"""Sequences of the churn machine that once failed, replayed step by step.

Each test drives :class:`test_churn.Churn` through the rules of a shrunk
failing example, in its order and with its draws, so the failure is
reproduced on every run, not only when a random draw finds it again.
"""

from __future__ import annotations

from typing import Any

from nova_ironic_multi.tests.unit import test_churn


class Draws:
    """A ``data`` argument whose draws are given in advance, in order.

    Past the recorded ones it draws the last again (a settle that takes
    more rounds than it took in the recorded example refreshes in the
    same order).
    """

    def __init__(self, *values: Any) -> None:
        self._values = list(values)

    def draw(self, strategy: Any, label: Any = None) -> Any:
        if len(self._values) > 1:
            return self._values.pop(0)
        return self._values[0]


def test_tooz_data_lost_twice_and_a_disabled_host_restarts() -> None:
    """A random CI draw (compatible ring, partitioned, tooz) found this.

    After the back end lost its data a second time, a disabled host
    restarted; in the settle after it, that host beat (and read the group)
    before its peer Host2 joined the group again, and the settled view
    was checked with that host counting no peer at all.
    """
    with test_churn.simulated_nova():
        m = test_churn.CompatibleChurn()
        try:
            m.start(mode=(True, 'tooz'),
                    hosts=['host1', 'host4', 'Host2', 'HOST3', 'hOst5'],
                    groups=['rack-a', 'rack-b', 'rack-a', 'rack-a',
                            'rack-a'],
                    nodes=0, divide='nodes', labels=['s1'] * 14,
                    listing='full', feed=(False, 0.0, 1000))
            steps: list[tuple[str, dict[str, Any]]] = [
                ('lose_tooz_data', {}),
                ('leave', {'data': Draws('HOST3')}),
                ('leave', {'data': Draws('Host2')}),
                ('other_starts', {'data': Draws('libvirt1')}),
                ('die', {'data': Draws('hOst5')}),
                ('join', {'data': Draws('Host2'), 'group': 'rack-b'}),
                ('toggle_service', {'data': Draws('host4'),
                                    'what': 'disabled'}),
                ('leave', {'data': Draws('libvirt1')}),
                ('boot_and_delete_in_a_settled_fleet', {
                    'data': Draws(['Host2', 'host1', 'host4'],
                                  ['host1', 'host4', 'Host2'],
                                  ['Host2', 'host1', 'host4'],
                                  ['Host2', 'host1', 'host4'],
                                  ['Host2', 'host1', 'host4']),
                    'boots': 0, 'deletes': 0}),
                ('lose_tooz_data', {}),
                ('leave', {'data': Draws('hOst5')}),
                ('leave', {'data': Draws('host1')}),
                ('die', {'data': Draws('host4')}),
                ('restart', {'data': Draws('host4')}),
                ('refresh', {'data': Draws('host4')}),
                ('settle', {'data': Draws(['host4', 'Host2'],
                                          ['host4', 'Host2'],
                                          ['host4', 'Host2'],
                                          ['host4', 'Host2'])}),
            ]
            m.instance_nodes_stay_with_their_host()
            for rule, kwargs in steps:
                getattr(m, rule)(**kwargs)
                m.instance_nodes_stay_with_their_host()
        finally:
            m.teardown()
