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
"""nova's ``[ironic]`` options: each one's effect here, the table, the
start-up warnings, the console and tear-down waits."""

from __future__ import annotations

from collections.abc import Iterable
import logging
import pathlib
import re
from typing import Any

from nova import conf as nova_conf
from nova.conf import ironic as nova_ironic_conf
from nova.conf import utils as conf_utils
from oslo_config import cfg
import pytest

from nova_ironic_multi import compat
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi.tests import source


def nova_defines() -> set[str]:
    """Every option the running nova defines in ``[ironic]``, by name."""
    listed = {opt.dest for opts in nova_ironic_conf.list_opts().values()
              for opt in opts}
    # What nova registers (list_opts() leaves some adapter options out).
    registered = set(nova_conf.CONF['ironic'].keys())
    return listed | registered


def doc_table() -> set[str]:
    text = (source.source_dir() / 'doc/source/configuration.rst').read_text()
    start = text.index("nova's ``[ironic]`` options\n")
    end = text.index('.. _retries:', start)
    return set(re.findall(r'^   \* - ``([a-z_]+)``$', text[start:end], re.M))


def test_the_docs_table_lists_every_ironic_option_nova_defines() -> None:
    missing = nova_defines() - doc_table()
    assert not missing, (
        'nova defines [ironic] options the table in '
        'doc/source/configuration.rst lacks: %s' % sorted(missing))
    assert len(nova_defines()) >= 40  # not an empty comparison


def test_every_ironic_option_is_accounted_for_in_the_code() -> None:
    # The start-up warnings come from nova_options.OPTIONS: an option
    # nova adds must be classified there too.
    assert nova_defines() - nova_options.covered() == set()
    # (Less the options only a newer release defines.)
    assert (nova_options.covered() - nova_defines() <=
            set(compat.LATER_IRONIC_OPTIONS))


def make_conf(tmp_path: pathlib.Path, ironic: dict[str, Any] | None = None,
              ours: dict[str, Any] | None = None,
              without: Iterable[str] = ()) -> cfg.ConfigOpts:
    """A configuration read from a file, as nova-compute reads it.

    :param without: nova's options to leave unregistered, as an older nova
        would.
    """
    conf = cfg.ConfigOpts()
    conf.register_opts([o for o in nova_ironic_conf.ironic_options
                        if o.name not in without], group='ironic')
    conf_utils.register_ksa_opts(conf, 'ironic', 'baremetal')
    nim_conf.register_opts(conf)
    lines = ['[ironic]']
    lines += ['%s = %s' % kv for kv in (ironic or {}).items()]
    lines += ['[ironic_multi]']
    lines += ['%s = %s' % kv for kv in (ours or {}).items()]
    path = tmp_path / 'nova.conf'
    path.write_text('\n'.join(lines) + '\n')
    conf(['--config-file', str(path)], project='nova')
    return conf


def warned(conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture,
           host: str = 'host1') -> dict[str, str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING,
                         logger='nova_ironic_multi.conf.nova_options'):
        nova_options.warn_differences(conf, host)
    found = {}
    for record in caplog.records:
        if record.name != 'nova_ironic_multi.conf.nova_options':
            continue  # oslo.config's deprecation notes
        m = re.match(r'\[ironic\] (\w+) = ', record.getMessage())
        assert m, record.getMessage()
        assert m.group(1) not in found, 'one WARNING per option'
        found[m.group(1)] = record.getMessage()
    return found


def test_nothing_set_nothing_warned(tmp_path: pathlib.Path,
                                    caplog: pytest.LogCaptureFixture) -> None:
    assert warned(make_conf(tmp_path), caplog) == {}


@pytest.mark.parametrize('option,value,says', [
    ('api_max_retries', 10, 'locked node'),
    ('api_retry_interval', 5, 'poll_interval'),
    ('connect_retries', 3, 'periodic tasks'),
    ('connect_retry_delay', 1, 'connect_retries allows'),
    ('status_code_retries', 3, 'reads only'),
    ('status_code_retry_delay', 1, 'status_code_retries allows'),
    ('retriable_status_codes', '502,503', 'only on 503'),
])
def test_each_option_whose_effect_differs_is_warned_once(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
        option: str, value: Any, says: str) -> None:
    found = warned(make_conf(tmp_path, {option: value}), caplog)
    assert list(found) == [option]
    assert says in found[option]
    assert str(value) in found[option]


