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
"""The python-ironicclient wrapper: paging, versions, retries, errors."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import http.client
import logging
import socket
import threading
import types
from typing import Any
from unittest import mock

from ironicclient import exc as ir_exc
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from nova.conf import ironic as nova_ironic_conf
from nova.conf import utils as conf_utils
from oslo_config import cfg
import pytest
import requests
from urllib3 import exceptions as urllib3_exc

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.division import partition
from nova_ironic_multi import ironic
from nova_ironic_multi.ironic import connection
from nova_ironic_multi.ironic import nodeinfo


class Node:
    def __init__(self, uuid: str, group: str = '') -> None:
        self.uuid = uuid
        self.conductor_group = group


class FakeNodeManager:
    """Answers page() like Ironic with pages of ``page`` nodes.

    Markers are positions in creation order, as in Ironic.
    """

    def __init__(self, nodes: list[Node], page: int) -> None:
        self.nodes = nodes
        self.page_size = page
        self.list_calls: list[dict[str, Any]] = []

    def page(self, **kwargs: Any) -> tuple[list[Node], bool]:
        """A page, and whether Ironic would link a next one (it is full)."""
        self.list_calls.append(kwargs)
        start = 0
        if kwargs['marker'] is not None:
            start = [n.uuid for n in self.nodes].index(kwargs['marker']) + 1
        found = self.nodes[start:start + self.page_size]
        return found, len(found) == self.page_size


def make(nodes: list[Node], page: int, version: tuple[int, int] = (1, 115)
         ) -> tuple[ironic.Ironic, FakeNodeManager]:
    client = ironic.Ironic(connection_conf())
    manager = FakeNodeManager(nodes, page)
    client._client, client._version = mock.Mock(node_pages=manager), version
    return client, manager


def test_pages_with_markers_and_filters_on_every_request() -> None:
    nodes = [Node('n%02d' % i, 'rack-a') for i in range(25)]
    client, manager = make(nodes, page=10)
    listed = client.list_nodes(partition.Scope(conductor_group='rack-a',
                                               shard='s1'))
    assert [n.uuid for n in listed] == [n.uuid for n in nodes]
    # The short third page has no "next" link: nothing more is asked.
    assert [c['marker'] for c in manager.list_calls] == [
        None, 'n09', 'n19']
    for call in manager.list_calls:
        # limit=None: one request each, never a followed "next" link.
        assert call['limit'] is None
        assert call['conductor_group'] == 'rack-a'
        assert call['shards'] == ['s1']
        # Only what a period reads, and what checking the scope needs.
        assert sorted(call['fields']) == sorted(
            nodeinfo.LISTING_FIELDS + ('conductor_group', 'shard'))
    assert client.requests['list'] == 3


def test_page_size_is_whatever_ironic_allows() -> None:
    # Ironic's [api] max_limit decides the page size; only its missing
    # "next" link ends the listing, whatever the page size.
    nodes = [Node('n%02d' % i) for i in range(7)]
    client, manager = make(nodes, page=3)
    assert len(client.list_nodes(partition.Scope())) == 7
    assert 'conductor_group' not in manager.list_calls[0]


def test_a_full_last_page_costs_one_empty_page_more() -> None:
    nodes = [Node('n%02d' % i) for i in range(6)]
    client, manager = make(nodes, page=3)
    assert len(client.list_nodes(partition.Scope())) == 6
    assert [c['marker'] for c in manager.list_calls] == [None, 'n02', 'n05']


def test_a_listing_that_fits_one_page_is_one_request() -> None:
    client, manager = make([Node('a'), Node('b')], page=1000)
    assert len(client.list_nodes(partition.Scope(), sharded=False)) == 2
    assert client.requests['list'] == 1


class FakeHttp:
    """python-ironicclient's HTTP client, answering node lists."""

    endpoint_trimmed = 'http://ironic.example.com'

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.urls: list[str] = []

    def json_request(self, method: str, url: str,
                     **kwargs: Any) -> tuple[Any, Any]:
        self.urls.append(url)
        return mock.Mock(), self.bodies.pop(0)


def test_node_pages_keeps_what_the_next_link_says() -> None:
    node = {'uuid': 'a', 'name': None}
    http = FakeHttp([
        {'nodes': [node], 'next': 'http://x/v1/nodes?marker=a&limit=1'},
        {'nodes': [node]},
        {'nodes': []}])
    pages = ironic.NodePages(http)
    found, more = pages.page(marker=None, limit=None, sharded=False,
                             fields=['uuid'])
    assert [n.uuid for n in found] == ['a'] and more
    assert 'sharded=False' in http.urls[0] and 'fields=uuid' in http.urls[0]
    assert pages.page(marker='a', limit=None) == (mock.ANY, False)
    assert pages.page(marker='a', limit=None) == ([], False)
    # Anything else is the HTTP client's own.
    assert pages.endpoint_trimmed == FakeHttp.endpoint_trimmed


def test_duplicates_across_pages_are_dropped() -> None:
    client, manager = make([], page=3)
    pages = [([Node('a'), Node('b')], True), ([Node('b'), Node('c')], True),
             ([], False)]
    manager.page = lambda **kw: pages.pop(0)  # type: ignore
    assert [n.uuid for n in client.list_nodes(partition.Scope())] == [
        'a', 'b', 'c']


def test_shard_scope_on_an_old_ironic_is_refused_not_widened() -> None:
    client, manager = make([Node('a')], page=10, version=(1, 81))
    with pytest.raises(ironic.VersionNotSupported, match='shard'):
        client.list_nodes(partition.Scope(shard='s1'))
    assert manager.list_calls == []
    # Without a shard scope the old Ironic is fine, and no shard field.
    client.list_nodes(partition.Scope(conductor_group=''))
    assert 'shard' not in manager.list_calls[0]['fields']
    assert 'conductor_group' in manager.list_calls[0]['fields']
    # No scope at all: neither field, Ironic need not serialise them.
    client.list_nodes(partition.Scope())
    assert set(manager.list_calls[-1]['fields']) == set(
        nodeinfo.LISTING_FIELDS)


LOCKED = ('Node node is locked by host c1, please retry after the current '
          'operation is completed.')


