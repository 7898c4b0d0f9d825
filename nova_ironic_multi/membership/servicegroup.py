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
"""Peers from nova's own service records and servicegroup API.

``servicegroup`` (the default) counts the enabled nova-compute services that
manage Ironic nodes (those with compute nodes of hypervisor type
``ironic``) and are up, so ``service_down_time`` and ``forced_down`` count
as they do for the scheduler. ``static`` counts the hosts of ``peer_list``
that are up and enabled, whether or not they already manage nodes.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

from nova import context as nova_context
from nova import exception
from nova import objects
from nova import servicegroup
from oslo_log import log as logging

from nova_ironic_multi.membership import base
from nova_ironic_multi import partition

LOG = logging.getLogger(__name__)

HYPERVISOR_TYPE = 'ironic'
BINARY = 'nova-compute'


class _NovaServices(base.Membership):

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._servicegroup = servicegroup.API()

    @abc.abstractmethod
    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        """The service records that may be peers."""

    def _self_disabled(self, ctxt: Any, services: Iterable[Any]) -> bool:
        me = self.host.lower()
        for svc in services:
            if svc.host.lower() == me:
                return bool(svc.disabled)
        svc = objects.Service.get_by_host_and_binary(ctxt, self.host, BINARY)
        return bool(svc is not None and svc.disabled)

    def live_peers(self, part: partition.Partition) -> frozenset[str]:
        ctxt = nova_context.get_admin_context()
        try:
            services = list(self._candidates(ctxt))
            self_disabled = self._self_disabled(ctxt, services)
        except exception.NovaException as e:
            raise base.MembershipUnavailable(
                'cannot read nova-compute services: %s' % e) from e
        live = set()
        for svc in services:
            host = svc.host.lower()
            if part.peers is not None and host not in part.peers:
                continue
            if svc.disabled:
                continue
            if self._servicegroup.service_is_up(svc):
                live.add(host)
        me = self.host.lower()
        if self_disabled:
            live.discard(me)
            LOG.info('This nova-compute service (%(host)s) is disabled: it '
                     'keeps the nodes of its instances but claims no free '
                     'node.', {'host': self.host})
        else:
            # A new service has no compute node yet, so nova does not list
            # it among the Ironic computes; it is a member all the same.
            live.add(me)
        return frozenset(live)


class ServiceGroupMembership(_NovaServices):
    """Enabled, up nova-compute services that manage Ironic nodes."""

    name = 'servicegroup'

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        # Only enabled services; this host's own record is looked up apart.
        services: Iterable[Any] = (
            objects.ServiceList.get_all_computes_by_hv_type(
                ctxt, HYPERVISOR_TYPE))
        return services


class StaticMembership(_NovaServices):
    """The hosts of ``peer_list`` whose nova-compute service is up."""

    name = 'static'

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        services: Iterable[Any] = objects.ServiceList.get_by_binary(
            ctxt, BINARY, include_disabled=True)
        return services

    def live_peers(self, part: partition.Partition) -> frozenset[str]:
        if not part.peers:
            # partition.resolve() refuses this; a direct caller learns why.
            raise base.MembershipUnavailable(
                'membership_driver = static needs [ironic_multi] peer_list')
        return super().live_peers(part)
