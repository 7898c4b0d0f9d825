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
"""``ring show`` / ``ring explain`` tell what the services really do.

The fleet is built by hand (what ``fleet.gather`` reads from nova and
Ironic) and divided by ``fleet.divide``; the advice is checked against the
rules of ``takeover``.
"""

from __future__ import annotations

import io
import json
from typing import Any

from nova_ironic_multi.cmd import fleet as fleet_mod
from nova_ironic_multi.cmd import ring
from nova_ironic_multi.cmd import takeover
from nova_ironic_multi.division import partition
from nova_ironic_multi import rings
from nova_ironic_multi.tests.unit import fake_ironic

HOSTS = ('host1', 'host2', 'host3')


def host(name: str, **kw: Any) -> fleet_mod.Host:
    args: dict[str, Any] = dict(up=True, disabled=False, forced_down=False)
    args.update(kw)
    return fleet_mod.Host(name, name, args.pop('up'), args.pop('disabled'),
                          args.pop('forced_down'), **args)


class Fleet:
    """Nine nodes in group 'a', three in group 'b'; host3 has instance i3."""

    def __init__(self, **host3: Any) -> None:
        self.ironic = fake_ironic.FakeIronic()
        self.a = [self.ironic.add_node('a%d' % i, conductor_group='a')
                  for i in range(9)]
        self.b = [self.ironic.add_node('b%d' % i, conductor_group='b')
                  for i in range(3)]
        self.ironic.nodes['a0']['instance_uuid'] = 'i3'
        self.hosts = {h: host(h) for h in HOSTS}
        self.hosts['host3'] = host('host3', **host3)
        self.hosts['hostb'] = host('hostb')
        self.instance_hosts = {'i3': 'host3'}
        self.deleted_hosts: dict[str, str] = {}

    def build(self, scope: partition.Scope | None = None,
              divide: str = 'nodes') -> fleet_mod.Fleet:
        scope = scope or partition.Scope(conductor_group='a')
        part = partition.Partition('observer', scope, None, 'servicegroup',
                                   'compatible', 5, divide=divide)
        members = frozenset(h for h, v in self.hosts.items()
                            if v.up and not v.disabled and h != 'hostb' and
                            v.foreign is None)
        fleet = fleet_mod.Fleet(
            part, self.ironic.list_nodes(scope), dict(self.instance_hosts),
            self.hosts, members, rings.load('compatible', members, 5),
            dict(self.deleted_hosts), self.ironic,  # type: ignore[arg-type]
            shard_counts=(self.ironic.shards() if divide == 'shards'
                          else None))
        for name in members:
            fleet.hosts[name].member = True
        fleet_mod.divide(fleet)
        # What nova records: each host's managed nodes, and the nodes of
        # its instances and orphans; hostb serves 'b'.
        for h in fleet.hosts.values():
            h.reported = set(h.managed) | h.with_instance | h.orphaned
        fleet.hosts['hostb'].reported = set(self.b)
        return fleet


def show(fleet: fleet_mod.Fleet) -> tuple[dict[str, Any], str]:
    out = io.StringIO()
    assert ring.show(fleet, out, 'json') == 0
    data = json.loads(out.getvalue())
    out = io.StringIO()
    ring.show(fleet, out, 'table')
    return data, out.getvalue()


def explain(fleet: fleet_mod.Fleet, node: str) -> dict[str, Any]:
    out = io.StringIO()
    assert ring.explain(fleet, node, out, 'json') == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def by_host(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h['host']: h for h in data['hosts']}


def test_disabled_host_still_manages_its_instance_nodes() -> None:
    fleet = Fleet(disabled=True).build()
    data, text = show(fleet)
    host3 = by_host(data)['host3']
    assert not host3['member']
    assert host3['managed'] == ['a0']
    assert (host3['nodes_with_instance'],
            host3['managed_nodes_with_instance']) == (1, 1)
    assert data['hosts_not_managing_their_instances'] == []
    assert 'unmanaged' not in text and 'takeover' not in text
    assert 'host3 is not a ring member (disabled) but runs' in text
    # Every in-scope node managed exactly once, by the driver's rules.
    managed = [n for h in data['hosts'] for n in h['managed']]
    assert sorted(managed) == sorted(n.uuid for n in fleet.in_scope)
    result = explain(fleet, 'a0')
    assert result['owner'] == 'host3'
    assert 'host3 is not a ring member (disabled) but runs' in (
        result['reason'])
    assert result['successors'] == []


