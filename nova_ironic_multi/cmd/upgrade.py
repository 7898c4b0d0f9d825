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
"""``nova-ironic-multi upgrade check``: is the deployment ready?

In ``nova-status upgrade check``'s style (oslo.upgradecheck): each check
is Success, Warning or Failure with details, and the command exits with
the worst: 0, 1 or 2 (255 when a check itself broke). Run it before and
after an upgrade or a configuration change, where ``nova-manage`` runs,
with nova's configuration.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import sys
from typing import Any, TextIO

from ironicclient import exc as ir_exc
from nova import context as nova_context
from nova import exception as nova_exc
from nova import objects
from nova import servicegroup
from oslo_config import cfg
from oslo_db import exception as db_exc
import oslo_messaging
from oslo_upgradecheck import upgradecheck

from nova_ironic_multi.cmd import fleet
from nova_ironic_multi.cmd import settings_check
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi import ironic
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi.membership import marker
from nova_ironic_multi.membership import published

Code = upgradecheck.Code
Result = upgradecheck.Result

#: What reading nova's databases may raise when they cannot be read: not
#: configured, unreachable, or (on a compute host) the conductor away.
NOVA_ERRORS = (nova_exc.NovaException, db_exc.DBError,
               db_exc.CantStartEngineError, oslo_messaging.MessagingException)


def _nova_down(error: Exception) -> Result:
    return Result(Code.FAILURE, (
        "Cannot read nova's databases: %s. Run the check where nova-manage "
        "runs, with nova's configuration ([api_database] connection and the "
        "cells' databases).") % (str(error) or type(error).__name__))

#: The module nova imports for ``compute_driver = nova_ironic_multi.X``.
SHIM = 'nova.virt.nova_ironic_multi'
DRIVER = 'nova_ironic_multi.IronicDriver'


def _hosts(hosts: list[str]) -> str:
    return ', '.join(sorted(hosts))


class Checks(upgradecheck.UpgradeCommands):
    """The checks, in the order the table shows them."""

    display_title = 'nova-ironic-multi upgrade check'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self._part: partition_mod.Partition | None = None
        self._client: ironic.Ironic | None = None
        self._read: list[Any] | None = None

    # Helpers ---------------------------------------------------------------

    def _partition(self) -> partition_mod.Partition:
        """:raises InvalidPartition, PluginError:"""
        if self._part is None:
            part = partition_opts.resolve(self._conf, fleet.OBSERVER,
                                          observer=True)
            loader.plugin(loader.RINGS_NAMESPACE, part.ring_algorithm,
                          '[ironic_multi] ring_algorithm')
            loader.plugin(loader.MEMBERSHIP_NAMESPACE,
                          part.membership_driver,
                          '[ironic_multi] membership_driver')
            self._part = part
        return self._part

    def _ironic(self) -> ironic.Ironic:
        if self._client is None:
            self._client = ironic.Ironic(self._conf)
        return self._client

    def _user(self) -> str:
        try:
            name = self._conf.ironic.username
        except cfg.NoSuchOptError:      # an auth plugin without one
            name = None
        return str(name) if name else '(as its auth options name it)'

    # The checks ------------------------------------------------------------

    def _services(self) -> list[Any]:
        """Every cell's nova-compute services (read once per run)."""
        if self._read is None:
            ctxt = nova_context.get_admin_context()
            self._read = [svc for _, cctxt in fleet.every_cell(ctxt)
                          for svc in objects.ServiceList.get_by_binary(
                              cctxt, 'nova-compute', include_disabled=True)]
        return self._read

    def _check_local(self) -> Result:
        try:
            part = self._partition()
        except (partition_mod.InvalidPartition, loader.PluginError) as e:
            return Result(Code.FAILURE, str(e))
        try:
            services = self._services()
        except NOVA_ERRORS:
            services = []   # the next check says nova cannot be read
        differ, _, _ = settings_check.check(
            part, services, servicegroup.API().service_is_up)
        if differ:
            return Result(Code.WARNING, ' '.join(differ))
        return Result(Code.SUCCESS, 'These files divide %s: %s.' % (
            part.scope.describe(), ', '.join(
                '%s %s' % kv for kv in
                published.Settings.of(part).division().items())))

    def _check_same_settings(self) -> Result:
        try:
            services = self._services()
            marked = marker.read()
            settings = published.read()
        except marker.MarkerError as e:
            return Result(Code.FAILURE, 'Cannot read what the hosts '
                          'publish: %s' % e)
        except NOVA_ERRORS as e:
            return _nova_down(e)
        api = servicegroup.API()
        up = [svc for svc in services if api.service_is_up(svc)]
        scopes: dict[str, dict[tuple[tuple[str, str], ...], list[str]]] = (
            collections.defaultdict(lambda: collections.defaultdict(list)))
        warnings = []
        for svc in up:
            mine = settings.get(svc.uuid, [])
            if len(mine) > 1:
                warnings.append('%s is changing its settings now: run the '
                                'check again' % svc.host)
            elif mine:
                scopes[mine[0].scope()][tuple(
                    mine[0].division().items())].append(svc.host)
            elif svc.uuid in marked:
                warnings.append(
                    '%s runs this driver but publishes no settings: it runs '
                    'a release before 2026.2, or has not divided since it '
                    'started' % svc.host)
        failures = []
        for scope, variants in sorted(scopes.items()):
            if len(variants) < 2:
                continue
            differ = [key for key, _ in next(iter(variants))
                      if len({dict(v)[key] for v in variants}) > 1]
            sides = '; '.join(
                '%s on %s' % (', '.join(dict(v)[k] for k in differ),
                              _hosts(hosts))
                for v, hosts in sorted(variants.items(),
                                       key=lambda kv: kv[1]))
            failures.append('%s is divided by hosts that disagree on %s: %s'
                            % (scope, ' and '.join(differ), sides))
        if failures:
            return Result(Code.FAILURE, '. '.join(
                failures + warnings) + '. Give every host of a scope the '
                'same settings and restart (or reload) the ones that differ.')
        if warnings:
            return Result(Code.WARNING, '. '.join(warnings) + '.')
        if not scopes:
            return Result(Code.WARNING, 'No running host publishes its '
                          'settings yet.')
        return Result(Code.SUCCESS, '; '.join(
            '%s: %s' % (scope, _hosts(next(iter(v.values()))))
            for scope, v in sorted(scopes.items())))

    def _check_ironic_api(self) -> Result:
        try:
            part = self._partition()
        except (partition_mod.InvalidPartition, loader.PluginError):
            return Result(Code.FAILURE, 'The local settings are invalid '
                          '(see the first check).')
        if part.by_shard:
            need, why = ironic.SHARD_VERSION, '[ironic_multi] divide = shards'
        elif part.scope.shard is not None:
            need, why = ironic.SHARD_VERSION, '[ironic] shard'
        else:
            need, why = ironic.MIN_VERSION, 'this driver'
        try:
            client = self._ironic()
            offered = client.version
        except ironic.IronicError as e:
            return Result(Code.FAILURE, 'Cannot negotiate Ironic\'s API '
                          'version: %s' % e)
        if not client.offers(need):
            return Result(Code.FAILURE, (
                'Ironic offers API %d.%d at most; %s needs %d.%d. Upgrade '
                'Ironic first.') % (offered + (why,) + need))
        newest = client.version
        return Result(Code.SUCCESS, 'Ironic offers API %d.%d%s; %s needs '
                      '%d.%d.' % (newest + (
                          ' or later' if newest >= ironic.SHARD_VERSION
                          else '', why) + need))

    def _check_ironic_policy(self) -> Result:
        try:
            part = self._partition()
            client = self._ironic()
            nodes = client.list_nodes(part.scope)
            read = [client.get_node(nodes[0].uuid)] if nodes else []
            busy = [n for n in nodes if n.instance_uuid]
            if busy:
                client.vif_list(busy[0].uuid)
        except (partition_mod.InvalidPartition, loader.PluginError):
            return Result(Code.FAILURE, 'The local settings are invalid '
                          '(see the first check).')
        except ironic.IronicError as e:
            if isinstance(e.__cause__, ir_exc.Forbidden):
                return Result(Code.FAILURE, (
                    'Ironic\'s policy refuses the [ironic] user %s: %s. '
                    'Give it the role the nova service user has in Ironic '
                    '(service, or admin).') % (
                        self._user(), e))
            return Result(Code.FAILURE, 'Cannot read Ironic: %s' % e)
        return Result(Code.SUCCESS, (
            'The [ironic] user lists the %d node(s) of %s, reads %d and the '
            'VIFs of %d; writes (deploy, power, VIFs) are not tried.') % (
                len(nodes), part.scope.describe(), len(read),
                1 if busy else 0))

    def _check_cells(self) -> Result:
        try:
            view = fleet.gather(self._conf)
        except (partition_mod.InvalidPartition, loader.PluginError):
            return Result(Code.FAILURE, 'The local settings are invalid '
                          '(see the first check).')
        except (ironic.IronicError, membership.MembershipUnavailable) as e:
            return Result(Code.FAILURE, 'Cannot read the fleet: %s' % e)
        except NOVA_ERRORS as e:
            return _nova_down(e)
        if view.cell_conflicts:
            return Result(Code.FAILURE, '; '.join(view.cell_conflicts) + (
                '. The computes of each cell see only their cell: move the '
                'scope\'s computes into one cell.'))
        return Result(Code.SUCCESS, '%s is served from one cell.'
                      % view.partition.scope.describe())

    def _check_shim(self) -> Result:
        try:
            found = importlib.util.find_spec(SHIM) is not None
        except ImportError:
            found = False
        if not found:
            return Result(Code.FAILURE, (
                '%s cannot be imported by %s: nova-compute cannot load '
                'compute_driver = %s. Install nova-ironic-multi into '
                'nova-compute\'s Python environment.') % (
                    SHIM, sys.executable, DRIVER))
        driver = getattr(self._conf, 'compute_driver', None)
        if driver and driver != DRIVER:
            return Result(Code.WARNING, (
                '%s is importable, but these files set compute_driver = %s: '
                'set %s on the computes of this driver.') % (
                    SHIM, driver, DRIVER))
        return Result(Code.SUCCESS, '%s is importable by %s.' % (
            SHIM, sys.executable))

    def _check_ironic_options(self) -> Result:
        found = nova_options.differences(self._conf, fleet.OBSERVER)
        if not found:
            return Result(Code.SUCCESS, 'No [ironic] option here works '
                          'otherwise than in nova\'s in-tree driver.')
        return Result(Code.WARNING, ' '.join(
            '[ironic] %s is set: %s.' % (name, instead)
            for name, instead in found) + (
            ' See "nova\'s [ironic] options" in the configuration guide.'))

    _upgrade_checks = (
        ('Local settings', _check_local),
        ('Same settings in each scope', _check_same_settings),
        ('Ironic API version', _check_ironic_api),
        ('Ironic policy', _check_ironic_policy),
        ('One cell per scope', _check_cells),
        ('nova.virt shim', _check_shim),
        ("nova's [ironic] options", _check_ironic_options),
    )

    def results(self) -> list[tuple[str, Result]]:
        return [(name, check(self)) for name, check in self._upgrade_checks]


def run(conf: cfg.ConfigOpts, out: TextIO, fmt: str = 'table') -> int:
    """Run every check; the exit code of the worst result."""
    checks = Checks(conf)
    if fmt != 'json':
        with contextlib.redirect_stdout(out):
            return int(checks.check())
    results = checks.results()
    out.write(json.dumps({'name': checks.display_title, 'checks': [
        {'check': name, 'result': int(r.code), 'details': r.details}
        for name, r in results]}, indent=2) + '\n')
    return max(int(r.code) for _, r in results)