def test_a_locked_node_is_retried_as_nova_configures() -> None:
    sleeps: list[float] = []
    client = ironic.Ironic(connection_conf(api_max_retries=3,
                                           api_retry_interval=7),
                           sleep=sleeps.append)
    fake = mock.Mock()
    fake.node.set_power_state.side_effect = [
        ir_exc.Conflict(LOCKED), ir_exc.Conflict(LOCKED), None]
    client._client, client._version = fake, (1, 115)
    client.set_power_state('node', 'on')
    assert fake.node.set_power_state.call_count == 3
    assert sleeps == [7, 7]
    fake.node.set_power_state.side_effect = ir_exc.Conflict(LOCKED)
    with pytest.raises(ironic.Conflict):
        client.set_power_state('node', 'on')
    assert fake.node.set_power_state.call_count == 3 + 4


def test_a_conflict_other_than_a_lock_is_an_answer_not_retried() -> None:
    # Retrying a duplicate volume target would only repeat the 409 for
    # api_max_retries x api_retry_interval seconds (two minutes by default).
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.volume_target.create.side_effect = ir_exc.Conflict(
        'A volume target with the boot index 0 already exists for node')
    with pytest.raises(ironic.Conflict):
        client.create_volume_target(node_uuid='node', boot_index=0)
    assert fake.volume_target.create.call_count == 1
    assert sleeps == []


def fake_client(**opts: Any) -> tuple[ironic.Ironic, Any, list[float]]:
    """A client on a mock python-ironicclient; sleeps are recorded."""
    sleeps: list[float] = []
    client = ironic.Ironic(connection_conf(**opts), sleep=sleeps.append)
    fake = mock.Mock()
    client._client, client._version = fake, (1, 115)
    return client, fake, sleeps


NO_FREE_WORKER = ir_exc.ServiceUnavailable(
    'No free conductor workers available')


@pytest.mark.parametrize('error', [
    ir_exc.Conflict('associated'), NO_FREE_WORKER,
    ks_exc.ConnectFailure('refused'), ir_exc.InternalServerError('boom')])
def test_the_reservation_is_never_retried(error: Exception) -> None:
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.update.side_effect = error
    with pytest.raises(ironic.IronicError):
        client.reserve('node', 'inst')
    fake.node.update.assert_called_once_with(
        'node', [{'op': 'add', 'path': '/instance_uuid', 'value': 'inst'}])
    assert sleeps == []


@pytest.mark.parametrize('request_name,method,args', [
    ('provision', 'set_provision_state', ('node', 'active')),
    ('power', 'set_power_state', ('node', 'on')),
    ('get', 'get', ('node',)),
    ('vif_detach', 'vif_detach', ('node', 'vif')),
    ('release', 'update', ('node',)),
])
def test_no_free_conductor_worker_is_retried_as_nova_configures(
        request_name: str, method: str, args: tuple[str, ...],
        caplog: pytest.LogCaptureFixture) -> None:
    client, fake, sleeps = fake_client(api_max_retries=3,
                                       api_retry_interval=5)
    getattr(fake.node, method).side_effect = [NO_FREE_WORKER,
                                              NO_FREE_WORKER, mock.Mock()]
    calls: dict[str, Callable[..., Any]] = {
        'provision': client.set_provision_state,
        'power': client.set_power_state,
        'get': client.get_fields,
        'vif_detach': client.vif_detach,
        'release': client.release}
    call = calls[request_name]
    with caplog.at_level('DEBUG', logger='nova_ironic_multi.ironic'):
        if request_name == 'get':
            call('node', ['uuid'])
        else:
            call(*args)
    assert getattr(fake.node, method).call_count == 3
    assert sleeps == [5, 5]
    retries = [r for r in caplog.records if 'retry' in r.getMessage()]
    assert [r.levelname for r in retries] == ['DEBUG', 'DEBUG']
    assert 'retry 2 of 3' in retries[-1].getMessage()


def test_503_is_retried_n_times_then_the_error_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    client, fake, sleeps = fake_client(api_max_retries=4,
                                       api_retry_interval=2)
    fake.node.set_provision_state.side_effect = NO_FREE_WORKER
    with pytest.raises(ironic.IronicUnavailable) as e:
        client.set_provision_state('node-1', 'active')
    assert ironic.is_transient(e.value)
    assert fake.node.set_provision_state.call_count == 1 + 4
    assert sleeps == [2] * 4
    (warning,) = [r for r in caplog.records if r.levelname == 'WARNING']
    message = warning.getMessage()
    assert 'node.set_provision_state node-1' in message
    assert 'after 5 attempts' in message
    assert 'api_max_retries = 4' in message
    assert 'api_retry_interval = 2' in message


@pytest.mark.parametrize('error', [
    ks_exc.ConnectFailure('reset by peer'),
    ks_exc.ConnectTimeout('slow'),
    ir_exc.ConnectionRefused('refused'),
])
def test_connection_failures_are_retried(error: Exception) -> None:
    client, fake, sleeps = fake_client(api_max_retries=60,
                                       api_retry_interval=1)
    fake.node.set_power_state.side_effect = [error, error, None]
    client.set_power_state('node', 'off')
    assert fake.node.set_power_state.call_count == 3
    assert sleeps == [1, 1]


def test_a_failed_connection_attempt_is_retried_too() -> None:
    # Ironic unreachable when the first request connects (and negotiates).
    conf = connection_conf(endpoint_override='http://127.0.0.1:6385',
                           api_max_retries=2, api_retry_interval=0)
    fake = mock.Mock()
    fake.negotiate_api_version.side_effect = [ks_exc.ConnectFailure('no'),
                                              '1.82']
    with mock.patch('ironicclient.client.get_client', return_value=fake):
        client = ironic.Ironic(conf, sleep=lambda s: None)
        client.get_fields('node', ['uuid'])
    assert fake.node.get.call_count == 1


def answer_timed_out() -> Exception:
    """What keystoneauth raises when Ironic's answer times out."""
    try:
        try:
            raise requests.exceptions.ReadTimeout('read timed out')
        except requests.exceptions.Timeout:
            # No "from": exactly as keystoneauth raises it.
            raise ks_exc.ConnectTimeout(  # noqa: B904
                'Request to ironic timed out')
    except ks_exc.ConnectTimeout as e:
        return e


