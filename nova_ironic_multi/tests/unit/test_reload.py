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
"""The reload path: the mutate hook and the SIGHUP handler."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time
from typing import Any
from unittest import mock

from nova.conf import ironic as nova_ironic_conf
from oslo_config import cfg
import pytest

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.conf import reading
from nova_ironic_multi.service import reload


class Listener:
    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self.seen: list[Any] = []
        self.event = threading.Event()

        #: With :meth:`hold`: each reload waits for ``gate`` once in.
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)
        self.held = False

    def hold(self) -> None:
        self.held = True

    def reloaded(self) -> None:
        self.seen.append(self.conf.ironic_multi.partition_key)
        self.event.set()
        if self.held:
            self.entered.release()
            assert self.gate.acquire(timeout=10)


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> reload._State:
    fresh = reload._State()
    monkeypatch.setattr(reload, '_STATE', fresh)
    return fresh


@pytest.fixture
def conf_file(tmp_path: pathlib.Path) -> tuple[cfg.ConfigOpts, pathlib.Path]:
    path = tmp_path / 'nova.conf'
    path.write_text('[ironic_multi]\npartition_key = rack-a\n'
                    'peer_list = host1\n')
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    conf(args=[], default_config_files=[str(path)])
    return conf, path


def test_valid_change_reaches_every_listener(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    conf, path = conf_file
    one, two = Listener(conf), Listener(conf)
    reload.watch(conf, one)
    reload.watch(conf, two)
    reload.watch(conf, one)
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1\n')
    conf.mutate_config_files()
    assert one.seen == two.seen == ['rack-b']
    # One hook per ConfigOpts, however many drivers watch it.
    assert reload.on_mutate in conf._mutate_hooks
    assert state.hooked == {id(conf)}


def test_unreadable_value_is_pinned_to_the_last_good_one(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    conf, path = conf_file
    listener = Listener(conf)
    reload.watch(conf, listener)
    path.write_text('[ironic_multi]\npartition_key = no spaces allowed\n'
                    'peer_list = host1\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-a'
    assert listener.seen == ['rack-a']
    assert ('rejected the new value of [ironic_multi] partition_key'
            in caplog.text)
    # Every option stays readable (oslo.service logs them all after a
    # reload; an unreadable one would end the process).
    conf.log_opt_values(reload.LOG, 10)
    path.write_text('[ironic_multi]\npartition_key = rack-c\n'
                    'peer_list = host1\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-c'
    assert listener.seen == ['rack-a', 'rack-c']


def test_a_reload_with_one_bad_value_applies_nothing(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    # A new peer list applied with the old group (its new value unreadable)
    # would divide rack-a among hosts that serve another group.
    conf, path = conf_file
    reload.watch(conf, Listener(conf))
    path.write_text('[ironic_multi]\npartition_key = g 1\n'
                    'peer_list = host1,host2,host3\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-a'
    assert conf.ironic_multi.peer_list == ['host1']
    assert ('rejected the new value of [ironic_multi] partition_key'
            in caplog.text)
    assert ('Reload not applied: [ironic_multi] partition_key invalid, so '
            '[ironic_multi] peer_list stay as they were' in caplog.text)
    # Fixed: the whole new set applies, no pin left behind.
    path.write_text('[ironic_multi]\npartition_key = g1\n'
                    'peer_list = host1,host2,host3\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'g1'
    assert conf.ironic_multi.peer_list == ['host1', 'host2', 'host3']
    assert state.pinned == set()


def test_listeners_are_not_kept_alive(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    conf, _ = conf_file
    reload.watch(conf, Listener(conf))
    assert len(state.listeners) == 0


def test_sighup_rereads_the_files_without_stopping(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    conf, path = conf_file
    listener = Listener(conf)
    reload.watch(conf, listener)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        assert reload.install_sighup(conf)
        assert not reload.install_sighup(conf)   # once per process
        path.write_text('[ironic_multi]\npartition_key = rack-z\n'
                        'peer_list = host1\n')
        listener.hold()
        os.kill(os.getpid(), signal.SIGHUP)
        assert listener.entered.acquire(timeout=10)     # in the reload
        path.write_text('[ironic_multi]\npartition_key = rack-y\n'
                        'peer_list = host1\n')
        # A burst of signals while that reload runs, each one queued.
        assert state.signals is not None
        burst = 5
        for queued in range(1, burst + 1):
            os.kill(os.getpid(), signal.SIGHUP)
            deadline = time.monotonic() + 10
            while (state.signals.qsize() != queued and
                   time.monotonic() < deadline):
                time.sleep(0.01)    # a bounded poll: the handler's put
            assert state.signals.qsize() == queued
        listener.gate.release()
        assert listener.entered.acquire(timeout=10)     # the next reload
        # It took the whole burst: nothing is left for another reload.
        assert state.signals.qsize() == 0
        assert listener.seen == ['rack-z', 'rack-y']
        listener.gate.release()
        assert conf.ironic_multi.partition_key == 'rack-y'
    finally:
        signal.signal(signal.SIGHUP, previous)
        listener.gate.release()


def test_sighup_reloads_while_the_main_thread_sleeps(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    # nova-compute's main thread sleeps in service.wait(), and the kernel
    # may deliver SIGHUP to any other thread: the reload must not wait for
    # the main thread to wake (an e2e compute once handled its SIGHUP only
    # at its SIGTERM, a minute later).
    conf, path = conf_file
    listener = Listener(conf)
    reload.watch(conf, listener)
    previous = signal.getsignal(signal.SIGHUP)
    old_fd = signal.set_wakeup_fd(-1)
    try:
        assert reload.install_sighup(conf)
        path.write_text('[ironic_multi]\npartition_key = rack-z\n'
                        'peer_list = host1\n')
        # Blocked in this (the main) thread only, so the kernel hands the
        # signal to another one while this one sleeps in a C call.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            assert listener.event.wait(timeout=10)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        assert listener.seen == ['rack-z']
    finally:
        signal.signal(signal.SIGHUP, previous)
        signal.set_wakeup_fd(old_fd)


def test_sighup_handler_only_from_the_main_thread(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    conf, _ = conf_file
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(
        reload.install_sighup(conf)))
    t.start()
    t.join()
    assert result == [False]


def test_divide_is_reloaded_with_the_other_options(
        state: reload._State,
        conf_file: tuple[cfg.ConfigOpts, pathlib.Path]) -> None:
    conf, path = conf_file
    reload.watch(conf, Listener(conf))
    path.write_text('[ironic_multi]\npartition_key = rack-a\n'
                    'peer_list = host1\ndivide = shards\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.divide == 'shards'


def test_a_bad_divide_holds_back_the_whole_reload(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    conf, path = conf_file
    reload.watch(conf, Listener(conf))
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1,host2\ndivide = racks\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.divide == 'nodes'
    assert conf.ironic_multi.partition_key == 'rack-a'
    assert conf.ironic_multi.peer_list == ['host1']
    assert 'rejected the new value of [ironic_multi] divide' in caplog.text
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1,host2\ndivide = shards\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.divide == 'shards'
    assert conf.ironic_multi.partition_key == 'rack-b'


# Concurrent readers ------------------------------------------------------

_OLD = ('[ironic_multi]\npartition_key = rack-a\npeer_list = host1\n'
        'divide = nodes\n')
_NEW = ('[ironic_multi]\npartition_key = rack-b\n'
        'peer_list = host1,host2\ndivide = shards\n')
_NEW_VALUES = {('ironic_multi', 'partition_key'): 'rack-b',
               ('ironic_multi', 'peer_list'): ['host1', 'host2'],
               ('ironic_multi', 'divide'): 'shards',
               ('ironic', 'conductor_group'): None}


def _inventory(conf: cfg.ConfigOpts) -> Any:
    from nova_ironic_multi.period import inventory
    inv = inventory.Inventory(conf, mock.Mock(), 'host1')
    reload.watch(conf, inv)
    assert inv.current_partition().scope.conductor_group == 'rack-a'
    return inv


def _assert_new_partition(conf: cfg.ConfigOpts, inv: Any) -> None:
    part = inv.current_partition()
    assert part.scope.conductor_group == 'rack-b'
    assert part.peers == frozenset({'host1', 'host2'})
    assert part.divide == 'shards'
    for (group, name), value in _NEW_VALUES.items():
        assert conf[group][name] == value, (group, name)
    # And it is the last good partition: with the options contradicting
    # each other, the inventory keeps the whole new one.
    conf.set_override('conductor_group', 'rack-c', 'ironic')
    try:
        kept = inv.current_partition()
    finally:
        conf.clear_override('conductor_group', 'ironic')
    assert kept == part


class _Hammer(threading.Thread):
    """Reads every partition option, round after round, until stopped."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(daemon=True)
        self.conf = conf
        self.stop = False
        self.paused = False
        self.idle = False
        self.rounds = 0
        self.cond = threading.Condition()

    def run(self) -> None:
        while True:
            with self.cond:
                self.idle = True
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.stop or not self.paused)
                if self.stop:
                    return
                self.idle = False
            for group, name in reading.MUTABLE:
                self.conf[group][name]
            with self.cond:
                self.rounds += 1
                self.cond.notify_all()

    def wait_rounds(self, n: int) -> None:
        with self.cond:
            start = self.rounds
            assert self.cond.wait_for(lambda: self.rounds >= start + n, 10)

    def pause(self) -> None:
        """Return once no read is under way (between two rounds)."""
        with self.cond:
            self.paused = True
            assert self.cond.wait_for(lambda: self.idle, 10)

    def resume(self) -> None:
        with self.cond:
            self.paused = False
            self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        self.join(10)


