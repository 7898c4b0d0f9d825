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
``ironic``), or that run no hypervisor at all yet (an Ironic host whose
share is empty: a libvirt host always has its one compute node), and are
up, so ``service_down_time`` and ``forced_down`` count as they do for the
scheduler. Counting only hosts that have nodes made an empty host invisible
to its peers while it counted itself: views differed, and with few free
nodes the hosts took nodes from each other forever. This host applies the
same facts to its own service record: if its peers do not count it, it does
not count itself.
``static`` counts the hosts of ``peer_list`` that are up and enabled,
whether or not they already manage nodes.
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


def exclusion(svc: Any, api: Any | None) -> str | None:
    """Why a nova-compute service record does not count, or None.

    :param api: nova's servicegroup API, to also drop services that are
        down; None when liveness comes from elsewhere (tooz heartbeats).
    """
    if svc.disabled:
        return 'disabled'
    if svc.forced_down:
        return 'forced down'
    if api is not None and not api.service_is_up(svc):
        return 'down'
    return None


def counts(svc: Any, part: partition.Partition, api: Any | None) -> bool:
    """Whether a nova-compute service record is a live peer of ``part``."""
    return ((part.peers is None or svc.host.lower() in part.peers) and
            exclusion(svc, api) is None)


def own_exclusion(host: str, api: Any | None) -> str | None:
    """Why the nova-compute service of ``host`` does not count, or None.

    A host without a service record yet (a new service) counts.

    :raises MembershipUnavailable: nova cannot say.
    """
    ctxt = nova_context.get_admin_context()
    try:
        svc = objects.Service.get_by_host_and_binary(ctxt, host, BINARY)
    except exception.NovaException as e:
        raise base.MembershipUnavailable(
            "cannot read this host's nova-compute service: %s" % e) from e
    return None if svc is None else exclusion(svc, api)


def services(ctxt: Any) -> list[Any]:
    """Every nova-compute service record, disabled ones included.

    :raises MembershipUnavailable: nova cannot say.
    """
    try:
        return list(objects.ServiceList.get_by_binary(
            ctxt, BINARY, include_disabled=True))
    except exception.NovaException as e:
        raise base.MembershipUnavailable(
            'cannot read nova-compute services: %s' % e) from e


class _NovaServices(base.Membership):

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._servicegroup = servicegroup.API()

    @abc.abstractmethod
    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        """The service records that may be peers."""

    def own_exclusion(self) -> str | None:
        return own_exclusion(self.host, self._servicegroup)

    def observe(self, part: partition.Partition) -> frozenset[str]:
        ctxt = nova_context.get_admin_context()
        try:
            candidates = list(self._candidates(ctxt))
        except exception.NovaException as e:
            raise base.MembershipUnavailable(
                'cannot read nova-compute services: %s' % e) from e
        return frozenset(svc.host.lower() for svc in candidates
                         if counts(svc, part, self._servicegroup))


class ServiceGroupMembership(_NovaServices):
    """Enabled, up nova-compute services that manage Ironic nodes."""

    name = 'servicegroup'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Hosts seen running another hypervisor: a type never changes.
        self._other_hypervisor: set[str] = set()

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        # Only enabled services; this host's own record is looked up apart.
        ironic = list(objects.ServiceList.get_all_computes_by_hv_type(
            ctxt, HYPERVISOR_TYPE))
        known = {svc.host for svc in ironic}
        empty = [svc for svc in services(ctxt)
                 if not svc.disabled and svc.host not in known and
                 svc.host not in self._other_hypervisor and
                 self._no_compute_node(ctxt, svc.host)]
        return ironic + empty

    def _no_compute_node(self, ctxt: Any, host: str) -> bool:
        """Whether ``host`` runs no hypervisor yet (remembers other types)."""
        try:
            nodes = objects.ComputeNodeList.get_all_by_host(ctxt, host)
        except exception.ComputeHostNotFound:
            return True
        if all(cn.hypervisor_type != HYPERVISOR_TYPE for cn in nodes):
            self._other_hypervisor.add(host)
        return False


class StaticMembership(_NovaServices):
    """The hosts of ``peer_list`` whose nova-compute service is up."""

    name = 'static'

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        return services(ctxt)

    def observe(self, part: partition.Partition) -> frozenset[str]:
        if not part.peers:
            # partition.resolve() refuses this; a direct caller learns why.
            raise base.MembershipUnavailable(
                'membership_driver = static needs [ironic_multi] peer_list')
        return super().observe(part)