@pytest.mark.parametrize('error,expected', [
    (ir_exc.InternalServerError('db'), ironic.IronicUnavailable),
    (answer_timed_out(), ironic.IronicUnavailable),
    (ir_exc.BadRequest('bad state'), ironic.BadRequest),
    (ir_exc.NotFound('gone'), ironic.NodeNotFound),
])
def test_answers_that_may_follow_an_action_are_not_retried(
        error: Exception, expected: type) -> None:
    # Ironic may have acted (a 500, an answer that timed out) or would say
    # the same again (4xx): the caller decides.
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.set_provision_state.side_effect = error
    with pytest.raises(expected) as e:
        client.set_provision_state('node', 'deleted')
    assert not ironic.is_transient(e.value)
    assert fake.node.set_provision_state.call_count == 1
    assert sleeps == []


def test_the_listing_is_not_retried_the_next_period_is() -> None:
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node_pages.page.side_effect = ks_exc.ConnectFailure('refused')
    with pytest.raises(ironic.IronicUnavailable):
        client.list_nodes(partition.Scope())
    assert fake.node_pages.page.call_count == 1


@pytest.mark.parametrize('error, answer', [
    (ir_exc.ServiceUnavailable('Keystone unreachable'), None),
    (ks_exc.ConnectFailure('refused'), None),
    (ir_exc.NotFound('no such node'), False)])
def test_whether_a_node_exists_is_asked_once(error: Exception,
                                             answer: bool | None) -> None:
    # nova asks for every compute node nobody reports, inside its period:
    # retrying through an outage would hold the period for minutes, and
    # "cannot say" (None) already keeps the record.
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.get.side_effect = error
    assert client.node_exists('node') is answer
    assert fake.node.get.call_count == 1
    assert sleeps == []
    fake.node.get.side_effect = None
    assert client.node_exists('node') is True


@pytest.mark.parametrize('error', [
    NO_FREE_WORKER, ks_exc.ConnectFailure('Connection refused'),
    ks_exc.ConnectTimeout('Connection timed out')])
@pytest.mark.parametrize('request_, manager, method', [
    (lambda c: c.shards(), 'shard', 'list'),
    (lambda c: c.get_node('n1'), 'node', 'get'),
    (lambda c: c.node_for_instance('i1'), 'node', 'get_by_instance_uuid'),
    (lambda c: c.volume_targets('n1'), 'volume_target', 'list'),
    (lambda c: c.get_fields('n1', ['uuid']), 'node', 'get')])
def test_inside_fail_fast_every_request_is_asked_once(
        error: Exception, request_: Any, manager: str, method: str) -> None:
    client, fake, sleeps = fake_client(api_max_retries=60,
                                       api_retry_interval=2)
    call = getattr(getattr(fake, manager), method)
    call.side_effect = error
    with client.fail_fast(), client.fail_fast():
        with pytest.raises(ironic.IronicUnavailable):
            request_(client)
        # (Nested blocks: the inner one's end leaves the outer in force.)
    assert call.call_count == 1
    assert sleeps == []
    # Outside, nova's retries apply again.
    with pytest.raises(ironic.IronicUnavailable):
        request_(client)
    assert call.call_count == 1 + 61
    assert sleeps == [2] * 60


def test_fail_fast_is_this_threads_only() -> None:
    client, fake, sleeps = fake_client(api_max_retries=3,
                                       api_retry_interval=2)
    fake.node.get.side_effect = NO_FREE_WORKER
    seen: list[bool] = []

    def other() -> None:
        seen.append(client.failing_fast)
        with pytest.raises(ironic.IronicUnavailable):
            client.get_node('n1')

    with client.fail_fast():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == [False]
    assert fake.node.get.call_count == 4
    assert not client.failing_fast


def test_vif_attach_retries_transient_failures_and_locks_not_409s(
        ) -> None:
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.vif_attach.side_effect = [
        NO_FREE_WORKER, ir_exc.Conflict(LOCKED), None]
    client.vif_attach('node', 'vif')
    assert fake.node.vif_attach.call_count == 3
    fake.node.vif_attach.side_effect = ir_exc.Conflict('attached')
    with pytest.raises(ironic.Conflict):
        client.vif_attach('node', 'vif')
    assert fake.node.vif_attach.call_count == 4


def test_an_nmi_is_never_repeated_after_a_lost_answer() -> None:
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.inject_nmi.side_effect = ks_exc.ConnectFailure('reset')
    with pytest.raises(ironic.IronicUnavailable):
        client.inject_nmi('node')
    assert fake.node.inject_nmi.call_count == 1


def test_no_retries_configured_means_one_attempt() -> None:
    client, fake, sleeps = fake_client(api_max_retries=0)
    fake.node.set_power_state.side_effect = NO_FREE_WORKER
    with pytest.raises(ironic.IronicUnavailable):
        client.set_power_state('node', 'on')
    assert fake.node.set_power_state.call_count == 1


@pytest.mark.parametrize('raised,expected', [
    (ir_exc.NotFound(), ironic.NodeNotFound),
    (ir_exc.Conflict(), ironic.Conflict),
    (ir_exc.BadRequest(), ironic.BadRequest),
    (ir_exc.InternalServerError(), ironic.IronicUnavailable),
    (ir_exc.ServiceUnavailable(), ironic.IronicUnavailable),
    (ir_exc.UnsupportedVersion('1.9'), ironic.VersionNotSupported),
    (ks_exc.ConnectFailure('refused'), ironic.IronicUnavailable),
    (ks_exc.ConnectTimeout('slow'), ironic.IronicUnavailable),
    (ks_exc.EndpointNotFound(), ironic.IronicUnavailable),
])
def test_errors_come_out_as_this_modules_exceptions(
        raised: Exception, expected: type) -> None:
    client = ironic.Ironic(connection_conf(api_max_retries=0))
    fake = mock.Mock()
    fake.node.get.side_effect = raised
    client._client, client._version = fake, (1, 115)
    with pytest.raises(expected) as e:
        client.get_node('n1')
    assert e.value.__cause__ is raised


def connection_conf(**ironic_opts: Any) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    # By group name: nova's module-level OptGroup shares its option table
    # with every ConfigOpts it was registered on.
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    conf_utils.register_ksa_opts(conf, 'ironic', 'baremetal')
    nim_conf.register_opts(conf)
    for k, v in ironic_opts.items():
        conf.set_override(k, v, group='ironic')
    return conf


