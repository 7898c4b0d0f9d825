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
"""How the partition options resolve, and how contradictions are refused."""

from __future__ import annotations

from typing import Any

from nova.conf import ironic as nova_ironic_conf
from oslo_config import cfg
import pytest

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import partition


def make_conf(ours: dict[str, Any] | None = None,
              theirs: dict[str, Any] | None = None) -> cfg.ConfigOpts:
    """A fresh ConfigOpts with nova's [ironic] and our options set."""
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    for k, v in (ours or {}).items():
        conf.set_override(k, v, group='ironic_multi')
    for k, v in (theirs or {}).items():
        conf.set_override(k, v, group='ironic')
    return conf


def test_defaults_manage_every_node_with_servicegroup_peers() -> None:
    part = partition_opts.resolve(make_conf(), 'Host1')
    assert part.host == 'host1'
    assert part.scope == partition.Scope(None, None)
    assert part.peers is None
    assert part.membership_driver == 'servicegroup'
    assert (part.ring_algorithm, part.partition_exponent) == ('compatible', 5)


def test_partition_key_with_peer_list() -> None:
    conf = make_conf({'partition_key': 'Rack-A',
                      'peer_list': ['Host1', 'host2']})
    part = partition_opts.resolve(conf, 'host1')
    assert part.scope.conductor_group == 'rack-a'
    assert part.peers == frozenset({'host1', 'host2'})


def test_empty_partition_key_means_default_group_not_unset() -> None:
    conf = make_conf({'partition_key': '', 'peer_list': ['host1']})
    scope = partition_opts.resolve(conf, 'host1').scope
    assert scope.conductor_group == ''
    assert scope.contains('', None)
    assert scope.contains(None, None)
    assert not scope.contains('rack-a', None)


def test_scope_is_case_insensitive_for_groups_and_exact_for_shards() -> None:
    scope = partition.Scope(conductor_group='rack-a', shard='s1')
    assert scope.contains('RACK-A', 's1')
    assert not scope.contains('rack-a', 'S1')
    assert not scope.contains('rack-b', 's1')
    assert partition.Scope().contains('anything', 'any')


def test_partition_key_without_peer_list_is_refused() -> None:
    conf = make_conf({'partition_key': 'rack-a'})
    with pytest.raises(partition.InvalidPartition) as e:
        partition_opts.resolve(conf, 'host1')
    assert '[ironic_multi] partition_key' in str(e.value)
    assert '[ironic_multi] peer_list' in str(e.value)


def test_partition_key_with_tooz_needs_no_peer_list() -> None:
    conf = make_conf({'partition_key': 'rack-a',
                      'membership_driver': 'tooz'})
    part = partition_opts.resolve(conf, 'host1')
    assert part.peers is None
    assert part.scope.conductor_group == 'rack-a'


def test_peer_list_without_this_host_resolves_without_this_host() -> None:
    # Taking a host out of a group by SIGHUP is a valid change: the host
    # must see the list its peers see (and leave its own ring), not keep
    # the old list and go on claiming free nodes its peers now divide.
    conf = make_conf({'partition_key': 'g', 'peer_list': ['host2', 'Host3']})
    part = partition_opts.resolve(conf, 'host1')
    assert part.peers == frozenset({'host2', 'host3'})
    assert part.scope.conductor_group == 'g'


def test_peer_list_is_compared_case_insensitively() -> None:
    conf = make_conf({'peer_list': ['HOST1', 'host2']})
    assert partition_opts.resolve(conf, 'Host1').peers == {'host1', 'host2'}


def test_peer_list_entries_differing_only_in_case_are_refused() -> None:
    conf = make_conf({'peer_list': ['host1', 'Host2', 'host2']})
    with pytest.raises(partition.InvalidPartition) as e:
        partition_opts.resolve(conf, 'host1')
    assert "'Host2' and 'host2'" in str(e.value)


def test_exact_duplicate_peer_is_harmless() -> None:
    conf = make_conf({'peer_list': ['host1', 'host2', 'host2']})
    assert partition_opts.resolve(conf, 'host1').peers == {'host1', 'host2'}


def test_empty_peer_entry_is_refused() -> None:
    conf = make_conf({'peer_list': ['host1', ' ']})
    with pytest.raises(partition.InvalidPartition, match='empty host name'):
        partition_opts.resolve(conf, 'host1')


def test_static_membership_needs_a_peer_list() -> None:
    conf = make_conf({'membership_driver': 'static'})
    with pytest.raises(partition.InvalidPartition,
                       match='membership_driver = static'):
        partition_opts.resolve(conf, 'host1')


def test_nova_conductor_group_alone_is_honoured() -> None:
    conf = make_conf({'peer_list': ['host1']},
                     {'conductor_group': 'Rack-B'})
    part = partition_opts.resolve(conf, 'host1')
    assert part.scope.conductor_group == 'rack-b'


