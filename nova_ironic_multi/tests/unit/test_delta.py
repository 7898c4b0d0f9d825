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
"""``listing = delta``: what a period reads, and that it lists the same.

Each test holds what the kept listing returns against what Ironic (the
fake, with Ironic 39's change-feed order: tests/fixtures/change_feed.py)
lists in full at the same moment, field by field as a listing asks.
"""

from __future__ import annotations

import datetime
from typing import Any

from oslo_config import cfg
import pytest

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.period import delta
from nova_ironic_multi.tests.unit import fake_ironic

ALL = partition.Scope()
RACK = partition.Scope(conductor_group='rack-a')


def _conf(**overrides: Any) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    nim_conf.register_opts(conf)
    conf([])
    conf.set_override('listing', 'delta', group='ironic_multi')
    for name, value in overrides.items():
        conf.set_override(name, value, group='ironic_multi')
    return conf


def _view(nodes: list[nodeinfo.NodeInfo], *extra: str) -> dict[str, Any]:
    """What a listing promises: its fields, node by node."""
    fields = nodeinfo.LISTING_FIELDS + extra
    return {n.uuid: tuple(getattr(n, f) for f in fields) for n in nodes}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> fake_ironic.FakeIronic:
    # Small pages, so that a few changes already span several.
    monkeypatch.setattr(delta, 'PAGE', 4)
    f = fake_ironic.FakeIronic()
    for i in range(20):
        f.add_node(conductor_group='rack-a' if i % 2 else 'rack-b',
                   shard='s%d' % (i % 3))
    # Every node changed once, an hour ago (a fleet in service).
    f.touch()
    f.now += datetime.timedelta(hours=1)
    return f


def _period(listing: delta.DeltaListing, conf: cfg.ConfigOpts,
            fake: fake_ironic.FakeIronic,
            scope: partition.Scope = ALL, **filters: Any
            ) -> list[nodeinfo.NodeInfo]:
    fake.now += datetime.timedelta(seconds=60)
    listing.begin(conf)
    return listing.list_nodes(scope, **filters)


def _requests(fake: fake_ironic.FakeIronic) -> list[str]:
    return [name for name, _ in fake.calls]


