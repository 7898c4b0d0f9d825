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
"""A draining host's service, and the peers it may hand instances to.

The drain disables the host's nova-compute service (its reason starts
with :data:`REASON`), so the scheduler skips it and its peers drop it from
their rings; the next start enables it again, unless an operator disabled
it since. A peer that is disabled (draining too), forced down or down
takes nothing (:func:`refusal`).
"""

from __future__ import annotations

from typing import Any

from nova import context as nova_context
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging

from nova_ironic_multi.hosts import recovery

LOG = logging.getLogger(__name__)

#: How the service's ``disabled_reason`` starts while it is drained.
REASON = 'nova-ironic-multi: drained on stop'
BINARY = 'nova-compute'


def service(ctxt: Any, host: str) -> Any:
    return objects.Service.get_by_host_and_binary(ctxt, host, BINARY)


def disable(host: str) -> bool:
    """Disable ``host``'s nova-compute service for the drain.

    A service already disabled keeps its reason (an operator's): it is not
    enabled again at the next start. Returns whether this call disabled it.

    :raises NovaException, MessagingException: nova cannot say or write.
    """
    ctxt = nova_context.get_admin_context()
    svc = service(ctxt, host)
    if svc is None:
        return False
    if svc.disabled:
        LOG.info('nova-compute on %(host)s is already disabled (%(why)s): '
                 'left as it is', {'host': host, 'why': svc.disabled_reason})
        return False
    svc.disabled = True
    svc.disabled_reason = ('%s ([ironic_multi] drain_on_stop); enabled '
                           'again when it starts' % REASON)
    svc.save()
    LOG.warning('Draining: nova-compute on %s is disabled, so it takes no '
                'new build and its peers take its free nodes; its instances '
                'are handed over once the operations under way are over.',
                host)
    return True


def reenable(host: str) -> bool:
    """At start: enable the service a drain disabled; True if it did.

    Only a service disabled with the drain's reason: one an operator
    disabled since (with another reason) stays disabled.
    """
    ctxt = nova_context.get_admin_context()
    try:
        svc = service(ctxt, host)
        if (svc is None or not svc.disabled or
                not (svc.disabled_reason or '').startswith(REASON)):
            return False
        svc.disabled = False
        svc.disabled_reason = None
        svc.save()
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        LOG.error('Cannot enable nova-compute on %(host)s, disabled when it '
                  'last stopped (drain_on_stop): %(err)s. Enable it with '
                  '"openstack compute service set --enable %(host)s '
                  'nova-compute".', {'host': host, 'err': e})
        return False
    LOG.info('nova-compute on %s was disabled by its last drain: enabled '
             'again', host)
    return True


def refusal(peer: str, groups: Any) -> str | None:
    """Why ``peer`` may not take an instance now, or None.

    Checked before each move and again after it: a peer that began
    draining itself (it disabled its service) or went down since the
    plan must not be left holding an instance.

    :param groups: nova's servicegroup API.
    """
    ctxt = nova_context.get_admin_context()
    try:
        svc = service(ctxt, peer)
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        return 'its nova-compute service cannot be read (%s)' % e
    if svc is None:
        return 'it has no nova-compute service'
    if svc.disabled:
        return 'its nova-compute service is disabled (%s)' % (
            svc.disabled_reason or 'no reason given')
    if svc.forced_down:
        return 'its nova-compute service is forced down'
    if not groups.service_is_up(svc):
        return 'its nova-compute service is down'
    return None


def record_handover(instance_uuid: str, host: str) -> None:
    """Record the hand-over of an instance in flight.

    Its new host recovers it under this action
    (:func:`recovery.handed_over`); the action's one event names this
    host (the fault of a build the recovery ends in ERROR names it).
    """
    ctxt = nova_context.get_admin_context()
    event = recovery.HANDOVER_EVENT + host
    try:
        objects.InstanceAction.action_start(
            ctxt, instance_uuid, recovery.HANDOVER, want_result=False)
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        LOG.error('Draining: cannot record the hand-over of instance '
                  '%(inst)s (%(err)s): its new host will not recover '
                  'the action it is in the middle of; reset its state '
                  'once it is handed over.',
                  {'inst': instance_uuid, 'err': e})
        return
    try:
        objects.InstanceActionEvent.event_start(
            ctxt, instance_uuid, event, want_result=False, host=host)
        objects.InstanceActionEvent.event_finish(
            ctxt, instance_uuid, event, want_result=False)
    except (exception.NovaException,
            oslo_messaging.MessagingException) as e:
        LOG.warning('Draining: cannot record the event %(event)s of '
                    'instance %(inst)s (%(err)s): an error its new host '
                    'records will not name this host.',
                    {'event': event, 'inst': instance_uuid, 'err': e})
