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
"""The configuration in force and the membership plugin it names.

The partition options are read at each use (the mutable ones change on a
SIGHUP); an invalid value keeps the last good partition, logged once per
period naming the option. The membership plugin is loaded and started
once, and stopped when another replaces it or the service stops.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.conf import partition_opts
from nova_ironic_multi.conf import reading
from nova_ironic_multi.division import partition as partition_mod
from nova_ironic_multi import loader
from nova_ironic_multi import membership

LOG = logging.getLogger(__name__)


class InForce:
    """The partition in force and the started membership plugin."""

    def __init__(self, conf: cfg.ConfigOpts, host: str) -> None:
        self._conf = conf
        self.host = host
        self._good: partition_mod.Partition | None = None
        self.plugin: membership.Membership | None = None

    def partition(self) -> partition_mod.Partition:
        """The partition in force: the options now, or the last good ones.

        :raises partition.InvalidPartition: the options are invalid and
            there has never been a good partition (start-up).
        """
        # Other readers of the options read oslo.config's cache: drop what
        # a read under way during the last reload left there.
        reading.settle(self._conf)
        try:
            part = partition_opts.resolve(self._conf, self.host)
        except (partition_mod.InvalidPartition, cfg.Error, ValueError) as e:
            error: Exception | None = e
        else:
            error = None
        if error is not None:
            if self._good is None:
                raise partition_mod.InvalidPartition(str(error)) from error
            # Outside the except block, so the log line is the message alone.
            LOG.error('Invalid partition options, still using the last '
                      'good ones (%(good)s): %(error)s',
                      {'good': self._good.summary(), 'error': error})
            return self._good
        if self._good is not None and part != self._good:
            LOG.info('Partition changed from %(old)s to %(new)s',
                     {'old': self._good.summary(), 'new': part.summary()})
        self._good = part
        return part

    def reloaded(self) -> None:
        """The configuration files were re-read (SIGHUP): check them now.

        The next refresh applies a valid partition; an invalid one is
        logged here, naming the option, and the last good one stays.
        """
        try:
            self.partition()
        except partition_mod.InvalidPartition as e:
            LOG.error('Reload rejected: %s', e)

    def membership(self, part: partition_mod.Partition
                   ) -> membership.Membership:
        """The started membership plugin of ``part``.

        A plugin is started once, when it is loaded; one that another
        replaces is stopped first.

        :raises loader.PluginError: no one plugin has that name.
        :raises membership.MembershipMisconfigured: it cannot start.
        """
        plugin = self.plugin
        if plugin is None or plugin.name != part.membership_driver:
            if plugin is not None:
                self.plugin = None
                plugin.stop()
            plugin = membership.load(part.membership_driver, self._conf,
                                     self.host)
            plugin.start()
            self.plugin = plugin
        return plugin

    def start(self) -> partition_mod.Partition:
        """Check the partition and start the membership plugin (init_host).

        :raises partition.InvalidPartition: the options are invalid.
        :raises loader.PluginError: an unknown plugin is configured.
        :raises membership.MembershipMisconfigured: the membership plugin
            cannot work with its configuration.
        """
        part = self.partition()
        loader.plugin(loader.RINGS_NAMESPACE, part.ring_algorithm,
                      '[ironic_multi] ring_algorithm')
        self.membership(part)
        return part

    def stop(self) -> None:
        plugin, self.plugin = self.plugin, None
        if plugin is not None:
            plugin.stop()

    def listed(self, part: partition_mod.Partition, ok: bool) -> None:
        """Tell the membership plugin whether this period listed Ironic."""
        try:
            plugin = self.membership(part)
        except (membership.MembershipUnavailable, loader.PluginError):
            return   # the period says why when it asks for the peers
        plugin.listed(ok)
