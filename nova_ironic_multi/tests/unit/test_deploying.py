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
"""Every ``nova.conf`` fragment of the deployment recipes parses.

``doc/source/deploying.rst`` holds the fragments operators paste: ini
blocks (kolla-ansible's override file) and YAML that the tools turn into
``nova.conf`` (openstack-ansible's ``nova_nova_conf_overrides`` and
``nova_compute_driver``, openstack-helm's ``conf.nova_ironic``). Each is
read as nova-compute reads its files, with nova's own option definitions,
oslo.service's and oslo.log's, and this driver's: every option must be
one of theirs and its value must convert.
"""

from __future__ import annotations

import configparser
import copy
import pathlib
import re
from typing import Any

from nova.conf import opts as nova_opts
from oslo_config import cfg
from oslo_log import _options as log_options
from oslo_service import _options as service_options
import pytest
import yaml

from nova_ironic_multi import compat
from nova_ironic_multi import conf as nim_conf
from nova_ironic_multi.tests import source

PAGE = 'doc/source/deploying.rst'
#: Options of the recipes (written for nova 34) that older nova releases
#: lack, with the release that added them: nova 32 ignores this one.
LATER = {('DEFAULT', 'manager_shutdown_timeout'): 33}
BLOCK = re.compile(r'^( *)\.\. code-block:: (ini|yaml)\n\n((?:\1   .*\n|\n)+)',
                   re.MULTILINE)


def blocks() -> list[tuple[str, str]]:
    text = (source.source_dir() / PAGE).read_text()
    found = []
    for indent, kind, body in BLOCK.findall(text):
        lines = [line[len(indent) + 3:] for line in body.splitlines()]
        found.append((kind, '\n'.join(lines).strip() + '\n'))
    return found


def _as_ini(sections: dict[str, dict[str, Any]]) -> str:
    out = []
    for section, options in sections.items():
        out.append('[%s]' % section)
        out += ['%s = %s' % (k, v) for k, v in options.items()]
    return '\n'.join(out) + '\n'


def fragments() -> list[tuple[str, str]]:
    """(where, nova.conf text) for every fragment of the page."""
    found = []
    for i, (kind, text) in enumerate(blocks()):
        where = '%s block %d (%s)' % (PAGE, i + 1, kind)
        if kind == 'ini':
            found.append((where, text))
            continue
        data = yaml.safe_load(text)
        sections: dict[str, dict[str, Any]] = {}
        if 'nova_nova_conf_overrides' in data:      # openstack-ansible
            sections.update(data['nova_nova_conf_overrides'])
            if 'nova_compute_driver' in data:
                sections.setdefault('DEFAULT', {})['compute_driver'] = (
                    data['nova_compute_driver'])
        if 'nova_ironic' in data.get('conf', {}):    # openstack-helm
            sections.update(data['conf']['nova_ironic'])
        if sections:
            found.append((where, _as_ini(sections)))
    return found


def nova_conf(path: pathlib.Path) -> cfg.ConfigOpts:
    """nova-compute's options (nova's, oslo's, this driver's) from ``path``."""
    conf = cfg.ConfigOpts()
    for group, options in nova_opts.list_opts():
        for option in options:
            # (An auth plugin's options are required once it is chosen.)
            option = copy.copy(option)
            option.required = False
            try:
                conf.register_opt(option, group=(
                    None if group == 'DEFAULT' else group))
            except cfg.DuplicateOptError:
                pass    # keystoneauth's options, listed for each plugin
    conf.register_opts(service_options.service_opts)
    conf.register_opts(log_options.common_cli_opts +
                       log_options.logging_cli_opts +
                       log_options.generic_log_opts +
                       log_options.log_opts)
    nim_conf.register_opts(conf)
    conf(['--config-file', str(path)], project='nova')
    return conf


def test_the_page_has_a_fragment_for_each_tool() -> None:
    where = [w for w, _ in fragments()]
    # kolla-ansible's ini, openstack-ansible's and openstack-helm's YAML.
    assert [w.rsplit(' ', 1)[1] for w in where] == ['(ini)', '(yaml)',
                                                    '(yaml)'], where


@pytest.mark.parametrize('where,text', fragments(),
                         ids=[w for w, _ in fragments()])
def test_each_fragment_parses_with_novas_and_this_drivers_options(
        where: str, text: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / 'nova.conf'
    path.write_text(text)
    conf = nova_conf(path)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    for section in ['DEFAULT'] + parser.sections():
        group = None if section == 'DEFAULT' else section
        names = (parser.defaults() if group is None
                 else {k: v for k, v in parser[section].items()
                       if k not in parser.defaults()})
        for name in names:
            if compat.nova_release() < LATER.get((section, name), 0):
                continue
            try:
                value = conf[name] if group is None else conf[group][name]
            except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
                pytest.fail('%s: [%s] %s is not an option of nova or of '
                            'nova-ironic-multi' % (where, section, name))
            except ValueError as e:
                pytest.fail('%s: [%s] %s: %s' % (where, section, name, e))
            assert value is not None, (where, section, name)
    # Every fragment loads this driver.
    assert conf.compute_driver == 'nova_ironic_multi.IronicDriver', where
    # And stops within its tool's timeout, nova's wait inside oslo's.
    if compat.nova_release() >= 33:
        assert (conf.manager_shutdown_timeout <
                conf.graceful_shutdown_timeout), where
