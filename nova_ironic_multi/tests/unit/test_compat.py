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
"""Both sides of each difference between releases, whichever one runs.

Each tox environment runs one release, so it meets only one side of each
difference in :mod:`compat`; these tests run the other side too.
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any
from unittest import mock

from oslo_config import cfg
import pytest
import tooz
from tooz import coordination

from nova_ironic_multi import compat
from nova_ironic_multi.tests.fixtures import fake_tooz

GROUP = b'nim-compat'


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def group_of_three() -> tuple[fake_tooz.Backend, Clock, Any]:
    """a and b live, c joined and then stopped heartbeating."""
    clock = Clock()
    backend = fake_tooz.Backend(clock, membership_timeout=10)
    a, b, c = (backend.coordinator(m) for m in (b'a', b'b', b'c'))
    a.create_group(GROUP).get()
    for member, caps in ((a, {'listing': True}), (b, {'listing': False}),
                         (c, {'listing': True})):
        member.heartbeat()
        member.join_group(GROUP, caps).get()
    clock.now = 5
    a.heartbeat()
    b.heartbeat()
    clock.now = 12
    return backend, clock, a


@pytest.fixture(params=[True, False], ids=['tooz-9', 'tooz-7-8'])
def tooz_read(request: pytest.FixtureRequest,
              monkeypatch: pytest.MonkeyPatch) -> bool:
    one_call: bool = request.param
    monkeypatch.setattr(compat, 'reads_members_with_capabilities',
                        lambda: one_call)
    return one_call


def test_a_group_reads_the_same_with_either_tooz(tooz_read: bool) -> None:
    _backend, _clock, a = group_of_three()
    assert compat.members_with_capabilities(a, GROUP) == {
        b'a': {'listing': True}, b'b': {'listing': False}}


def test_a_missing_group_is_not_created_with_either_tooz(
        tooz_read: bool) -> None:
    backend = fake_tooz.Backend()
    with pytest.raises(coordination.GroupNotCreated):
        compat.members_with_capabilities(backend.coordinator(b'a'), GROUP)


def test_an_unreachable_back_end_fails_with_either_tooz(
        tooz_read: bool) -> None:
    backend, _clock, a = group_of_three()
    backend.down = True
    with pytest.raises(tooz.ToozError):
        compat.members_with_capabilities(a, GROUP)


def test_a_member_leaving_between_the_two_reads_is_not_a_member(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Only tooz 7 and 8 read a group in two steps.
    monkeypatch.setattr(compat, 'reads_members_with_capabilities',
                        lambda: False)
    _backend, _clock, a = group_of_three()
    b = _backend.coordinator(b'b')
    members = a.get_members

    def then_b_leaves(group: bytes) -> Any:
        found = members(group)
        b.leave_group(group).get()
        return found
    a.get_members = then_b_leaves
    assert compat.members_with_capabilities(a, GROUP) == {
        b'a': {'listing': True}}


def test_the_group_read_api_is_the_installed_toozs() -> None:
    base = coordination.CoordinationDriver
    assert compat.group_read_api()
    for name in compat.group_read_api():
        assert callable(getattr(base, name)), name


def test_an_option_is_read_by_group_name_on_the_installed_oslo_config(
) -> None:
    conf = cfg.ConfigOpts()
    conf.register_opt(cfg.StrOpt('x', default='y'), group='g')
    conf([])
    value, _loc = conf._do_get('x', compat.option_group(conf, 'g'))
    assert value == 'y'
    assert compat.option_group(conf, None) is None



def test_a_nova_outside_the_tested_releases_is_warned_at_start(
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(compat, 'nova_release', lambda: 31)
    with caplog.at_level(logging.WARNING, logger='nova_ironic_multi.compat'):
        compat.warn_if_untested_nova()
    assert [r.getMessage() for r in caplog.records] == [
        'nova-ironic-multi runs in nova 31, a release it is not tested in; '
        'tested: nova 32 (2025.2), nova 33 (2026.1), nova 34 (2026.2). See '
        '"Supported versions" in the install guide.']


def test_the_running_nova_is_a_tested_one_and_not_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger='nova_ironic_multi.compat'):
        compat.warn_if_untested_nova()
    assert compat.nova_release() in compat.TESTED_NOVA
    assert caplog.records == []


def test_a_tool_runs_on_threads_with_either_patch_signature(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nova import monkey_patch
    calls: list[Any] = []

    def patch_33_34(backend: str = 'eventlet') -> None:
        calls.append(backend)

    def patch_32() -> None:
        calls.append(os.environ.get('OS_NOVA_DISABLE_EVENTLET_PATCHING'))

    monkeypatch.setattr(monkey_patch, 'patch', patch_33_34)
    compat.patch_for_threads()
    monkeypatch.setattr(monkey_patch, 'patch', patch_32)
    monkeypatch.delenv('OS_NOVA_DISABLE_EVENTLET_PATCHING', raising=False)
    compat.patch_for_threads()
    # The variable still wins where the operator set it.
    monkeypatch.setenv('OS_NOVA_DISABLE_EVENTLET_PATCHING', '0')
    compat.patch_for_threads()
    assert calls == ['threading', '1', '0']


# nova-compute's graceful stop ----------------------------------------------

class _Nova32Manager:
    """nova 32: no graceful_shutdown; Service.stop calls cleanup_host."""


class _Nova33Manager:
    def graceful_shutdown(self) -> None:
        """Sleeps manager_shutdown_timeout, then cleanup_host."""


class _Nova34Manager:
    def graceful_shutdown(self, timeout: float) -> None:
        """Waits for tasks within timeout less its reserve, then cleanup."""


def _seconds(manager: type, **options: float) -> tuple[float, str]:
    conf = mock.Mock(**options)
    with mock.patch.object(compat, '_graceful_shutdown',
                           return_value=getattr(manager, 'graceful_shutdown',
                                                None)):
        return compat.cleanup_host_seconds(conf)


@pytest.mark.parametrize('manager, options, expected', [
    # nova 34: what it reserves out of manager_shutdown_timeout, up to 20 s.
    (_Nova34Manager, dict(manager_shutdown_timeout=160,
                          graceful_shutdown_timeout=180), 20),
    (_Nova34Manager, dict(manager_shutdown_timeout=8,
                          graceful_shutdown_timeout=180), 8),
    (_Nova34Manager, dict(manager_shutdown_timeout=0,
                          graceful_shutdown_timeout=180), 0),
    # ... of the service's bound less 10 s when the manager's is above it.
    (_Nova34Manager, dict(manager_shutdown_timeout=160,
                          graceful_shutdown_timeout=15), 5),
    # nova 33: what graceful_shutdown_timeout leaves after the whole sleep.
    (_Nova33Manager, dict(manager_shutdown_timeout=160,
                          graceful_shutdown_timeout=180), 20),
    (_Nova33Manager, dict(manager_shutdown_timeout=170,
                          graceful_shutdown_timeout=180), 10),
    (_Nova33Manager, dict(manager_shutdown_timeout=0,
                          graceful_shutdown_timeout=180), 20),
    (_Nova33Manager, dict(manager_shutdown_timeout=160,
                          graceful_shutdown_timeout=0), 20),
    (_Nova33Manager, dict(manager_shutdown_timeout=200,
                          graceful_shutdown_timeout=60), 10),
    # nova 32: no wait before cleanup_host; only the service's bound.
    (_Nova32Manager, dict(graceful_shutdown_timeout=60), 20),
    (_Nova32Manager, dict(graceful_shutdown_timeout=5), 5),
    (_Nova32Manager, dict(graceful_shutdown_timeout=0), 20),
])
def test_cleanup_host_seconds_follow_each_release(
        manager: type, options: dict[str, float], expected: float) -> None:
    seconds, named = _seconds(manager, **options)
    assert seconds == expected
    assert '[DEFAULT] graceful_shutdown_timeout' in named or (
        '[DEFAULT] manager_shutdown_timeout' in named)


def test_nova32_names_only_the_option_it_has() -> None:
    _, named = _seconds(_Nova32Manager, graceful_shutdown_timeout=0)
    assert named == '[DEFAULT] graceful_shutdown_timeout = 0'


def test_the_running_nova_is_read_not_assumed() -> None:
    # This nova's own manager: the answer comes from its signature.
    from nova.compute import manager
    conf = mock.Mock(manager_shutdown_timeout=0, graceful_shutdown_timeout=180)
    seconds, _ = compat.cleanup_host_seconds(conf)
    wait = getattr(manager.ComputeManager, 'graceful_shutdown', None)
    if wait is not None and 'timeout' in inspect.signature(wait).parameters:
        assert seconds == 0          # nova 34 reserves nothing out of 0
    else:
        assert seconds == 20         # nova 32, 33: nothing slept


def test_nova32_before_the_launcher_registers_the_stop_bound() -> None:
    # nova 32 registers no graceful_shutdown_timeout of its own: until
    # oslo.service's launcher does, its default applies.
    conf = cfg.ConfigOpts()
    conf([])
    with mock.patch.object(compat, '_graceful_shutdown', return_value=None):
        seconds, named = compat.cleanup_host_seconds(conf)
    assert seconds == 20
    assert named == '[DEFAULT] graceful_shutdown_timeout = 60'
