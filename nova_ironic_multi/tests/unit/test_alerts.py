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
"""The shipped alerting rules, checked and unit-tested by ``promtool``.

The cases (firing and not firing, for every alert) are in
``prometheus/alerts_test.yaml`` beside this file.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import yaml

from nova_ironic_multi.tests.fixtures import prometheus
from nova_ironic_multi.tests import source

RULES = source.source_dir() / 'etc' / 'nova-ironic-multi' / 'prometheus' / (
    'alerts.yaml')
CASES = source.source_dir() / 'nova_ironic_multi' / 'tests' / 'unit' / (
    'prometheus') / 'alerts_test.yaml'


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([prometheus.tool('promtool'), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid() -> None:
    result = promtool('check', 'rules', str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    # promtool read every rule of the file.
    rules = sum(len(g['rules'])
                for g in yaml.safe_load(RULES.read_text())['groups'])
    assert rules >= 9
    assert 'SUCCESS: %d rules found' % rules in result.stdout


def test_every_alert_fires_and_stays_quiet_as_its_cases_say(
        tmp_path: pathlib.Path) -> None:
    cases = tmp_path / 'alerts_test.yaml'
    cases.write_text(CASES.read_text().replace('  - ALERTS',
                                               '  - %s' % RULES))
    result = promtool('test', 'rules', str(cases))
    assert result.returncode == 0, result.stdout + result.stderr
    # Every alert of the file has a case that fires and one that does not.
    alerts = {r['alert'] for g in yaml.safe_load(RULES.read_text())['groups']
              for r in g['rules']}
    tests = yaml.safe_load(CASES.read_text())['tests']
    firing = {c['alertname'] for t in tests for c in t['alert_rule_test']
              if c['exp_alerts']}
    quiet = {c['alertname'] for t in tests for c in t['alert_rule_test']
             if not c['exp_alerts']}
    assert alerts == firing == quiet


def test_each_alert_is_documented() -> None:
    page = (source.source_dir() / 'doc' / 'source' /
            'monitoring.rst').read_text()
    for alert in re.findall(r'alert: (\w+)', RULES.read_text()):
        assert '``%s``' % alert in page, alert