def test_nova_partition_key_alias_alone_is_honoured() -> None:
    # nova's [ironic] conductor_group is also known as partition_key.
    conf = make_conf({}, {'conductor_group': 'g', 'peer_list': ['host1']})
    part = partition_opts.resolve(conf, 'host1')
    assert part.scope.conductor_group == 'g'
    assert part.peers == {'host1'}


def test_equal_conductor_groups_agree() -> None:
    conf = make_conf({'partition_key': 'RACK', 'peer_list': ['host1']},
                     {'conductor_group': 'rack'})
    part = partition_opts.resolve(conf, 'host1')
    assert part.scope.conductor_group == 'rack'


def test_contradicting_conductor_group_names_both_options() -> None:
    conf = make_conf({'partition_key': 'rack-a', 'peer_list': ['host1']},
                     {'conductor_group': 'rack-b'})
    with pytest.raises(partition.InvalidPartition) as e:
        partition_opts.resolve(conf, 'host1')
    msg = str(e.value)
    assert '[ironic_multi] partition_key' in msg
    assert '[ironic] conductor_group' in msg
    assert 'Fix' in msg


def test_contradicting_peer_lists_name_both_options() -> None:
    conf = make_conf({'peer_list': ['host1', 'host2']},
                     {'peer_list': ['host1', 'host3']})
    with pytest.raises(partition.InvalidPartition) as e:
        partition_opts.resolve(conf, 'host1')
    assert '[ironic_multi] peer_list' in str(e.value)
    assert '[ironic] peer_list' in str(e.value)


def test_equal_peer_lists_agree() -> None:
    conf = make_conf({'peer_list': ['host1', 'HOST2']},
                     {'peer_list': ['host2', 'host1']})
    assert partition_opts.resolve(conf, 'host1').peers == {'host1', 'host2'}


def test_nova_peer_list_alone_is_honoured_and_named() -> None:
    conf = make_conf({}, {'peer_list': ['host2', 'HOST1']})
    part = partition_opts.resolve(conf, 'host1')
    assert part.peers == {'host1', 'host2'}
    assert part.peers_option == '[ironic] peer_list'
    assert partition_opts.resolve(make_conf({'peer_list': ['host1']}),
                             'host1').peers_option == (
        '[ironic_multi] peer_list')


def test_shard_without_peer_list_makes_this_host_the_only_peer() -> None:
    part = partition_opts.resolve(make_conf({}, {'shard': 'shard-1'}), 'Host1')
    assert part.scope.shard == 'shard-1'
    assert part.peers == {'host1'}


def test_shard_with_peer_list_shares_the_shard() -> None:
    conf = make_conf({'peer_list': ['host1', 'host2']}, {'shard': 's'})
    assert partition_opts.resolve(conf, 'host1').peers == {'host1', 'host2'}


@pytest.mark.parametrize('bad', ['has space', 'a/b', 'x' * 256])
def test_partition_key_syntax_is_enforced_by_the_option(bad: str) -> None:
    conf = make_conf()
    with pytest.raises(ValueError):
        conf.set_override('partition_key', bad, group='ironic_multi')


def test_divide_defaults_to_nodes() -> None:
    part = partition_opts.resolve(make_conf(), 'host1')
    assert part.divide == 'nodes' and not part.by_shard


def test_divide_shards_resolves() -> None:
    part = partition_opts.resolve(make_conf({'divide': 'shards'}), 'host1')
    assert part.by_shard
    assert part.summary()['divide'] == 'shards'
    assert part.peers is None


def test_divide_shards_with_nova_shard_names_both_options() -> None:
    conf = make_conf({'divide': 'shards'}, {'shard': 'shard-1'})
    with pytest.raises(partition.InvalidPartition) as e:
        partition_opts.resolve(conf, 'host1')
    assert '[ironic_multi] divide = shards' in str(e.value)
    assert "[ironic] shard = 'shard-1'" in str(e.value)


def test_divide_accepts_only_nodes_or_shards() -> None:
    conf = make_conf()
    with pytest.raises(ValueError):
        conf.set_override('divide', 'racks', group='ironic_multi')


def test_old_import_path_warns_and_gives_the_same_types() -> None:
    # A membership plugin written for the flat layout imports the partition
    # types from nova_ironic_multi.partition: that keeps working for one
    # release, with a warning naming the new path.
    import importlib
    import sys

    sys.modules.pop('nova_ironic_multi.partition', None)
    with pytest.warns(DeprecationWarning,
                      match='nova_ironic_multi.division.partition'):
        old = importlib.import_module('nova_ironic_multi.partition')
    assert old.Partition is partition.Partition
    assert old.Scope is partition.Scope
