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
"""The command's division is the drivers' division (issue 20.7).

For generated fleets, in both ``divide`` modes and on both rings, the
hosts run real :class:`inventory.Inventory` refreshes against a fake Ironic
and nova's test database, and the command reads the same world through
``fleet.gather``: ``ring show`` must give each host the nodes its periods
give it, and ``ring simulate`` must predict what the periods do once the
members change.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any, cast

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from nova.conf import CONF

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import ring as ring_cmd
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import states
from nova_ironic_multi.period import inventory
from nova_ironic_multi.tests.unit import base

HOSTS = ('host1', 'host2', 'host3', 'host4')
SHARDS = (None, 'rack-a', 'rack-b', 'rack-c', 'rack-d', 'rack-e')
#: What a node carries: nothing, a live instance of a host, an instance
#: nova deleted while that host was down (an orphan), or one nova never
#: heard of.
KINDS = ('free', 'live', 'orphan', 'unknown')


@dataclasses.dataclass(frozen=True)
class World:
    divide: str
    ring: str
    #: (node uuid, shard, kind, host of its instance)
    nodes: list[tuple[str, str | None, str, str]]
    before: list[str]
    after: list[str]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    members = st.lists(st.sampled_from(HOSTS), min_size=1,
                       max_size=len(HOSTS), unique=True).map(sorted)
    nodes = draw(st.lists(st.tuples(
        st.uuids().map(str), st.sampled_from(SHARDS),
        st.sampled_from(KINDS), st.sampled_from(HOSTS)),
        max_size=30, unique_by=lambda n: n[0]))
    return World(draw(st.sampled_from(('nodes', 'shards'))),
                 draw(st.sampled_from(('compatible', 'balanced'))),
                 nodes, draw(members), draw(members))


class CliDivisionTest(base.DriverTestCase):

    def setUp(self) -> None:
        super().setUp()
        for host in HOSTS:
            self.make_service(host)
        base.seed_compute_nodes(self.ctxt, HOSTS)
        # The services never heartbeat here: keep them up however long
        # hypothesis runs.
        self.flags(service_down_time=24 * 3600)

    def build(self, world: World) -> list[Any]:
        """Ironic's nodes and nova's instances; the instances to remove."""
        self.ironic.nodes.clear()
        made = []
        for node, shard, kind, host in world.nodes:
            instance = None
            if kind in ('live', 'orphan'):
                inst = self.make_instance(host=host)
                instance = inst.uuid
                if kind == 'orphan':
                    inst.destroy()
                else:
                    made.append(inst)
            elif kind == 'unknown':
                instance = node[::-1]
            self.ironic.add_node(
                node, shard=shard, instance_uuid=instance,
                provision_state=(states.ACTIVE if instance
                                 else states.AVAILABLE))
        return made

    def configure(self, world: World, members: list[str]) -> None:
        self.flags(divide=world.divide, ring_algorithm=world.ring,
                   membership_driver='static', peer_list=members,
                   group='ironic_multi')

    def cli(self) -> fleet_mod.Fleet:
        return fleet_mod.gather(CONF)

    @settings(max_examples=30, deadline=None)
    @given(world=worlds())
    def test_cli_divides_as_the_drivers(self, world: World) -> None:
        made = self.build(world)
        try:
            self.check(world)
        finally:
            for inst in made:
                inst.destroy()

    def check(self, world: World) -> None:
        self.configure(world, world.before)
        # The fake stands in for the Ironic client.
        client = cast(ironic.Ironic, self.ironic)
        hosts = {h: inventory.Inventory(CONF, client, h) for h in HOSTS}
        for _ in range(2):      # a cold period, then a warm one
            drivers = {h: set(inv.refresh().nodes)
                       for h, inv in hosts.items()}
        fleet = self.cli()
        shown = {h: fleet.hosts[h].managed if h in fleet.hosts else set()
                 for h in HOSTS}
        self.assertEqual(drivers, shown, world)
        for node in world.nodes:
            self.assertEqual(
                next((h for h in sorted(HOSTS) if node[0] in drivers[h]),
                     None),
                fleet.manager(node[0]), node)

        # ring simulate, then the same change made to the fleet.
        out = io.StringIO()
        ring_cmd.simulate(fleet, sorted(set(world.after) - set(world.before)),
                          sorted(set(world.before) - set(world.after)), out,
                          'json')
        predicted = json.loads(out.getvalue())
        self.configure(world, world.after)
        after = {h: set(inv.refresh().nodes) for h, inv in hosts.items()}
        free = set(fleet.free)

        def manager(division: dict[str, set[str]], node: str) -> str | None:
            return next((h for h in sorted(division) if node in division[h]),
                        None)

        moved = sorted(n for n in free
                       if manager(drivers, n) != manager(after, n))
        self.assertEqual(moved, predicted['moved_nodes'], world)
        for host, counts in predicted['per_host'].items():
            self.assertEqual(
                (len(drivers[host] & free), len(after[host] & free)),
                (counts['before'], counts['after']), (host, world))


    def test_simulate_places_shards_as_the_drivers(self) -> None:
        # Issue 20.7: simulate ignored divide = shards and predicted a node
        # by node move (11 nodes, 19/10/11 per host) where the drivers
        # moved whole shards (10 nodes, 20/10/10).
        nodes = [('00000000-0000-4000-8000-%012d' % i, SHARDS[1 + i % 5],
                  'live' if i % 7 == 0 else 'free', HOSTS[i % 3])
                 for i in range(40)]
        nodes += [('00000000-0000-4000-9000-%012d' % i, None, 'free',
                   HOSTS[0]) for i in range(6)]
        for ring in ('compatible', 'balanced'):
            world = World('shards', ring, nodes, list(HOSTS[:3]),
                          ['host1', 'host2', 'host4'])
            made = self.build(world)
            try:
                self.check(world)
            finally:
                for inst in made:
                    inst.destroy()
