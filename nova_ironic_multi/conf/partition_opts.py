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
"""The partition of a host, resolved from its options.

The options of the partition (``[ironic_multi] partition_key``,
``peer_list``, ``divide``, nova's ``[ironic] conductor_group``,
``peer_list`` and ``shard``) are read past oslo.config's cache and all from
one version of the files (:mod:`~nova_ironic_multi.conf.reading`), checked
against each other, and made a
:class:`~nova_ironic_multi.division.partition.Partition`; a contradiction
is refused naming the options and the fix.
"""

from __future__ import annotations

from typing import Any

from oslo_config import cfg

from nova_ironic_multi.conf import reading
from nova_ironic_multi.division import partition

OURS = partition.OURS
NOVA = partition.NOVA
NODES = partition.NODES
SHARDS = partition.SHARDS


def _opt(conf: cfg.ConfigOpts, group: str, name: str) -> Any:
    # Past oslo.config's cache: it may hold a value from before a reload.
    try:
        return reading.read(conf, group, name)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return None


def _clean_peer_list(raw: list[str] | None, option: str) -> list[str]:
    peers = [p.strip() for p in (raw or [])]
    if any(not p for p in peers):
        raise partition.InvalidPartition(
            '%s contains an empty host name (%r). Fix: list host names '
            'separated by commas, with no empty entries.' % (option, raw))
    return peers


def _check_case_duplicates(peers: list[str], option: str) -> None:
    seen: dict[str, str] = {}
    for p in peers:
        low = p.lower()
        if low in seen and seen[low] != p:
            raise partition.InvalidPartition(
                '%s lists %r and %r, which differ only in case; host names '
                'are compared case-insensitively, so this is ambiguous. Fix: '
                'list each host once.' % (option, seen[low], p))
        seen[low] = p


def resolve(conf: cfg.ConfigOpts, host: str,
            observer: bool = False) -> partition.Partition:
    """Resolve and validate the partition of ``host`` from ``conf``.

    Every option comes from the same version of the configuration files,
    even while a reload swaps them (never an old group with new peers).

    :param observer: resolve for a tool looking at the division from
        outside (the CLI), which is not itself in ``peer_list``.
    :raises partition.InvalidPartition: the options contradict each other
        or cannot describe a safe division; the message names the options
        and the fix.
    :raises reading.Unsettled: the files kept changing while being read.
    """
    return reading.consistent(conf, lambda: _resolve(conf, host, observer))


def _resolve(conf: cfg.ConfigOpts, host: str,
             observer: bool) -> partition.Partition:
    me = host.lower()
    ours_key = _opt(conf, OURS, 'partition_key')
    nova_key = _opt(conf, NOVA, 'conductor_group')
    if ours_key is not None and nova_key is not None:
        if ours_key.lower() != nova_key.lower():
            raise partition.InvalidPartition(
                '[%s] partition_key = %r contradicts [%s] conductor_group = '
                '%r. Fix: set the conductor group once, in [%s] '
                'partition_key, and remove [%s] conductor_group (or make '
                'them equal).' % (OURS, ours_key, NOVA, nova_key, OURS, NOVA))
    key = ours_key if ours_key is not None else nova_key

    ours_peers = _clean_peer_list(_opt(conf, OURS, 'peer_list'),
                                  '[%s] peer_list' % OURS)
    nova_peers = _clean_peer_list(_opt(conf, NOVA, 'peer_list'),
                                  '[%s] peer_list' % NOVA)
    if (ours_peers and nova_peers and
            {p.lower() for p in ours_peers} !=
            {p.lower() for p in nova_peers}):
        raise partition.InvalidPartition(
            '[%s] peer_list = %s contradicts [%s] peer_list = %s. Fix: list '
            'the peers once, in [%s] peer_list, and remove [%s] peer_list '
            '(or make them name the same hosts).'
            % (OURS, ','.join(ours_peers), NOVA, ','.join(nova_peers),
               OURS, NOVA))
    if ours_peers:
        peers_option, raw_peers = '[%s] peer_list' % OURS, ours_peers
    else:
        peers_option, raw_peers = '[%s] peer_list' % NOVA, nova_peers
    _check_case_duplicates(raw_peers, peers_option)

    membership = _opt(conf, OURS, 'membership_driver') or 'servicegroup'
    shard = _opt(conf, NOVA, 'shard') or None
    divide = _opt(conf, OURS, 'divide') or NODES
    if divide == SHARDS and shard is not None:
        # nova's option pins this host to one shard for good; ours moves
        # shards between hosts as they come and go. Both at once would
        # have this host list one shard while its peers give it others.
        raise partition.InvalidPartition(
            '[%s] divide = shards contradicts [%s] shard = %r: nova\'s '
            'option gives this host one fixed shard, ours lets the ring '
            'divide every shard between the peers. Fix: remove [%s] shard '
            '(or set [%s] divide = nodes).' % (OURS, NOVA, shard, NOVA,
                                                OURS))

    peers: frozenset[str] | None = None
    if raw_peers:
        # A list that leaves this host out is not an error: it is how an
        # operator takes a host out of a group by SIGHUP. The host then
        # claims no free node (membership.Membership.self_excluded), keeps
        # the nodes of its own instances, and says why every time it changes.
        peers = frozenset(p.lower() for p in raw_peers)
    elif membership == 'static':
        raise partition.InvalidPartition(
            '[%s] membership_driver = static needs the peers in [%s] '
            'peer_list, which is empty. Fix: list this host and its peers '
            'in [%s] peer_list, or choose another membership_driver.'
            % (OURS, OURS, OURS))
    elif key is not None and membership != 'tooz':
        # Other services' conductor groups are not visible in nova's service
        # list, so without a list every Ironic compute would be counted as a
        # peer and nodes would be mapped to hosts that never look at them.
        raise partition.InvalidPartition(
            '[%s] partition_key = %r is set but [%s] peer_list is empty. '
            'Fix: list the hosts serving conductor group %r, this host '
            'included, in [%s] peer_list (or use membership_driver = tooz, '
            'whose groups are per conductor group).'
            % (OURS, key, OURS, key, OURS))
    elif shard is not None and membership != 'tooz' and not observer:
        # The same reasoning as above; nova's in-tree driver makes a sharded
        # service the only peer, and so do we when no list is given.
        peers = frozenset([me])

    return partition.Partition(
        host=me,
        scope=partition.Scope(
            conductor_group=key.lower() if key is not None else None,
            shard=shard),
        peers=peers,
        membership_driver=membership,
        ring_algorithm=_opt(conf, OURS, 'ring_algorithm') or 'compatible',
        partition_exponent=_opt(conf, OURS, 'hash_partition_exponent') or 5,
        peers_option=peers_option,
        divide=divide,
    )
