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
"""What the options' help says is refused or required is what happens.

Every sentence of an ``[ironic_multi]`` option's help that names a refusal
or a requirement ("refuse", "required", "must") is listed in
:data:`CLAIMS` with a check of the behaviour it states, or in
:data:`ADVICE` when it asks something of the operator that no single host
can check; a new such sentence fails :func:`test_every_claim_is_checked`
until it is listed. (Three of them were wrong on 2026-12-02: a peer list
without this host was "refused", ``partition_key`` "required" a peer list
even with tooz.)
"""

from __future__ import annotations

from collections.abc import Callable
import pathlib
import re

from nova.conf import ironic as nova_ironic_conf
from oslo_config import cfg
import pytest

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import partition
from nova_ironic_multi.membership import tooz_backends
from nova_ironic_multi.service import reload
from nova_ironic_multi.tests.unit import test_partition

make_conf = test_partition.make_conf


def _refused(ours: dict[str, object] | None = None,
             theirs: dict[str, object] | None = None,
             names: str = '') -> None:
    with pytest.raises(partition.InvalidPartition) as raised:
        partition_opts.resolve(make_conf(ours, theirs), 'host1')
    assert names in str(raised.value)


def _accepted(ours: dict[str, object] | None = None,
              theirs: dict[str, object] | None = None
              ) -> partition.Partition:
    return partition_opts.resolve(make_conf(ours, theirs), 'host1')


def _peer_list_required() -> None:
    _refused({'partition_key': 'g1'}, names='[ironic_multi] peer_list')
    part = _accepted({'partition_key': 'g1', 'membership_driver': 'tooz'})
    assert part.scope.conductor_group == 'g1' and part.peers is None


def _group_equal() -> None:
    _refused({'partition_key': 'g1', 'peer_list': ['host1']},
             {'conductor_group': 'g2'}, names='[ironic] conductor_group')
    _accepted({'partition_key': 'g1', 'peer_list': ['host1']},
              {'conductor_group': 'G1'})


def _peer_list_entries() -> None:
    _refused({'peer_list': ['host1', '']}, names='empty host name')
    _refused({'peer_list': ['host1', 'host2', 'HOST2']}, names='case')
    # Without this host: accepted, the host is not a peer.
    part = _accepted({'peer_list': ['host2', 'host3']})
    assert part.peers == frozenset({'host2', 'host3'})


def _same_hosts() -> None:
    _refused({'peer_list': ['host1', 'host2']},
             {'peer_list': ['host1', 'host3']}, names='[ironic] peer_list')
    _accepted({'peer_list': ['host1', 'host2']},
              {'peer_list': ['HOST2', 'host1']})


def _shards_exclude_novas_shard() -> None:
    _refused({'divide': 'shards'}, {'shard': 's1'}, names='[ironic] shard')


def _novas_peer_list_reload(tmp_path: pathlib.Path) -> None:
    path = tmp_path / 'nova.conf'
    path.write_text('[ironic]\npeer_list = host1\n')
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    conf(args=[], default_config_files=[str(path)])
    state = reload._State()
    previous, reload._STATE = reload._STATE, state
    try:
        reload.watch(conf, _Quiet())
        path.write_text('[ironic]\npeer_list = host1,host2\n'
                        '[ironic_multi]\ndivide = shards\n')
        conf.mutate_config_files()
        assert conf.ironic_multi.divide == 'nodes'
        assert ('ironic_multi', 'divide') in state.pinned
    finally:
        reload._STATE = previous


class _Quiet:
    def reloaded(self) -> None:
        pass


def _tooz_backend() -> None:
    for bad in ('gossip://127.0.0.1', 'postgresql://127.0.0.1/db'):
        with pytest.raises(tooz_backends.Unusable):
            tooz_backends.check(bad)
    tooz_backends.check('redis://127.0.0.1:6379')


#: ``(option, words of the sentence)``: the check of what it states.
CLAIMS: dict[tuple[str, str], Callable[..., None]] = {
    ('partition_key', '``peer_list``: required when this option is set, '
     'unless ``membership_driver = tooz``'): _peer_list_required,
    ('partition_key', 'If both are set they must be equal; otherwise '
     'nova-compute refuses to start.'): _group_equal,
    ('peer_list', "nova's ``[ironic] peer_list`` is applied at start only: "
     'a reload that changes it is refused whole'): _novas_peer_list_reload,
    ('peer_list', 'A list with an empty entry, or with two entries that '
     'differ only in case, is refused.'): _peer_list_entries,
    ('peer_list', '``partition_key``: when it is set this list must not be '
     'empty, unless ``membership_driver = tooz``.'): _peer_list_required,
    ('peer_list', 'If both are set they must name the same hosts.'):
        _same_hosts,
    ('divide', "nova-compute refuses to start, and a reload is rejected, "
     "when nova's ``[ironic] shard`` is also set"):
        _shards_exclude_novas_shard,
    ('tooz_backend_url', 'It must be a tooz driver with groups, installed '
     'with its client library: otherwise nova-compute refuses to start, and '
     'a reload to it is refused.'): _tooz_backend,
}

#: Sentences that ask something of the operator across hosts or against
#: another option's value, which one host does not check.
ADVICE = {
    ('divide', 'Every peer must use the same value'),
    ('ring_algorithm', 'Every peer must use the same algorithm and '
     'exponent'),
    ('tooz_heartbeat_interval', 'it must be well below '
     '``tooz_member_timeout``'),
}

_CLAIM = re.compile(r'refus|requir|must', re.IGNORECASE)


def _sentences() -> list[tuple[str, str]]:
    conf = cfg.ConfigOpts()
    nim_conf.register_opts(conf)
    found = []
    for info, _group in conf._all_opt_infos():
        opt = info['opt']
        text = ' '.join((opt.help or '').split())
        for sentence in re.split(r'(?<=[.;:])\s+(?=[A-Z*`])', text):
            if _CLAIM.search(sentence):
                found.append((opt.name, sentence))
    return found


def test_every_claim_is_checked() -> None:
    unlisted = [
        (name, sentence) for name, sentence in _sentences()
        if not any(name == n and words in sentence
                   for n, words in [*CLAIMS, *ADVICE])]
    assert unlisted == [], (
        'option help that names a refusal or a requirement: add a check '
        'of it to CLAIMS (or ADVICE): %s' % unlisted)
    # ...and nothing listed that the help no longer says.
    said = _sentences()
    stale = [key for key in [*CLAIMS, *ADVICE]
             if not any(key[0] == n and key[1] in s for n, s in said)]
    assert stale == []


@pytest.mark.parametrize('key', sorted(CLAIMS), ids=lambda k: k[0])
def test_the_help_says_what_happens(key: tuple[str, str],
                                    tmp_path: pathlib.Path) -> None:
    check = CLAIMS[key]
    if check.__code__.co_argcount:
        check(tmp_path)
    else:
        check()