def test_forced_down_host_is_advised_only_takeovers_that_are_accepted(
        ) -> None:
    fleet = Fleet(up=False, forced_down=True).build()
    # host2 is disabled: takeover refuses it as a destination.
    fleet.hosts['host2'].disabled = True
    data, text = show(fleet)
    assert data['hosts_not_managing_their_instances'] == ['host3']
    advice = data['advice']['host3']
    # hostb serves conductor group 'b'; host2 is disabled.
    assert 'takeover --from host3 --to HOST" moves them (HOST one of: ' \
        'host1)' in advice
    assert 'Warning: host3 is forced down' in text
    result = explain(fleet, 'a0')
    assert result['owner'] is None
    assert 'HOST one of: host1)' in result['reason']


def test_down_host_is_told_to_be_fenced_before_a_takeover() -> None:
    fleet = Fleet(up=False).build()
    data, _ = show(fleet)
    advice = data['advice']['host3']
    assert 'fence it first ("openstack compute service set --down host3 ' \
        'nova-compute")' in advice
    assert 'HOST one of: host1, host2' in advice


def test_no_takeover_advised_when_no_host_serves_the_nodes() -> None:
    fleet = Fleet(up=False, forced_down=True).build()
    for name in ('host1', 'host2'):
        fleet.hosts[name].reported = set(fleet.hosts['hostb'].reported)
    data, _ = show(fleet)
    advice = data['advice']['host3']
    assert 'takeover --from' not in advice
    assert 'a takeover would be refused' in advice


def test_orphans_and_unknown_instances_are_reported() -> None:
    f = Fleet()
    f.ironic.nodes['a1']['instance_uuid'] = 'gone'
    f.ironic.nodes['a2']['instance_uuid'] = 'stranger'
    f.deleted_hosts = {'gone': 'host2'}
    fleet = f.build()
    data, text = show(fleet)
    assert data['orphaned_nodes'] == [{'node': 'a1', 'instance': 'gone',
                                       'host': 'host2',
                                       'managed_by': 'host2'}]
    assert by_host(data)['host2']['orphaned_nodes'] == 1
    owner = fleet.ring_owner('a2')
    assert owner is not None
    assert data['nodes_with_unknown_instance'] == [
        {'node': 'a2', 'instance': 'stranger', 'logged_by': owner}]
    assert 'Nodes whose instance nova has never heard of' in text
    assert 'stranger' in text
    assert fleet.manager('a2') is None
    assert 'is unknown to nova' in explain(fleet, 'a2')['reason']
    assert explain(fleet, 'a1')['owner'] == 'host2'
    assert 'deleted while its host host2 was down' in explain(
        fleet, 'a1')['reason']


def test_a_deleted_instance_with_no_host_is_kept_by_its_ring_owner() -> None:
    # What the services do (period.orphans.adopted): the command agrees.
    f = Fleet()
    f.ironic.nodes['a1']['instance_uuid'] = 'homeless'
    f.deleted_hosts = {'homeless': ''}
    fleet = f.build()
    owner = fleet.ring_owner('a1')
    assert owner in HOSTS
    data, _ = show(fleet)
    assert data['orphaned_nodes'] == [{'node': 'a1', 'instance': 'homeless',
                                       'host': '', 'managed_by': owner}]
    assert by_host(data)[owner]['orphaned_nodes'] == 1
    why = explain(fleet, 'a1')
    assert why['owner'] == owner
    assert 'deleted with no host: the ring gives the node to %s' % owner in (
        why['reason'])


def test_takeover_refuses_a_destination_of_another_group() -> None:
    f = Fleet()
    scopes = takeover.Scopes(f.ironic)  # type: ignore[arg-type]
    moving = scopes.nodes(['a0'])
    why = scopes.mismatch('hostb', set(f.b), moving)
    assert why is not None
    assert "none in conductor group 'a'" in why
    assert "node b0 it manages is in conductor group 'b'" in why
    assert "partition_key (or [ironic] conductor_group) is not 'a'" in why
    assert scopes.mismatch('host1', {'a3', 'a4'}, moving) is None
    # A host serving every group (its nodes span groups) is fine.
    assert scopes.mismatch('host1', {'b1', 'a4'}, moving) is None
    # A host that manages nothing cannot be told apart: accepted.
    assert scopes.mismatch('host1', set(), moving) is None


def test_takeover_refuses_a_destination_of_another_shard() -> None:
    f = Fleet()
    for i, n in enumerate(f.a):
        f.ironic.nodes[n]['shard'] = 's1' if i < 5 else 's2'
    scopes = takeover.Scopes(f.ironic)  # type: ignore[arg-type]
    moving = scopes.nodes(['a0'])
    why = scopes.mismatch('host1', {'a6', 'a7'}, moving)
    assert why is not None
    assert "none in conductor group 'a', shard 's1'" in why
    assert "its [ironic] shard is not 's1'" in why
    assert scopes.mismatch('host1', {'a6', 'a2'}, moving) is None


