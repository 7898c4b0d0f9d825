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
"""What nova-compute's start asks of this driver (``init_host``).

In order: guard nova's RPC against requests queued for instances that
moved while the host was down (:mod:`hosts.stale_requests`), enable the
service again after a drain, check the partition and start the
membership plugin (a wrong option stops the service), serve the metrics
(``[ironic_multi] metrics_port``), connect to Ironic
(wrong credentials stop it; an outage does not), then SIGHUP's reload and
SIGTERM's drain (:mod:`.signals`).
"""

from __future__ import annotations

from typing import Any

from nova import context as nova_context
from nova import exception
from nova import monkey_patch
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import compat
from nova_ironic_multi.conf import nova_options
from nova_ironic_multi.division import partition
from nova_ironic_multi.hosts import drain
from nova_ironic_multi.hosts import restart
from nova_ironic_multi.hosts import stale_requests
from nova_ironic_multi import ironic
from nova_ironic_multi import loader
from nova_ironic_multi import membership
from nova_ironic_multi.period import inventory
from nova_ironic_multi.service import exporter
from nova_ironic_multi.service import reload
from nova_ironic_multi.service import signals

LOG = logging.getLogger(__name__)
CONF = cfg.CONF


def start(host: str, periods: inventory.Inventory, client: ironic.Ironic,
          virtapi: Any, stopping: Any) -> None:
    """Start this host's part: see the module's text.

    :param stopping: told of SIGTERM (its ``_on_sigterm``).
    :raises nova.exception.InvalidConfiguration: the options are wrong.
    """
    # Before nova's RPC server starts: requests queued for an instance
    # that moved while this host was down are dropped, not acted on.
    manager = stale_requests.manager_of(virtapi)
    if manager is not None:
        stale_requests.guard(manager, lambda: periods.host)
        periods.watch_builds(manager)
    # Back after a drain (scale-out): take builds again.
    drain.reenable(host)
    try:
        # Starts the membership plugin, which checks its own options.
        part = periods.start()
    except (partition.InvalidPartition, loader.PluginError,
            membership.MembershipMisconfigured) as e:
        LOG.error('nova-ironic-multi refuses to start: %s', e)
        raise exception.InvalidConfiguration(str(e)) from e
    LOG.info('nova-ironic-multi on %(host)s: %(part)s',
             {'host': host, 'part': part.summary()})
    nova_options.warn_differences(CONF, host)
    compat.warn_if_untested_nova()
    exporter.start(CONF)
    _connect(client)
    if compat.lists_nodes_before_instances():
        # A nova without process_instances_at_startup.
        restart.record_at_start(nova_context.get_admin_context(), host)
    reload.watch(CONF, periods)
    threads = not monkey_patch.is_patched()
    if threads:
        # Native threading: oslo.service cannot reload on SIGHUP.
        reload.install_sighup(CONF)
    # A drain begins as SIGTERM arrives (eventlet: oslo.service owns
    # the handlers, SIGTERM is seen through the wake-up pipe).
    signals.on_sigterm(stopping, handle=threads)


def _connect(client: ironic.Ironic) -> None:
    """Stop the service on a wrong ``[ironic]``; wait out an outage.

    Bad credentials or a catalog without Ironic never fix themselves:
    the operator must see them now, not as a warning every period. An
    unreachable Keystone or Ironic may come back: the service starts
    and its periods report VirtDriverNotReady until then.
    """
    try:
        client.connect()
    except ironic.IronicMisconfigured as e:
        LOG.error('nova-ironic-multi refuses to start: %s', e)
        raise exception.InvalidConfiguration(str(e)) from e
    except ironic.VersionNotSupported as e:
        # Not a network problem: said as what it is. An upgraded
        # Ironic is picked up by a later period.
        LOG.error('%s The driver reports VirtDriverNotReady until then.',
                  e)
    except ironic.IronicError as e:
        LOG.warning('Ironic cannot be reached yet (%s); the driver '
                    'reports VirtDriverNotReady until it can.', e)