def test_connects_with_novas_ironic_options() -> None:
    conf = connection_conf(endpoint_override='http://127.0.0.1:6385',
                           api_max_retries=7, api_retry_interval=3)
    made = []

    def get_client(*args: Any, **kwargs: Any) -> Any:
        fake = mock.Mock()
        fake.negotiate_api_version.return_value = '1.82'
        made.append((args, kwargs))
        return fake

    with mock.patch('ironicclient.client.get_client', get_client):
        client = ironic.Ironic(conf)
        assert client.version == (1, 82)
    ((_, kwargs),) = made
    assert kwargs['endpoint'] == 'http://127.0.0.1:6385'
    # The client's own retry loop (409s, 503s, connection failures) is off.
    assert (kwargs['max_retries'], kwargs['retry_interval']) == (0, 0)
    assert kwargs['os_ironic_api_version'] == ['1.46', '1.82']
    # Every request has a timeout, even though [ironic] timeout is unset.
    assert kwargs['session'].timeout == 60.0


def test_ironic_too_old_is_refused() -> None:
    conf = connection_conf(endpoint_override='http://127.0.0.1:6385')
    fake = mock.Mock()
    fake.negotiate_api_version.return_value = '1.45'
    with mock.patch('ironicclient.client.get_client', return_value=fake):
        with pytest.raises(ironic.VersionNotSupported, match='1.45'):
            ironic.Ironic(conf).get_node("n1")


def test_no_endpoint_says_which_options_to_set() -> None:
    conf = connection_conf()
    with pytest.raises(ironic.IronicMisconfigured,
                       match=r'\[ironic\] has neither endpoint_override '
                       r'nor auth_type'):
        ironic.Ironic(conf).get_node('n')


def test_vif_list_returns_the_ids() -> None:
    client = ironic.Ironic(connection_conf())
    fake = mock.Mock()
    fake.node.vif_list.return_value = [mock.Mock(id='v1'),
                                       mock.Mock(id='v2')]
    client._client, client._version = fake, (1, 115)
    assert client.vif_list('node') == ['v1', 'v2']
    fake.node.vif_list.assert_called_once_with('node')


@pytest.mark.parametrize('message,locked', [
    ('Node n1 is locked by host c1, please retry after the current '
     'operation is completed. (HTTP 409)', True),
    ('Unable to attach VIF because VIF v1 is already attached to Ironic '
     'port p1 (HTTP 409)', False),
    ('Node n1 is associated with instance i1. (HTTP 409)', False),
])
def test_a_locked_node_is_told_from_other_conflicts(message: str,
                                                    locked: bool) -> None:
    client = ironic.Ironic(connection_conf(api_max_retries=0))
    fake = mock.Mock()
    fake.node.vif_attach.side_effect = ir_exc.Conflict(message)
    client._client, client._version = fake, (1, 115)
    with pytest.raises(ironic.Conflict) as e:
        client.vif_attach('n1', 'v1')
    assert ironic.is_node_locked(e.value) is locked


def test_the_clients_own_retry_errors_are_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    # With its retries off, python-ironicclient logs every 503 at ERROR
    # ("Attempt 1 of 1") before _call retries it, perhaps successfully.
    ironic.Ironic(connection_conf())
    client_log = logging.getLogger('ironicclient.common.http')
    client_log.error('Error contacting Ironic server: No free conductor '
                     'workers (HTTP 503). Attempt 1 of 1')
    client_log.error('something else')
    assert [r.getMessage() for r in caplog.records] == ['something else']


def test_shard_listing_keeps_markers_and_filters_on_every_page() -> None:
    nodes = [Node('n%02d' % i, 'rack-a') for i in range(25)]
    client, manager = make(nodes, page=10)
    listed = client.list_nodes(partition.Scope(conductor_group='rack-a'),
                               shards=['s2', 's1', 's1'])
    assert len(listed) == 25
    assert [c['marker'] for c in manager.list_calls] == [
        None, 'n09', 'n19']
    for call in manager.list_calls:
        assert call['limit'] is None
        assert call['shards'] == ['s1', 's2']
        assert call['conductor_group'] == 'rack-a'
        assert 'sharded' not in call
        assert 'shard' in call['fields']


def test_unsharded_listing_filters_every_page(
        caplog: pytest.LogCaptureFixture) -> None:
    client, manager = make([Node('n%02d' % i) for i in range(5)], page=2)
    with caplog.at_level(logging.DEBUG, 'nova_ironic_multi.ironic'):
        client.list_nodes(partition.Scope(conductor_group='g1'),
                          sharded=False)
    # What was asked of Ironic, for an operator reading a DEBUG log.
    assert ('Listed 5 Ironic nodes in 3 request(s) (conductor_group=g1, '
            'sharded=False)') in caplog.messages
    assert len(manager.list_calls) == 3     # the third is short: the last
    for call in manager.list_calls:
        assert call['sharded'] is False
        assert 'shards' not in call
        assert 'shard' in call['fields']


def test_no_shards_lists_nothing_not_everything() -> None:
    client, manager = make([Node('a')], page=10)
    assert client.list_nodes(partition.Scope(), shards=[]) == []
    assert manager.list_calls == []


def test_many_shards_are_listed_in_batches() -> None:
    client, manager = make([], page=10)
    names = ['shard-%03d' % i for i in range(ironic.SHARDS_PER_REQUEST + 1)]
    client.list_nodes(partition.Scope(), shards=names)
    batches = [c['shards'] for c in manager.list_calls]
    assert batches == [names[:-1], names[-1:]]


def test_listing_by_shard_on_an_old_ironic_fails_closed() -> None:
    client, manager = make([Node('a')], page=10, version=(1, 81))
    for kwargs in ({'shards': ['s1']}, {'sharded': False},
                   {'with_shard': True}):
        with pytest.raises(ironic.VersionNotSupported, match='1.82'):
            client.list_nodes(partition.Scope(), **kwargs)
    with pytest.raises(ironic.VersionNotSupported, match='1.82'):
        client.shards()
    assert manager.list_calls == []


