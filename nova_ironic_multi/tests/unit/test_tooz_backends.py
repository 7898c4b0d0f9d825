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
"""A tooz back end that cannot work stops the start (issue 22.2)."""

from __future__ import annotations

from collections.abc import Iterator
import importlib.util
import os
import pathlib
import sys
import textwrap

from nova import exception
from nova.virt import virtapi
import pytest

from nova_ironic_multi import driver
from nova_ironic_multi.membership import tooz_backends
from nova_ironic_multi.tests.unit import base

REDIS_URL = os.environ.get('NIM_REDIS_URL', 'redis://127.0.0.1:6379')


def fake_driver(tmp_path: pathlib.Path, scheme: str,
                source: str) -> Iterator[str]:
    """A tooz driver installed under ``scheme`` for the test: its URL."""
    module = 'nim_%s_tooz' % scheme
    (tmp_path / ('%s.py' % module)).write_text(textwrap.dedent(source))
    dist = tmp_path / ('%s-1.0.dist-info' % module)
    dist.mkdir()
    (dist / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n'
        % module.replace('_', '-'))
    (dist / 'entry_points.txt').write_text(
        '[tooz.backends]\n%s = %s:Driver\n' % (scheme, module))
    sys.path.insert(0, str(tmp_path))
    yield '%s://127.0.0.1' % scheme
    sys.path.remove(str(tmp_path))
    sys.modules.pop(module, None)


@pytest.fixture
def broken_driver(tmp_path: pathlib.Path) -> Iterator[str]:
    """A tooz driver, scheme ``nimbroken``, whose client is not installed."""
    yield from fake_driver(tmp_path, 'nimbroken', '''
        import nim_no_such_client  # noqa
    ''')


def unusable(url: str | None) -> str:
    with pytest.raises(tooz_backends.Unusable) as info:
        tooz_backends.check(url)
    return str(info.value)


def test_a_missing_url_names_the_option_and_the_fix() -> None:
    text = unusable(None)
    assert '[ironic_multi] tooz_backend_url' in text
    assert 'redis://' in text


def test_an_unknown_scheme_lists_the_installed_ones() -> None:
    text = unusable('gossip://127.0.0.1')
    assert "'gossip' is not the scheme of an installed tooz driver" in text
    assert 'redis' in text
    assert '[ironic_multi] tooz_backend_url' in text


def test_a_missing_client_library_names_the_package(
        broken_driver: str) -> None:
    text = unusable(broken_driver)
    assert 'cannot load its client library' in text
    assert 'nim_no_such_client' in text


def test_etcd3_without_etcd3gw_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The help's own example: tooz's etcd3 driver needs etcd3gw. (The
    # test requirements install it: hide it.)
    monkeypatch.setitem(sys.modules, 'etcd3gw', None)
    monkeypatch.delitem(sys.modules, 'tooz.drivers.etcd3gw', raising=False)
    text = unusable('etcd3+http://127.0.0.1:2379')
    assert "install etcd3gw on this host (pip install 'tooz[etcd3gw]')" in (
        text)


def test_etcd3_with_etcd3gw_qualifies() -> None:
    assert importlib.util.find_spec('etcd3gw') is not None
    tooz_backends.check('etcd3+http://127.0.0.1:2379')


@pytest.fixture
def forever_driver(tmp_path: pathlib.Path) -> Iterator[str]:
    """A tooz driver, scheme ``nimforever``, with groups.

    Its members never expire: it has no timeout this product can set.
    """
    yield from fake_driver(tmp_path, 'nimforever', '''
        from tooz import coordination

        class Driver(coordination.CoordinationDriver):
            def join_group(self, *a, **k): pass
            def leave_group(self, *a, **k): pass
            def get_members(self, *a, **k): pass
            def get_member_capabilities(self, *a, **k): pass
            def get_members_with_capabilities(self, *a, **k): pass
    ''')


def test_a_driver_whose_members_never_expire_is_refused(
        forever_driver: str) -> None:
    text = unusable(forever_driver)
    assert ('the members of a tooz nimforever:// group do not expire' in
            text), text
    assert 'a host that dies would keep its free nodes for good' in text
    assert '[ironic_multi] tooz_backend_url' in text


def test_a_driver_without_groups_is_refused() -> None:
    # tooz's PostgreSQL and MySQL drivers have locks but no groups.
    for url in ('postgresql://u:p@127.0.0.1/db', 'mysql://u:p@127.0.0.1/db'):
        try:
            tooz_backends.check(url)
        except tooz_backends.Unusable as e:
            assert ('has no groups' in str(e) or
                    'cannot load its client library' in str(e)), e
        else:
            raise AssertionError('%s was accepted' % url.split(':')[0])


def test_redis_qualifies() -> None:
    tooz_backends.check(REDIS_URL)


def test_the_member_timeout_goes_where_each_driver_reads_it() -> None:
    assert ('redis://h:1?membership_timeout=7' ==
            tooz_backends.with_member_timeout('redis://h:1', 7))
    assert ('redis://h:1?membership_timeout=3' ==
            tooz_backends.with_member_timeout(
                'redis://h:1?membership_timeout=3', 7))
    # ZooKeeper's members are ephemeral nodes of a session.
    assert ('zookeeper://h:2181?timeout=7' ==
            tooz_backends.with_member_timeout('zookeeper://h:2181', 7))


class StartTest(base.DriverTestCase):
    """nova-compute stops at start, naming the option and the fix."""

    def refused(self, url: str | None) -> str:
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url=url)
        drv = driver.IronicDriver(virtapi.VirtAPI())
        with self.assertLogs('nova_ironic_multi.service.startup', 'ERROR'):
            exc = self.assertRaises(exception.InvalidConfiguration,
                                    drv.init_host, 'host1')
        return str(exc)

    def test_no_url(self) -> None:
        self.assertIn('needs [ironic_multi] tooz_backend_url',
                      self.refused(None))

    def test_unknown_scheme(self) -> None:
        self.assertIn('[ironic_multi] tooz_backend_url: \'gossip\'',
                      self.refused('gossip://127.0.0.1'))

    def test_no_groups(self) -> None:
        text = self.refused('postgresql://u:p@127.0.0.1/db')
        self.assertIn('[ironic_multi] tooz_backend_url', text)

    def test_a_good_url_starts_without_reaching_the_back_end(self) -> None:
        # Nothing listens there: an outage may end, so the start goes on.
        self.flags(group='ironic_multi', membership_driver='tooz',
                   tooz_backend_url='redis://127.0.0.1:1')
        drv = driver.IronicDriver(virtapi.VirtAPI())
        drv.init_host('host1')
        drv.cleanup_host('host1')