@pytest.mark.parametrize('option,value', [
    ('serial_console_state_timeout', 0),
    ('vnc_console_state_timeout', 30),
    ('conductor_group', 'rack-a'),
    ('timeout', 30),
    ('insecure', 'true'),
    ('region_name', 'RegionTwo'),
    ('endpoint_override', 'http://ironic:6385'),
    ('shard', 's1'),
])
def test_options_with_the_in_tree_effect_are_not_warned(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
        option: str, value: Any) -> None:
    assert warned(make_conf(tmp_path, {option: value}), caplog) == {}


def test_a_peer_list_as_the_in_tree_driver_reads_it_is_not_warned(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = make_conf(tmp_path, {'conductor_group': 'g',
                                'peer_list': 'host1,host2'})
    assert warned(conf, caplog) == {}


@pytest.mark.parametrize('ironic,host,says', [
    ({'peer_list': 'host1,host2'}, 'host1', 'without [ironic] '
     'conductor_group'),
    ({'peer_list': 'host1,host2', 'shard': 's1'}, 'host1',
     'divides that shard'),
    ({'peer_list': 'host2,host3', 'conductor_group': 'g'}, 'host1',
     'does not list this host (host1)'),
])
def test_a_peer_list_the_in_tree_driver_ignores_or_refuses_is_warned(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
        ironic: dict[str, Any], host: str, says: str) -> None:
    found = warned(make_conf(tmp_path, ironic), caplog, host)
    assert says in found['peer_list']


def test_a_shard_with_a_peer_list_is_warned(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = make_conf(tmp_path, {'shard': 's1', 'peer_list': 'host1,host2'})
    found = warned(conf, caplog)
    assert set(found) == {'shard', 'peer_list'}
    assert 'divided between the listed hosts' in found['shard']


# Consoles -----------------------------------------------------------------

def test_console_timeouts_are_novas_by_default(
        tmp_path: pathlib.Path) -> None:
    conf = make_conf(tmp_path)
    # nova's defaults: 10 s for serial, 60 s for VNC.
    assert nova_options.console_timeout(conf, 'serial') == 10
    assert nova_options.console_timeout(conf, 'vnc') == 60


def test_a_console_timeout_of_0_is_no_bound(tmp_path: pathlib.Path) -> None:
    conf = make_conf(tmp_path, {'serial_console_state_timeout': 0,
                                'vnc_console_state_timeout': 0})
    assert nova_options.console_timeout(conf, 'serial') is None
    # (A nova without the VNC option, 32, ignores it in the file.)
    assert nova_options.console_timeout(conf, 'vnc') == (
        None if 'vnc_console_state_timeout' in nova_defines() else 60)


def test_the_deprecated_console_timeout_applies_where_nova_is_unset(
        tmp_path: pathlib.Path) -> None:
    conf = make_conf(tmp_path, {'serial_console_state_timeout': 0},
                     {'console_timeout': 90})
    assert nova_options.console_timeout(conf, 'vnc') == 90
    # The [ironic] option set in the file wins.
    assert nova_options.console_timeout(conf, 'serial') is None


def test_a_nova_without_the_vnc_option_bounds_vnc_as_later_ones_do(
        tmp_path: pathlib.Path) -> None:
    # nova 32 has no [ironic] vnc_console_state_timeout.
    conf = make_conf(tmp_path, without=['vnc_console_state_timeout'])
    assert nova_options.console_timeout(conf, 'vnc') == 60
    conf = make_conf(tmp_path, ours={'console_timeout': 90},
                     without=['vnc_console_state_timeout'])
    assert nova_options.console_timeout(conf, 'vnc') == 90


# Tear-down ----------------------------------------------------------------

def test_the_teardown_wait_is_never_shorter_than_in_tree(
        tmp_path: pathlib.Path) -> None:
    # nova's defaults: (60 + 1) x 2 s = 122 s, shorter than ours.
    assert nova_options.unprovision_timeout(make_conf(tmp_path)) == 600
    # Tuned to out-wait cleaning with the in-tree driver: 2 hours there.
    conf = make_conf(tmp_path, {'api_max_retries': 719,
                                'api_retry_interval': 10})
    assert nova_options.unprovision_timeout(conf) == 7200


def test_an_unprovision_timeout_of_0_is_no_bound(
        tmp_path: pathlib.Path) -> None:
    conf = make_conf(tmp_path, {'api_max_retries': 719},
                     {'unprovision_timeout': 0})
    assert nova_options.unprovision_timeout(conf) is None