def test_shards_are_counted_by_name() -> None:
    client, _ = make([], page=10)
    shard = mock.Mock()
    shard.list.return_value = [mock.Mock(name='a', count=3),
                               mock.Mock(count=2)]
    shard.list.return_value[0].name = 'rack-1'
    shard.list.return_value[1].name = 'None'
    client._client.shard = shard
    assert client.shards() == {'rack-1': 3, 'None': 2}
    assert client.requests['shards'] == 1


@pytest.mark.parametrize('error', [NO_FREE_WORKER, ir_exc.Conflict(LOCKED),
                                   ks_exc.ConnectFailure('refused')])
def test_leftover_target_requests_can_be_asked_once(error: Exception
                                                    ) -> None:
    # The periods remove leftover volume targets: nova's period must not
    # wait api_max_retries x api_retry_interval on any of them.
    client, fake, sleeps = fake_client(api_max_retries=60)
    fake.node.get.side_effect = error
    fake.volume_target.list.side_effect = error
    fake.volume_target.delete.side_effect = error
    for call in (lambda: client.get_node('node', once=True),
                 lambda: client.volume_targets('node', once=True),
                 lambda: client.delete_volume_target('target', once=True)):
        with pytest.raises(ironic.IronicError):
            call()
    assert fake.node.get.call_count == 1
    assert fake.volume_target.list.call_count == 1
    assert fake.volume_target.delete.call_count == 1
    assert sleeps == []
    # Elsewhere (a delete, a deploy) they are retried as nova configures.
    fake.volume_target.list.side_effect = [error, []]
    assert client.volume_targets('node') == []
    assert fake.volume_target.list.call_count == 3


# Requests that change Ironic: never repeated once Ironic may have acted --

def _raised(ks_error: Any, inner: BaseException) -> BaseException:
    """``ks_error`` raised while handling ``inner``, as keystoneauth does."""
    try:
        try:
            raise inner
        except Exception:
            # (Implicitly chained, as keystoneauth raises it.)
            raise ks_error  # noqa: B904
    except Exception as e:
        return e


# urllib3's errors below are built without a pool or a connection (None,
# hence the ignores): the client reads only their classes and causes.
def _refused() -> BaseException:
    return _raised(ks_exc.ConnectFailure('Unable to establish connection'),
                   requests.exceptions.ConnectionError(
                       urllib3_exc.MaxRetryError(
                           None,  # type: ignore[arg-type]  # no pool
                           '/v1/nodes', urllib3_exc.NewConnectionError(
                               None,  # type: ignore[arg-type]  # no conn.
                               '[Errno 111] Connection refused'))))


def _no_such_host() -> BaseException:
    return _raised(ks_exc.ConnectFailure('Unable to establish connection'),
                   requests.exceptions.ConnectionError(
                       urllib3_exc.MaxRetryError(
                           None,  # type: ignore[arg-type]  # no pool
                           '/v1/nodes', urllib3_exc.NameResolutionError(
                               'ironic',
                               None,  # type: ignore[arg-type]  # no conn.
                               socket.gaierror(
                                   -2, 'Name or service not known')))))


def _connect_timeout() -> BaseException:
    return _raised(ks_exc.ConnectTimeout('Request to /v1/nodes timed out'),
                   requests.exceptions.ConnectTimeout(
                       urllib3_exc.MaxRetryError(
                           None,  # type: ignore[arg-type]  # no pool
                           '/v1/nodes', urllib3_exc.ConnectTimeoutError(
                               None, 'connect timeout=60'))))


def _aborted() -> BaseException:
    return _raised(ks_exc.ConnectFailure('Unable to establish connection'),
                   requests.exceptions.ConnectionError(
                       urllib3_exc.ProtocolError(
                           'Connection aborted.',
                           http.client.RemoteDisconnected(
                               'Remote end closed connection without '
                               'response'))))


def _reset() -> BaseException:
    return _raised(ks_exc.ConnectFailure('Unable to establish connection'),
                   requests.exceptions.ConnectionError(
                       urllib3_exc.ProtocolError(
                           'Connection aborted.', ConnectionResetError(
                               104, 'Connection reset by peer'))))


def test_real_connection_failures_are_told_apart() -> None:
    # keystoneauth's own exceptions, from real sockets on loopback: a
    # refused connection never reached the server; a connection closed
    # after the server read the request may have been acted on.
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    read = threading.Event()

    def close_after_reading() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        read.set()
        conn.close()

    thread = threading.Thread(target=close_after_reading, daemon=True)
    thread.start()
    session = ks_session.Session()
    with pytest.raises(ks_exc.ConnectFailure) as aborted:
        session.put('http://127.0.0.1:%d/v1/nodes/n/states/power' % port,
                    json={'target': 'rebooting'})
    thread.join(5)
    assert read.is_set()
    listener.close()
    with pytest.raises(ks_exc.ConnectFailure) as refused:
        session.put('http://127.0.0.1:%d/v1/nodes/n/states/power' % port,
                    json={'target': 'rebooting'})
    # Both are "transient" to keystoneauth and python-ironicclient alike.
    assert ironic.is_transient(aborted.value)
    assert ironic.is_transient(refused.value)
    assert not ironic.did_not_act(aborted.value)
    assert ironic.did_not_act(refused.value)


@pytest.mark.parametrize('make, untouched', [
    (_refused, True), (_no_such_host, True), (_connect_timeout, True),
    (lambda: NO_FREE_WORKER, True),
    (_aborted, False), (_reset, False),
    (lambda: ks_exc.ConnectFailure('no cause'), False),
    (lambda: ir_exc.InternalServerError('boom'), False)])
def test_did_not_act(make: Any, untouched: bool) -> None:
    error = make()
    assert ironic.did_not_act(error) is untouched
    wrapped = ironic.IronicUnavailable('x')
    wrapped.__cause__ = error
    assert ironic.did_not_act(wrapped) is untouched


def _node(**fields: Any) -> Any:
    return types.SimpleNamespace(**fields)


PROVISION = dict(provision_state=None, target_provision_state=None,
                 provision_updated_at='t1')


def _provision(**fields: Any) -> Any:
    return _node(**{**PROVISION, **fields})


def _power(**fields: Any) -> Any:
    return _node(**{**dict(power_state='power on', target_power_state=None,
                           updated_at='t1'), **fields})


