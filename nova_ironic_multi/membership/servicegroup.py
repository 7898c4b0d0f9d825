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

``servicegroup`` (the default) counts the nova-compute services that run
this driver and are up and enabled, so ``service_down_time`` and
``forced_down`` count as they do for the scheduler. A service runs this
driver when

* its record carries this driver's marker in placement (see
  :mod:`~nova_ironic_multi.membership.marker`: every service of this driver
  publishes one under its service UUID; no other hypervisor does, whether
  it is running, just starting or crash-looping), or it has an Ironic
  compute node that is not deleted (nova's in-tree driver during a rolling
  migration, which publishes no marker), and
* it has no compute node of another hypervisor type that is not deleted (a
  host reinstalled with another driver under the same service record).

Compute nodes alone cannot tell: an Ironic host whose share is empty has
none (counting only hosts that have nodes made it invisible to its peers
while it counted itself, and with few free nodes the hosts took nodes from
each other forever), and neither has a libvirt host before its first
compute node; and nova's ``service_get_all_computes_by_hv_type`` also
matches compute nodes that were deleted, under a host name reused since.
This host applies the same facts to its own service record: if its peers
do not count it, it does not count itself.
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

from nova_ironic_multi.division import partition
from nova_ironic_multi.membership import base
from nova_ironic_multi.membership import marker

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


def other_hypervisor(ctxt: Any, host: str) -> tuple[str | None, bool]:
    """The other hypervisor types of ``host``'s compute nodes, or None.

    Also whether it has an Ironic compute node. Deleted compute nodes do
    not count.

    :raises NovaException: nova cannot say.
    """
    try:
        nodes = objects.ComputeNodeList.get_all_by_host(ctxt, host)
    except exception.ComputeHostNotFound:
        return None, False
    other = sorted({cn.hypervisor_type for cn in nodes
                    if cn.hypervisor_type != HYPERVISOR_TYPE})
    return (','.join(other) if other else None,
            len(other) < len({cn.hypervisor_type for cn in nodes}))


def not_this_driver(ctxt: Any, svc: Any) -> str | None:
    """Why a nova-compute service does not run this driver, or None.

    The rule servicegroup membership applies (see the module): it has
    published its marker and has no compute node of another hypervisor.

    :raises marker.MarkerError: placement cannot say.
    :raises NovaException: nova cannot say.
    """
    if svc.uuid not in marker.read():
        return foreign(svc.uuid, False, None)
    return foreign(svc.uuid, True, other_hypervisor(ctxt, svc.host)[0])


def foreign(service_uuid: str, marked: bool,
            other: str | None) -> str | None:
    """Why a nova-compute service does not run this driver, or None.

    :param marked: whether it published this driver's marker.
    :param other: the other hypervisor types of its compute nodes that are
        not deleted (as :func:`other_hypervisor` names them), or None.
    """
    if not marked:
        return ('it has not published the marker of this driver (%s) in '
                'placement' % marker.name(service_uuid))
    if other is not None:
        return 'it has compute nodes of hypervisor type %s' % other
    return None


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
        found: set[str] = set()
        for ctxt in self.nova_contexts():
            try:
                candidates = list(self._candidates(ctxt))
            except exception.NovaException as e:
                raise base.MembershipUnavailable(
                    'cannot read nova-compute services: %s' % e) from e
            found.update(svc.host.lower() for svc in candidates
                         if counts(svc, part, self._servicegroup))
        return frozenset(found)


class ServiceGroupMembership(_NovaServices):
    """Enabled, up nova-compute services that run this driver."""

    name = 'servicegroup'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Service UUIDs seen with an Ironic compute node and no other,
        #: kept while they stay up (a reinstall takes the service down).
        self._ironic: set[str] = set()
        #: The service UUIDs with a marker, as last read.
        self._marked: frozenset[str] | None = None

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        try:
            marked = marker.read()
        except marker.MarkerError as e:
            raise base.MembershipUnavailable(
                'cannot read which nova-compute services run this driver: '
                '%s' % e) from e
        self._marked = marked
        found = services(ctxt)
        up = {svc.uuid for svc in found
              if exclusion(svc, self._servicegroup) is None}
        self._ironic &= up
        # Hosts with Ironic compute nodes, deleted ones included (nova's
        # query): nova's in-tree driver, or an earlier version of this
        # one, publishes no marker.
        ironic = {svc.host for svc in
                  objects.ServiceList.get_all_computes_by_hv_type(
                      ctxt, HYPERVISOR_TYPE)}
        return [svc for svc in found
                if svc.uuid in up and
                (svc.uuid in marked or svc.host in ironic) and
                self._runs_ironic(ctxt, svc, svc.uuid in marked)]

    def _runs_ironic(self, ctxt: Any, svc: Any, marked: bool) -> bool:
        if svc.uuid in self._ironic:
            return True
        other, ironic = other_hypervisor(ctxt, svc.host)
        if other is None and ironic:
            self._ironic.add(svc.uuid)
        return other is None and (marked or ironic)

    def other_hypervisor(self, ctxt: Any, svc: Any) -> str | None:
        """The other hypervisor type a service's compute nodes have, or None.

        :raises NovaException: nova cannot say.
        """
        if svc.uuid in self._ironic:
            return None
        other, ironic = other_hypervisor(ctxt, svc.host)
        if other is None and ironic:
            self._ironic.add(svc.uuid)
        return other

    def own_exclusion(self) -> str | None:
        ctxt = nova_context.get_admin_context()
        try:
            svc = objects.Service.get_by_host_and_binary(
                ctxt, self.host, BINARY)
        except exception.NovaException as e:
            raise base.MembershipUnavailable(
                "cannot read this host's nova-compute service: %s" % e) from e
        if svc is None:
            # A new service (no record yet) counts; its first period after
            # nova creates the record publishes its marker.
            return None
        reason = exclusion(svc, self._servicegroup)
        if reason is not None:
            return reason
        if self._marked is None or svc.uuid not in self._marked:
            # Not seen by its peers yet (or the marker was removed).
            if self.observer:
                return 'not published as a peer in placement'
            try:
                marker.publish(svc.host, svc.uuid)
            except marker.MarkerError as e:
                return ('not published as a peer in placement, so its '
                        'peers do not count it (%s)' % e)
            self._marked = (self._marked or frozenset()) | {svc.uuid}
        try:
            other = self.other_hypervisor(ctxt, svc)
        except exception.NovaException as e:
            raise base.MembershipUnavailable(
                "cannot read this host's compute nodes: %s" % e) from e
        if other is not None:
            return ('recorded with compute nodes of hypervisor type %s; '
                    'nova deletes them in its next period' % other)
        return None


class StaticMembership(_NovaServices):
    """The hosts of ``peer_list`` whose nova-compute service is up."""

    name = 'static'

    def _candidates(self, ctxt: Any) -> Iterable[Any]:
        return services(ctxt)

    def observe(self, part: partition.Partition) -> frozenset[str]:
        if not part.peers:
            # partition_opts.resolve() refuses this; a direct caller learns
            # why.
            raise base.MembershipUnavailable(
                'membership_driver = static needs [ironic_multi] peer_list')
        return super().observe(part)
