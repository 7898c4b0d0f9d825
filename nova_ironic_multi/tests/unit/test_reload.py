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

from nova.conf import ironic as nova_ironic_conf
from oslo_config import cfg
import pytest

from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi import reload


class Listener:
    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self.seen: list[Any] = []
        self.event = threading.Event()

    def reloaded(self) -> None:
        self.seen.append(self.conf.ironic_multi.partition_key)
        self.event.set()


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
        for _ in range(20):     # a burst of signals is one reload or few
            os.kill(os.getpid(), signal.SIGHUP)
        assert listener.event.wait(10)
        time.sleep(0.2)
        assert conf.ironic_multi.partition_key == 'rack-z'
        assert 1 <= len(listener.seen) < 20
    finally:
        signal.signal(signal.SIGHUP, previous)


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