def test_advice_names_only_hosts_of_the_zone_that_run_this_driver(
        ) -> None:
    f = Fleet(up=False, forced_down=True)
    for h in f.hosts.values():
        h.zone = 'nova'
    f.hosts['host2'].zone = 'az2'
    f.hosts['host4'] = host('host4', zone='nova',
                            foreign='it has compute nodes of hypervisor '
                                    'type QEMU')
    fleet = f.build()
    data, _ = show(fleet)
    assert '(HOST one of: host1)' in data['advice']['host3']
    refused = data['takeover']['host3']['destinations']
    assert data['takeover']['host3']['nodes'] == ['a0']
    assert refused['host1'] is None
    assert ("the destination host2 is in availability zone 'az2' and the "
            "source host3 in 'nova'") in refused['host2']
    assert 'does not run this driver (it has compute nodes of ' \
        'hypervisor type QEMU)' in refused['host4']
    assert "none in conductor group 'a'" in refused['hostb']


def test_advice_names_only_hosts_of_the_source_cell() -> None:
    f = Fleet(up=False, forced_down=True, cell='cell1')
    f.hosts['host1'].cell = 'cell1'
    f.hosts['host2'].cell = 'cell2'
    data, _ = show(f.build())
    assert '(HOST one of: host1)' in data['advice']['host3']
    assert ("the destination host2 is in cell 'cell2' and the source "
            "host3 in 'cell1'") in (
        data['takeover']['host3']['destinations']['host2'])


def test_no_destination_of_the_zone_means_no_takeover_advised() -> None:
    f = Fleet(up=False, forced_down=True, zone='az3')
    fleet = f.build()
    data, _ = show(fleet)
    advice = data['advice']['host3']
    assert 'takeover --from' not in advice
    assert "in its availability zone 'az3'" in advice
    assert 'a takeover would be refused: start host3 again' in advice


def test_a_host_with_only_orphans_is_advised_a_takeover_of_them() -> None:
    f = Fleet(up=False, forced_down=True)
    f.ironic.nodes['a0']['instance_uuid'] = 'gone'
    f.instance_hosts = {}
    f.deleted_hosts = {'gone': 'host3'}
    fleet = f.build()
    data, text = show(fleet)
    assert data['hosts_not_managing_their_instances'] == ['host3']
    # The orphan's node moves, so only hosts of its group are named.
    assert '(HOST one of: host1, host2)' in data['advice']['host3']
    assert data['takeover']['host3']['nodes'] == ['a0']


def test_no_takeover_advised_when_it_would_move_nothing() -> None:
    fleet = Fleet(up=False, forced_down=True).build()
    # nova records the node of host3's instance for no host.
    fleet.hosts['host3'].reported = set()
    data, _ = show(fleet)
    advice = data['advice']['host3']
    assert 'takeover --from' not in advice
    assert 'a takeover would move nothing' in advice
    assert data['takeover'] == {}


def test_shard_mode_advises_any_host_of_the_group() -> None:
    f = Fleet(up=False, forced_down=True)
    # host3's instance is on the only node of shard s0: no other host
    # lists s0, and with divide = shards none needs to.
    for i, n in enumerate(f.a):
        f.ironic.nodes[n]['shard'] = 's0' if i == 0 else 's%d' % (i % 3 + 1)
    fleet = f.build(divide='shards')
    assert not fleet.hosts['host1'].reported & {'a0'}
    data, _ = show(fleet)
    assert '(HOST one of: host1, host2)' in data['advice']['host3']
    # The same nodes dividing nodes: nova's static shard scope counts.
    fleet = f.build()
    data, _ = show(fleet)
    assert 'takeover --from' not in data['advice']['host3']


def test_takeover_accepts_a_host_of_another_shard_when_dividing_shards(
        ) -> None:
    f = Fleet()
    for i, n in enumerate(f.a):
        f.ironic.nodes[n]['shard'] = 's1' if i < 5 else 's2'
    scopes = takeover.Scopes(f.ironic)  # type: ignore[arg-type]
    moving = scopes.nodes(['a0'])
    assert scopes.mismatch('host1', {'a6', 'a7'}, moving,
                           by_shard=True) is None
    why = scopes.mismatch('hostb', set(f.b), moving, by_shard=True)
    assert why is not None and "none in conductor group 'a'" in why