@dataclasses.dataclass
class Kind:
    """A request that changes Ironic, and how the node shows it took it."""

    call: Any
    #: (manager, method) of the request on python-ironicclient
    sent: tuple[str, str]
    #: the node read before sending (rebuild, reboot), else None
    before: Any
    #: what the node shows when Ironic took it / did not
    taken: Any
    untouched: Any
    #: where the verdict reads from: (manager, method) of a read
    read: tuple[str, str] = ('node', 'get')
    #: retried when Ironic surely did not act (the reservation never is)
    retried: bool = True


KINDS = {
    'deploy': Kind(lambda c: c.set_provision_state('n', 'active'),
                   ('node', 'set_provision_state'), None,
                   _provision(provision_state='deploying',
                              target_provision_state='active'),
                   _provision(provision_state='available')),
    'deploy done': Kind(lambda c: c.set_provision_state('n', 'active'),
                        ('node', 'set_provision_state'), None,
                        _provision(provision_state='active'),
                        _provision(provision_state='available')),
    'rebuild': Kind(lambda c: c.set_provision_state('n', 'rebuild'),
                    ('node', 'set_provision_state'),
                    _provision(provision_state='active'),
                    # Done already: back in active, moved since.
                    _provision(provision_state='active',
                               provision_updated_at='t2'),
                    _provision(provision_state='active')),
    'undeploy': Kind(lambda c: c.set_provision_state('n', 'deleted'),
                     ('node', 'set_provision_state'), None,
                     _provision(provision_state='cleaning',
                                target_provision_state='available'),
                     _provision(provision_state='active')),
    'rescue': Kind(lambda c: c.set_provision_state('n', 'rescue'),
                   ('node', 'set_provision_state'), None,
                   _provision(provision_state='rescue'),
                   _provision(provision_state='active')),
    'unrescue': Kind(lambda c: c.set_provision_state('n', 'unrescue'),
                     ('node', 'set_provision_state'), None,
                     _provision(provision_state='unrescuing',
                                target_provision_state='active'),
                     _provision(provision_state='rescue')),
    'reboot': Kind(lambda c: c.set_power_state('n', 'reboot'),
                   ('node', 'set_power_state'), _power(),
                   # Done already: power on again, the node written since.
                   _power(updated_at='t2'), _power()),
    'reboot under way': Kind(lambda c: c.set_power_state('n', 'reboot'),
                             ('node', 'set_power_state'), _power(),
                             _power(target_power_state='power on',
                                    updated_at='t2'), _power()),
    'volume target': Kind(
        lambda c: c.create_volume_target(
            node_uuid='n', volume_type='iscsi', properties={},
            boot_index=0, volume_id='vol'),
        ('volume_target', 'create'), None,
        [_node(volume_id='vol', boot_index=0)],
        [_node(volume_id='other', boot_index=1)],
        read=('volume_target', 'list')),
    'VIF attach': Kind(lambda c: c.vif_attach('n', 'vif'),
                       ('node', 'vif_attach'), None, [_node(id='vif')], [],
                       read=('node', 'vif_list')),
    'VIF detach': Kind(lambda c: c.vif_detach('n', 'vif'),
                       ('node', 'vif_detach'), None, [], [_node(id='vif')],
                       read=('node', 'vif_list')),
    'release': Kind(lambda c: c.release('n'), ('node', 'update'), None,
                    _node(instance_uuid=None), _node(instance_uuid='inst')),
    'reservation': Kind(lambda c: c.reserve('n', 'inst'),
                        ('node', 'update'), None,
                        _node(instance_uuid='inst'),
                        _node(instance_uuid=None), retried=False),
}


def _kind_client(kind: Kind, error: BaseException,
                 *verdicts: Any) -> tuple[ironic.Ironic, Any, Any,
                                          list[float]]:
    client, fake, sleeps = fake_client(api_max_retries=3,
                                       api_retry_interval=1)
    sent = getattr(getattr(fake, kind.sent[0]), kind.sent[1])
    sent.side_effect = [error, None]
    reads = [kind.before] if kind.before is not None else []
    if kind.read == ('node', 'get'):
        fake.node.get.side_effect = reads + list(verdicts)
    else:
        fake.node.get.side_effect = reads
        getattr(getattr(fake, kind.read[0]), kind.read[1]).side_effect = (
            list(verdicts))
    return client, fake, sent, sleeps


@pytest.mark.parametrize('lost', [_aborted, _reset])
@pytest.mark.parametrize('name', sorted(KINDS))
def test_an_answer_lost_after_sending_is_judged_from_the_node(
        name: str, lost: Any) -> None:
    kind = KINDS[name]
    # Ironic took it: done, never sent again.
    client, fake, sent, sleeps = _kind_client(kind, lost(), kind.taken)
    kind.call(client)
    assert sent.call_count == 1
    assert sleeps == []
    # Ironic serves no timestamps but provision_updated_at in ``fields``
    # (a 400: "Field updated_at is not a valid field").
    for call in fake.node.get.call_args_list:
        assert not {'updated_at', 'created_at'} & set(
            call.kwargs.get('fields') or ()), call
    # No trace of it: asking again is safe (the reservation is never
    # retried: nova reschedules instead).
    client, fake, sent, sleeps = _kind_client(kind, lost(), kind.untouched)
    if kind.retried:
        kind.call(client)
        assert sent.call_count == 2
        assert sleeps == [1]
    else:
        with pytest.raises(ironic.IronicUnavailable):
            kind.call(client)
        assert sent.call_count == 1
    # The node cannot be read: not repeated, the failure stands.
    client, fake, sent, sleeps = _kind_client(
        kind, lost(), *[ir_exc.InternalServerError('down')] * 4)
    with pytest.raises(ironic.IronicUnavailable) as e:
        kind.call(client)
    assert not ironic.did_not_act(e.value)
    assert sent.call_count == 1


@pytest.mark.parametrize('untouched', [_refused, _no_such_host,
                                       _connect_timeout,
                                       lambda: NO_FREE_WORKER])
@pytest.mark.parametrize('name', sorted(KINDS))
def test_a_request_ironic_surely_did_not_act_on_is_asked_again(
        name: str, untouched: Any) -> None:
    kind = KINDS[name]
    client, fake, sent, sleeps = _kind_client(kind, untouched())
    if not kind.retried:
        with pytest.raises(ironic.IronicUnavailable):
            kind.call(client)
        assert sent.call_count == 1
        return
    kind.call(client)
    assert sent.call_count == 2
    assert sleeps == [1]