def test_values_read_while_the_files_are_reread_do_not_survive(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # oslo.config empties its value cache, then re-reads the files: a
    # thread reading meanwhile caches the old values. Here the re-read
    # waits until the reader has read every option twice over (from the
    # old files), so the race happens every time. (The reader then pauses
    # between two rounds while the new files are swapped in: a read under
    # way at that moment is the next test's case.)
    conf, path = conf_file
    path.write_text(_OLD)
    conf.reload_config_files()
    inv = _inventory(conf)
    hammer = _Hammer(conf)
    parse = conf._parse_config_files

    def slow_parse() -> Any:
        namespace = parse()
        hammer.wait_rounds(2)
        hammer.pause()
        return namespace

    monkeypatch.setattr(conf, '_parse_config_files', slow_parse)
    hammer.start()
    try:
        path.write_text(_NEW)
        conf.mutate_config_files()
        for (group, name), value in _NEW_VALUES.items():
            assert conf[group][name] == value, (group, name)
        hammer.resume()
        hammer.wait_rounds(2)
    finally:
        hammer.finish()
    assert state.last_good[('ironic_multi', 'partition_key')] == 'rack-b'
    assert state.last_good[('ironic_multi', 'peer_list')] == [
        'host1', 'host2']
    _assert_new_partition(conf, inv)


def test_a_read_under_way_at_the_swap_is_not_kept(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The remaining window: a reader took the old files' value before the
    # new files replaced them and caches it after the reload hook ran. The
    # reader is held inside oslo.config's conversion of the value until the
    # whole reload is over.
    conf, path = conf_file
    path.write_text(_OLD)
    conf.reload_config_files()
    inv = _inventory(conf)
    opt = conf._get_opt_info('partition_key', 'ironic_multi')['opt']
    convert = opt.type
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def held_convert(value: Any) -> Any:
        if threading.current_thread() is reader:
            entered.set()
            assert release.wait(10)
        return convert(value)

    monkeypatch.setattr(opt, 'type', held_convert)
    reader = threading.Thread(
        target=lambda: seen.append(conf.ironic_multi.partition_key),
        daemon=True)
    parse = conf._parse_config_files

    def parse_with_a_reader_inside() -> Any:
        namespace = parse()
        reader.start()       # the old files are still the ones in force
        assert entered.wait(10)
        return namespace

    monkeypatch.setattr(conf, '_parse_config_files',
                        parse_with_a_reader_inside)
    path.write_text(_NEW)
    conf.mutate_config_files()
    release.set()
    reader.join(10)
    assert seen == ['rack-a']      # it did read the old files, and cached
    # The inventory never used that value, and its next resolution (at the
    # latest the next period) dropped it for every other reader too.
    _assert_new_partition(conf, inv)


def test_a_resolution_under_way_at_the_swap_is_done_again(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The new files are swapped in after the partition key was read from
    # the old ones and before the peer list is: the key of the old files
    # with the peers of the new ones would divide rack-a among hosts that
    # do not serve it.
    conf, path = conf_file
    path.write_text(_OLD)
    conf.reload_config_files()
    opt = conf._get_opt_info('partition_key', 'ironic_multi')['opt']
    convert = opt.type
    reloads: list[Any] = []

    def convert_then_reload(value: Any) -> Any:
        converted = convert(value)
        if not reloads:
            path.write_text(_NEW)
            reloads.append(conf.mutate_config_files())
        return converted

    monkeypatch.setattr(opt, 'type', convert_then_reload)
    part = partition_opts.resolve(conf, 'host1')
    assert len(reloads) == 1
    assert part.scope.conductor_group == 'rack-b'
    assert part.peers == frozenset({'host1', 'host2'})
    assert part.divide == 'shards'


def test_files_that_never_settle_are_not_resolved(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    conf, path = conf_file
    opt = conf._get_opt_info('partition_key', 'ironic_multi')['opt']
    convert = opt.type

    def convert_then_reload(value: Any) -> Any:
        conf.mutate_config_files()
        return convert(value)

    monkeypatch.setattr(opt, 'type', convert_then_reload)
    with pytest.raises(reading.Unsettled, match='reloaded 5 times'):
        partition_opts.resolve(conf, 'host1')


def test_a_resolution_while_the_hook_pins_never_mixes(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A rejected reload is pinned back one option at a time: a resolution
    # between two pins must fail (and keep the last good partition) or
    # give the old one, never the old key with the new peers.
    from nova_ironic_multi.division import partition
    conf, path = conf_file
    reload.watch(conf, Listener(conf))
    old = partition_opts.resolve(conf, 'host1')
    seen: list[Any] = []
    pin = conf.set_override

    def pin_then_resolve(name: str, value: Any, group: str) -> None:
        pin(name, value, group)
        try:
            seen.append(partition_opts.resolve(conf, 'host1'))
        except (partition.InvalidPartition, cfg.Error, ValueError) as e:
            seen.append(type(e))

    monkeypatch.setattr(conf, 'set_override', pin_then_resolve)
    path.write_text('[ironic_multi]\npartition_key = g 1\n'
                    'peer_list = host1,host2\ndivide = shards\n')
    conf.mutate_config_files()
    assert len(seen) == 3
    assert all(s == old or not isinstance(s, partition.Partition)
               for s in seen), seen
    assert seen[-1] == old


# The membership back end, applied at start only, checked on reload -------

_TOOZ = ('[ironic_multi]\npartition_key = %s\npeer_list = host1\n'
         'membership_driver = tooz\ntooz_backend_url = %s\n')


def test_a_tooz_backend_that_cannot_work_refuses_the_whole_reload(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    conf, path = conf_file
    path.write_text(_TOOZ % ('rack-a', 'redis://127.0.0.1:6379'))
    conf.reload_config_files()
    reload.watch(conf, Listener(conf))
    for bad, said in (('gossip://127.0.0.1', "'gossip' is not the scheme"),
                      ('postgresql://u:p@127.0.0.1/db', '')):
        caplog.clear()
        path.write_text(_TOOZ % ('rack-b', bad))
        conf.mutate_config_files()
        # Nothing of it applies, the partition change included.
        assert conf.ironic_multi.partition_key == 'rack-a'
        assert conf.ironic_multi.tooz_backend_url == 'redis://127.0.0.1:6379'
        assert ('rejected the new value of [ironic_multi] tooz_backend_url'
                in caplog.text)
        assert said in caplog.text
        assert 'Reload not applied' in caplog.text
        # The URL may carry a password: never logged.
        assert 'u:p@' not in caplog.text
    caplog.clear()
    path.write_text(_TOOZ % ('rack-b', 'redis://127.0.0.1:6379'))
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-b'
    assert 'rejected' not in caplog.text


def test_a_reload_that_drops_the_tooz_url_is_refused(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    conf, path = conf_file
    path.write_text(_TOOZ % ('rack-a', 'redis://127.0.0.1:6379'))
    conf.reload_config_files()
    reload.watch(conf, Listener(conf))
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1\nmembership_driver = tooz\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-a'
    assert 'needs [ironic_multi] tooz_backend_url' in caplog.text


def test_an_unknown_membership_driver_refuses_the_whole_reload(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture) -> None:
    # Found by the soak: the name was taken (oslo.config only says it
    # ignores the change of an immutable option), and the next start
    # failed on it.
    conf, path = conf_file
    reload.watch(conf, Listener(conf))
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1\nmembership_driver = no-such-driver\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-a'
    assert ('rejected the new value of [ironic_multi] membership_driver, '
            'which is applied at start only and could not work there: '
            "'no-such-driver' is not a known plugin" in caplog.text)
    assert 'servicegroup' in caplog.text      # what would work
    assert 'Reload not applied' in caplog.text
    caplog.clear()
    path.write_text('[ironic_multi]\npartition_key = rack-b\n'
                    'peer_list = host1\nmembership_driver = static\n')
    conf.mutate_config_files()
    assert conf.ironic_multi.partition_key == 'rack-b'
    assert 'rejected' not in caplog.text


# The other mutable options -----------------------------------------------

@pytest.mark.parametrize('name, good, bad', [
    ('takeover', 'fenced', 'sometimes'),
    ('drain_on_stop', 'true', 'maybe'),
])
def test_a_bad_value_of_any_mutable_option_refuses_the_whole_reload(
        state: reload._State, conf_file: tuple[cfg.ConfigOpts, pathlib.Path],
        caplog: pytest.LogCaptureFixture, name: str, good: str,
        bad: str) -> None:
    # Found by the soak: oslo.config took ``takeover = sometimes`` (it
    # checks choices only when the value is read), logged it as changed,
    # and every later read failed: the period's takeover in threading
    # mode, oslo.service's own listing of the options after the reload in
    # eventlet mode. Nothing said the reload was refused.
    conf, path = conf_file
    base = '[ironic_multi]\npartition_key = %s\npeer_list = host1\n%s = %s\n'
    path.write_text(base % ('rack-a', name, good))
    conf.reload_config_files()
    reload.watch(conf, Listener(conf))
    expected = conf.ironic_multi[name]
    path.write_text(base % ('rack-b', name, bad))
    conf.mutate_config_files()
    assert ('Reload: rejected the new value of [ironic_multi] %s' % name
            in caplog.text)
    assert ('Reload not applied: [ironic_multi] %s invalid' % name
            in caplog.text)
    # The value in force stays readable, and the reload applied nothing.
    assert conf.ironic_multi[name] == expected
    assert conf.ironic_multi.partition_key == 'rack-a'
    conf.log_opt_values(reload.LOG, 10)
    caplog.clear()
    path.write_text(base % ('rack-b', name, good))
    conf.mutate_config_files()
    assert conf.ironic_multi[name] == expected
    assert conf.ironic_multi.partition_key == 'rack-b'
    assert 'rejected' not in caplog.text
    assert state.pinned == set()


def test_every_mutable_option_of_the_driver_is_checked_on_reload() -> None:
    conf = cfg.ConfigOpts()
    nim_conf.register_opts(conf)
    mutable = {(group.name if group else 'DEFAULT', info['opt'].name)
               for info, group in conf._all_opt_infos()
               if info['opt'].mutable}
    assert mutable
    assert mutable <= set(reading.MUTABLE)


# nova's options of the partition that oslo.config applies at start only --

@pytest.mark.parametrize('option, start, new', [
    ('peer_list', 'host1', 'host1,host2'),
    ('shard', 'shard-a', 'shard-b'),
])
def test_a_change_to_novas_start_only_options_refuses_the_whole_reload(
        state: reload._State, tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture, option: str, start: str,
        new: str) -> None:
    # nova 34 registers [ironic] peer_list and shard as immutable: oslo
    # logs "Ignoring change to immutable option" and keeps the start value,
    # so a reload that also changed the mutable conductor group applied
    # the new group with the old list (or shard): a mix no file described.
    path = tmp_path / 'nova.conf'
    base = '[ironic]\nconductor_group = %s\n%s = %s\n'
    path.write_text(base % ('g1', option, start))
    conf = cfg.ConfigOpts()
    conf.register_opts(nova_ironic_conf.ironic_options, group='ironic')
    nim_conf.register_opts(conf)
    conf(args=[], default_config_files=[str(path)])
    listener = Listener(conf)
    reload.watch(conf, listener)
    expected = conf.ironic[option]
    path.write_text(base % ('g2', option, new))
    conf.mutate_config_files()
    assert conf.ironic.conductor_group == 'g1'
    assert reading.read(conf, 'ironic', 'conductor_group') == 'g1'
    assert conf.ironic[option] == expected
    assert ('Reload: [ironic] %s changed in the configuration files, but '
            'nova applies it at start only: restart nova-compute to change '
            'it' % option in caplog.text)
    assert ('Reload not applied: [ironic] %s changed (applied at start '
            'only), so [ironic] conductor_group stay as they were' % option
            in caplog.text)
    # Put back as it started: the rest of the new files applies.
    caplog.clear()
    path.write_text(base % ('g2', option, start))
    conf.mutate_config_files()
    assert conf.ironic.conductor_group == 'g2'
    assert 'Reload not applied' not in caplog.text
    assert state.pinned == set()