def test_a_period_reads_only_the_changed_nodes(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    assert 'list_nodes' in _requests(fake)
    changed = sorted(fake.nodes)[:3]
    for u in changed:
        fake.nodes[u]['maintenance'] = True
    fake.calls.clear()
    got = _period(listing, conf, fake)
    assert _view(got) == _view(fake.list_nodes(ALL))
    asked = _requests(fake)[:-1]      # (the last: the check listing above)
    assert 'list_nodes' not in asked
    # One page (4 nodes) held the 3 changes; its last node's time, older
    # than the last period, ended the read.
    assert asked == ['changed_nodes', 'updated_at']
    assert listing.stats.changed == 4


def test_changes_over_several_pages_are_all_read(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    for u in sorted(fake.nodes)[:9]:
        fake.nodes[u]['provision_state'] = 'active'
        fake.nodes[u]['instance_uuid'] = 'i-' + u
    fake.calls.clear()
    got = _period(listing, conf, fake)
    assert _view(got) == _view(fake.list_nodes(ALL))
    assert [n for n in _requests(fake) if n == 'changed_nodes'] == [
        'changed_nodes'] * 3
    assert listing.stats.resyncs == {'start': 1}


def test_a_node_leaves_and_joins_the_listings_its_change_moves_it(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    fake.now += datetime.timedelta(seconds=60)
    listing.begin(conf)
    listing.list_nodes(RACK)
    listing.list_nodes(ALL, shards=['s1'])
    listing.list_nodes(ALL, sharded=False)
    rack_a = next(u for u, n in fake.nodes.items()
                  if n['conductor_group'] == 'rack-a')
    rack_b = next(u for u, n in fake.nodes.items()
                  if n['conductor_group'] == 'rack-b' and n['shard'] != 's1')
    fake.nodes[rack_a]['conductor_group'] = 'rack-b'
    fake.nodes[rack_b]['conductor_group'] = 'rack-a'
    fake.nodes[rack_b]['shard'] = 's1'
    fake.nodes[rack_a]['shard'] = None
    fake.now += datetime.timedelta(seconds=60)
    fake.calls.clear()
    listing.begin(conf)
    for scope, filters, extra in (
            (RACK, {}, ('conductor_group',)),
            (ALL, {'shards': ['s1']}, ('shard',)),
            (ALL, {'sharded': False}, ('shard',))):
        got = listing.list_nodes(scope, **filters)
        assert _view(got, *extra) == _view(
            fake.list_nodes(scope, **filters), *extra), (scope, filters)
    assert rack_b in {n.uuid for n in listing.list_nodes(RACK)}
    assert rack_a not in {n.uuid for n in listing.list_nodes(RACK)}
    assert rack_a in {n.uuid for n in listing.list_nodes(
        ALL, sharded=False)}
    assert [n for n in _requests(fake) if n == 'list_nodes'] == [
        'list_nodes'] * 3        # (only the comparisons above)


@pytest.mark.parametrize('nulls_first', [False, True])
def test_nodes_never_changed_sort_where_the_database_puts_them(
        fake: fake_ironic.FakeIronic, nulls_first: bool) -> None:
    """Enrolled and never changed: no ``updated_at``.

    Where they sort last (MySQL, sqlite), a page ending on one ends the
    changes; where they sort first (PostgreSQL) and fill the page, the feed
    cannot say, and a full listing runs.
    """
    fake.nulls_first = nulls_first
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    for _ in range(6):
        fake.add_node(conductor_group='rack-a')
    changed = sorted(fake.nodes)[0]
    fake.nodes[changed]['maintenance'] = True
    got = _period(listing, conf, fake)
    if nulls_first:
        # The full listing ran, and saw the new nodes too.
        assert listing.stats.resyncs.get('anomaly') == 1
        assert _view(got) == _view(fake.list_nodes(ALL))
    else:
        assert 'anomaly' not in listing.stats.resyncs
        assert _view(got)[changed] == _view(fake.list_nodes(ALL))[changed]


def test_deleted_and_silently_enrolled_nodes_wait_for_the_check(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf(delta_check_periods=3)
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    gone = sorted(fake.nodes)[5]
    del fake.nodes[gone]
    new = fake.add_node(conductor_group='rack-a')
    # What the feed misses, for up to delta_check_periods periods.
    got = _period(listing, conf, fake)
    assert gone in _view(got) and new not in _view(got)
    got = _period(listing, conf, fake)
    assert gone in _view(got)
    assert 'node_uuids' not in _requests(fake)
    # The third period since the start runs the UUID check.
    got = _period(listing, conf, fake)
    assert 'node_uuids' in _requests(fake)
    assert _view(got) == _view(fake.list_nodes(ALL))
    assert listing.stats.checks == 1


def test_writes_ironic_does_not_mark_wait_for_the_resync(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf(delta_resync_periods=3)
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    # The first enrolled: the last a page of unchanged nodes shows (any
    # node a page shows is read as it is now).
    node = list(fake.nodes)[0]
    fake.unmarked(node, traits=['CUSTOM_GPU'])
    # The start listed in full; the next two periods read the feed only.
    for _ in range(2):
        got = _period(listing, conf, fake)
        assert _view(got)[node] != _view(fake.list_nodes(ALL))[node]
    # The third since the last full listing lists in full again.
    got = _period(listing, conf, fake)
    assert listing.stats.resyncs == {'start': 1, 'scheduled': 1}
    assert _view(got) == _view(fake.list_nodes(ALL))


def test_clocks_that_disagree_make_a_full_listing(
        fake: fake_ironic.FakeIronic, caplog: pytest.LogCaptureFixture
        ) -> None:
    conf = _conf(delta_overlap=10)
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    for u in sorted(fake.nodes)[:6]:
        fake.nodes[u]['maintenance'] = True
    # A conductor whose clock runs 5 minutes ahead wrote them.
    fake.now += datetime.timedelta(minutes=5)
    fake._rows()
    fake.now -= datetime.timedelta(minutes=5)
    got = _period(listing, conf, fake)
    assert listing.stats.resyncs.get('anomaly') == 1
    assert 'clocks disagree' in caplog.text
    assert _view(got) == _view(fake.list_nodes(ALL))


def test_a_feed_too_busy_to_pay_is_left_alone_for_a_while(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    # This host keeps one shard's nodes (7); 12 nodes change elsewhere.
    _period(listing, conf, fake, shards=['s0'])
    for _, n in sorted(fake.nodes.items())[:12]:
        n['power_state'] = 'power on'
    got = _period(listing, conf, fake, shards=['s0'])
    assert listing.stats.resyncs.get('busy') == 1
    assert _view(got, 'shard') == _view(
        fake.list_nodes(ALL, shards=['s0']), 'shard')
    # The next period lists in full without reading the feed; the one
    # after reads it again (quiet now), and the wait is forgotten.
    fake.calls.clear()
    _period(listing, conf, fake, shards=['s0'])
    assert listing.stats.resyncs.get('busy') == 2
    assert [n for n in _requests(fake) if n == 'changed_nodes'] == [
        'changed_nodes']          # (only the clock: limit 1)
    assert fake.calls_to('changed_nodes') == [(1, None)]
    refreshes = listing.stats.refreshes
    got = _period(listing, conf, fake, shards=['s0'])
    assert listing.stats.refreshes == refreshes + 1
    assert _view(got, 'shard') == _view(
        fake.list_nodes(ALL, shards=['s0']), 'shard')


def test_a_failed_read_keeps_nothing_and_the_next_period_lists_in_full(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake)
    fake.nodes[sorted(fake.nodes)[0]]['maintenance'] = True
    fake.fail('updated_at', ironic.IronicUnavailable('503'))
    with pytest.raises(ironic.IronicUnavailable):
        _period(listing, conf, fake)
    assert listing.kept == 0
    fake.calls.clear()
    got = _period(listing, conf, fake)
    assert _requests(fake).count('list_nodes') == 1
    assert _view(got) == _view(fake.list_nodes(ALL))


def test_listing_full_keeps_nothing(fake: fake_ironic.FakeIronic) -> None:
    conf = _conf(listing='full')
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    for _ in range(3):
        _period(listing, conf, fake)
    assert _requests(fake) == ['list_nodes'] * 3
    assert listing.kept == 0
    # Switched on by a reload: the next period lists in full, then reads
    # only what changed.
    conf.set_override('listing', 'delta', group='ironic_multi')
    fake.calls.clear()
    _period(listing, conf, fake)
    _period(listing, conf, fake)
    assert _requests(fake).count('list_nodes') == 1
    conf.set_override('listing', 'full', group='ironic_multi')
    _period(listing, conf, fake)
    assert listing.kept == 0


def test_a_listing_no_longer_asked_for_is_dropped(
        fake: fake_ironic.FakeIronic) -> None:
    conf = _conf()
    listing = delta.DeltaListing(fake)  # type: ignore[arg-type]
    _period(listing, conf, fake, shards=['s0'])
    _period(listing, conf, fake, shards=['s1'])
    assert listing.kept == 2
    _period(listing, conf, fake, shards=['s1'])
    assert listing.kept == 1