def test_an_nmi_is_asked_again_only_when_it_never_left() -> None:
    client, fake, sleeps = fake_client(api_max_retries=3,
                                       api_retry_interval=1)
    fake.node.inject_nmi.side_effect = [_refused(), None]
    client.inject_nmi('node')
    assert fake.node.inject_nmi.call_count == 2
    fake.node.inject_nmi.side_effect = [_aborted(), None]
    with pytest.raises(ironic.IronicUnavailable):
        client.inject_nmi('node')
    assert fake.node.inject_nmi.call_count == 3


# keystoneauth's adapter retry options ([ironic] connect_retries, ...) -----

def http_error(cls: type, method: str) -> Exception:
    """A python-ironicclient HTTP error as it raises it for ``method``."""
    error: Exception = cls('proxy', method=method, url='/v1/nodes/node')
    return error


def test_connect_retries_size_the_retries_of_a_failed_connection() -> None:
    client, fake, sleeps = fake_client(api_max_retries=60,
                                       api_retry_interval=2,
                                       connect_retries=2,
                                       connect_retry_delay=0.25)
    fake.node.set_power_state.side_effect = ks_exc.ConnectFailure('refused')
    with pytest.raises(ironic.IronicUnavailable):
        client.set_power_state('node', 'on')
    assert fake.node.set_power_state.call_count == 1 + 2
    assert sleeps == [0.25, 0.25]


def test_connect_retries_without_a_delay_back_off_as_keystoneauth(
        ) -> None:
    client, fake, sleeps = fake_client(connect_retries=4)
    fake.node.get.side_effect = ks_exc.ConnectFailure('refused')
    with pytest.raises(ironic.IronicUnavailable):
        client.get_fields('node', ['uuid'])
    assert sleeps == [0.5, 1.0, 2.0, 4.0]


def test_status_code_retries_size_the_retries_of_a_503() -> None:
    client, fake, sleeps = fake_client(api_max_retries=60,
                                       status_code_retries=1,
                                       status_code_retry_delay=3)
    fake.node.set_provision_state.side_effect = NO_FREE_WORKER
    with pytest.raises(ironic.IronicUnavailable):
        client.set_provision_state('node', 'active')
    assert fake.node.set_provision_state.call_count == 2
    assert sleeps == [3]


def test_each_kind_of_failure_has_its_own_count() -> None:
    # A lock, a 503 and a refused connection in one request: each is
    # counted against its own option, none against another's.
    client, fake, sleeps = fake_client(api_max_retries=1,
                                       api_retry_interval=7,
                                       connect_retries=1,
                                       connect_retry_delay=5,
                                       status_code_retries=1,
                                       status_code_retry_delay=3)
    fake.node.set_power_state.side_effect = [
        ir_exc.Conflict(LOCKED), NO_FREE_WORKER,
        ks_exc.ConnectFailure('refused'), None]
    client.set_power_state('node', 'on')
    assert sleeps == [7, 3, 5]


def test_listed_statuses_are_retried_for_reads_only() -> None:
    client, fake, sleeps = fake_client(status_code_retries=2,
                                       status_code_retry_delay=1,
                                       retriable_status_codes=[502, 503])
    fake.node.get.side_effect = [http_error(ir_exc.BadGateway, 'GET'),
                                 mock.Mock()]
    client.get_fields('node', ['uuid'])
    assert fake.node.get.call_count == 2
    # A 502 to a change: Ironic may have acted; not repeated.
    fake.node.set_provision_state.side_effect = http_error(
        ir_exc.BadGateway, 'PUT')
    with pytest.raises(ironic.IronicError):
        client.set_provision_state('node', 'active')
    assert fake.node.set_provision_state.call_count == 1
    assert sleeps == [1]


def test_a_status_not_listed_is_not_retried_even_for_reads() -> None:
    client, fake, sleeps = fake_client(status_code_retries=2)
    fake.node.get.side_effect = http_error(ir_exc.BadGateway, 'GET')
    with pytest.raises(ironic.IronicError):
        client.get_fields('node', ['uuid'])
    assert fake.node.get.call_count == 1


@pytest.mark.parametrize('error', [ks_exc.ConnectFailure('refused'),
                                   NO_FREE_WORKER])
def test_adapter_retries_add_nothing_inside_the_period(
        error: Exception) -> None:
    # The node listing and the check whether a node exists run inside
    # nova's period: whatever the options, one attempt.
    client, fake, sleeps = fake_client(connect_retries=10,
                                       status_code_retries=10,
                                       retriable_status_codes=[503])
    fake.node_pages.page.side_effect = error
    with pytest.raises(ironic.IronicUnavailable):
        client.list_nodes(partition.Scope())
    fake.node.get.side_effect = error
    assert client.node_exists('node') is None
    assert (fake.node_pages.page.call_count, fake.node.get.call_count) == (
        1, 1)
    assert sleeps == []


@pytest.mark.parametrize('error', [
    ks_exc.ConnectFailure('refused'), NO_FREE_WORKER,
    http_error(ir_exc.BadGateway, 'PATCH')])
def test_adapter_retries_never_repeat_the_reservation_or_an_nmi(
        error: Exception) -> None:
    client, fake, sleeps = fake_client(connect_retries=10,
                                       status_code_retries=10,
                                       retriable_status_codes=[502, 503])
    fake.node.update.side_effect = error
    with pytest.raises(ironic.IronicError):
        client.reserve('node', 'inst')
    assert fake.node.update.call_count == 1
    fake.node.inject_nmi.side_effect = ks_exc.ConnectFailure('reset')
    with pytest.raises(ironic.IronicError):
        client.inject_nmi('node')
    assert fake.node.inject_nmi.call_count == 1


def test_keystoneauth_itself_never_retries(requests_mock: Any) -> None:
    # Handed to keystoneauth, connect_retries would repeat any request,
    # the reservation and the listing included. One HTTP request each.
    conf = connection_conf(endpoint_override='http://ironic.test:6385',
                           connect_retries=5, connect_retry_delay=0,
                           status_code_retries=5, status_code_retry_delay=0,
                           api_max_retries=0)
    versions = {'X-OpenStack-Ironic-API-Minimum-Version': '1.1',
                'X-OpenStack-Ironic-API-Maximum-Version': '1.82',
                'X-OpenStack-Ironic-API-Version': '1.82'}
    for url in ('http://ironic.test:6385/', 'http://ironic.test:6385/v1'):
        requests_mock.get(url, headers=versions, json={
            'id': 'v1', 'version': {'id': 'v1', 'version': '1.82',
                                   'min_version': '1.1'},
            'default_version': {'id': 'v1', 'version': '1.82',
                                'min_version': '1.1'},
            'versions': [{'id': 'v1', 'version': '1.82',
                          'min_version': '1.1'}]})
    requests_mock.get('http://ironic.test:6385/v1/nodes/',
                      exc=requests.exceptions.ConnectionError('refused'))
    requests_mock.patch('http://ironic.test:6385/v1/nodes/node',
                        status_code=503, json={})
    client = ironic.Ironic(conf, sleep=lambda s: None)
    with pytest.raises(ironic.IronicUnavailable):
        client.list_nodes(partition.Scope())
    with pytest.raises(ironic.IronicUnavailable):
        client.reserve('node', 'inst')
    methods = [(r.method, r.path) for r in requests_mock.request_history
               if r.path.startswith('/v1/nodes')]
    assert methods == [('GET', '/v1/nodes/'), ('PATCH', '/v1/nodes/node')]


@pytest.mark.parametrize('options,attribute,expected', [
    ({'insecure': True}, 'verify', False),
    ({'cafile': '/etc/ironic-ca.pem'}, 'verify', '/etc/ironic-ca.pem'),
    ({'certfile': '/c.pem', 'keyfile': '/k.pem'}, 'cert',
     ('/c.pem', '/k.pem')),
    ({'timeout': 7}, 'timeout', 7.0),
    ({'collect_timing': True}, '_collect_timing', True),
    ({'split_loggers': True}, '_split_loggers', True),
])
def test_novas_session_options_reach_the_session(
        options: dict[str, Any], attribute: str, expected: Any) -> None:
    # [ironic]'s keystoneauth session options mean what they mean with
    # nova's in-tree driver.
    conf = connection_conf(endpoint_override='http://127.0.0.1:6385',
                           **options)
    session, endpoint = connection.session_and_endpoint(conf)
    assert getattr(session, attribute) == expected
    assert endpoint == 'http://127.0.0.1:6385'


def _ironic_offers(requests_mock: Any, url: str, maximum: str) -> None:
    """Ironic's version document and headers, up to ``maximum``."""
    versions = {'X-OpenStack-Ironic-API-Minimum-Version': '1.1',
                'X-OpenStack-Ironic-API-Maximum-Version': maximum,
                'X-OpenStack-Ironic-API-Version': maximum}
    document = {'id': 'v1', 'version': maximum, 'min_version': '1.1'}
    for path in ('/', '/v1'):
        requests_mock.get(url + path, headers=versions, json={
            'id': 'v1', 'version': document, 'default_version': document,
            'versions': [document]})


def test_an_ironic_too_old_is_named_with_the_versions(
        requests_mock: Any) -> None:
    # Through python-ironicclient's own negotiation: it raises
    # UnsupportedVersion, which nova-compute logged as "Ironic cannot be
    # reached yet" (pointing at the network).
    url = 'http://ironic.test:6385'
    _ironic_offers(requests_mock, url, '1.40')
    client = ironic.Ironic(connection_conf(endpoint_override=url))
    with pytest.raises(ironic.VersionNotSupported) as raised:
        client.connect()
    assert str(raised.value) == (
        'Ironic at %s offers API versions 1.1 to 1.40; this driver needs '
        '1.46 or newer (1.82 for [ironic_multi] divide = shards). Fix: '
        'upgrade Ironic (nova-compute uses the new version without a '
        'restart) or point [ironic] at a newer one.' % url)
    # Upgraded: the next connection takes it, no restart.
    _ironic_offers(requests_mock, url, '1.82')
    client.connect()
    assert client.version == (1, 82)


def test_shards_after_an_ironic_upgrade_need_no_restart(
        requests_mock: Any) -> None:
    # The refusal said "Fix: upgrade Ironic", but the version negotiated
    # first was kept for the process: upgrading was not enough.
    url = 'http://ironic.test:6385'
    _ironic_offers(requests_mock, url, '1.81')
    client = ironic.Ironic(connection_conf(endpoint_override=url))
    # (The versions asked for are 1.46 and 1.82: the highest below.)
    assert client.version == (1, 46)
    with pytest.raises(ironic.VersionNotSupported,
                       match='needs Ironic API 1.82'):
        client.require_shards('[ironic_multi] divide = shards')
    _ironic_offers(requests_mock, url, '1.99')
    client.require_shards('[ironic_multi] divide = shards')
    assert client.version == (1, 82)
    # One request asked again, then nothing more: the version is kept.
    asked = len(requests_mock.request_history)
    client.require_shards('[ironic_multi] divide = shards')
    assert len(requests_mock.request_history) == asked


def test_asking_for_the_version_again_is_one_request_not_retried(
        requests_mock: Any) -> None:
    url = 'http://ironic.test:6385'
    _ironic_offers(requests_mock, url, '1.81')
    conf = connection_conf(endpoint_override=url, connect_retries=5,
                           connect_retry_delay=0, api_max_retries=5)
    client = ironic.Ironic(conf, sleep=lambda s: None)
    assert client.version == (1, 46)
    for path in ('/', '/v1'):
        requests_mock.get(url + path, status_code=503, json={})
    before = len(requests_mock.request_history)
    with pytest.raises(ironic.VersionNotSupported):
        client.require_shards('Listing shards')
    assert len(requests_mock.request_history) - before == 1
    # The client in use stays: other requests go on at 1.46.
    assert client.version == (1, 46)


def test_a_node_no_conductor_serves_is_told_from_an_unread_field() -> None:
    def read(**fields: Any) -> nodeinfo.NodeInfo:
        return nodeinfo.NodeInfo.from_api(types.SimpleNamespace(
            uuid='n1', **fields))

    assert read(conductor=None).unserved        # asked for, and null
    assert not read(conductor='conductor-1').unserved
    assert not read().unserved                  # not asked (API < 1.49)
