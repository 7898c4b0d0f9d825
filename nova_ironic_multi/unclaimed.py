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
"""Builds that no nova-compute ever claimed: ERROR once nova's bound passes.

nova's scheduler allocates a node in placement, and the conductor sends the
build to the host that managed the node then; the instance has no host
until that compute claims the node. If the request is lost on the way (the
compute stopped just as it arrived, RabbitMQ lost it), nothing ever acts on
the server: it stays BUILD, task state ``scheduling``, for ever. nova's one
remedy is the start of the node's owner, which puts such builds on its
nodes in ERROR; with several hosts the node may change hands while hosts
stop and start, and a host that starts while its service is still down
claims no free node, so that start never sees it.

With ``[DEFAULT] instance_build_timeout`` set (nova's own bound on a build;
0, the default, turns it off, and this too), each period every host looks
for servers still building with no host that were created longer ago than
that, whose allocation is on a node it manages now, and puts them in ERROR
with a fault that says what happened. The compare-and-swap on the states
leaves alone a build that a compute takes meanwhile. One query a period
(the servers building with no host), and one placement read per overdue
server, at most :data:`BATCH`; nothing waits or retries: the next period
looks again.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.scheduler.client import report
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging
from oslo_utils import timeutils

from nova_ironic_multi import restart

LOG = logging.getLogger(__name__)

#: Overdue servers looked at per period, at most (a placement read each).
BATCH = 20


def fault_message(timeout: int) -> str:
    return ('Its build never started: no nova-compute claimed a node for it '
            'within [DEFAULT] instance_build_timeout (%d s). The request was '
            'lost on the way (its compute stopped, or RabbitMQ restarted). '
            'Delete the server and create it again.' % timeout)


def build_timeout(conf: cfg.ConfigOpts) -> int:
    """``[DEFAULT] instance_build_timeout``, read at use time (0: off)."""
    return int(getattr(conf, 'instance_build_timeout', 0) or 0)


class UnclaimedBuilds:
    """See the module docstring."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf

    def sweep(self, host: str, managed: Collection[str]) -> list[str]:
        """ERROR the overdue unclaimed builds on ``managed`` nodes.

        :returns: the UUIDs of the servers put in ERROR.
        """
        timeout = build_timeout(self._conf)
        if timeout <= 0 or not managed:
            return []
        ctxt = nova_context.get_admin_context()
        building = objects.InstanceList.get_by_filters(
            ctxt, {'vm_state': vm_states.BUILDING, 'host': None,
                   'deleted': False}, expected_attrs=[])
        overdue = [i for i in building
                   if i.task_state == task_states.SCHEDULING and
                   timeutils.is_older_than(i.created_at, timeout)]
        ended = []
        mine = set(managed)
        for instance in overdue[:BATCH]:
            if self._end(ctxt, host, mine, instance, timeout):
                ended.append(instance.uuid)
        return ended

    def _end(self, ctxt: Any, host: str, managed: set[str], instance: Any,
             timeout: int) -> bool:
        try:
            allocations = report.report_client_singleton() \
                .get_allocations_for_consumer(ctxt, instance.uuid) or {}
        except Exception as e:
            LOG.warning('Cannot read the allocations of instance %(inst)s, '
                        'still building with no host; the next period '
                        'looks again: %(err)s',
                        {'inst': instance.uuid, 'err': e})
            return False
        nodes = sorted(set(allocations) & managed)
        if not nodes:
            return False        # another host's node, or none yet
        instance.vm_state = vm_states.ERROR
        instance.task_state = None
        try:
            instance.save(expected_vm_state=[vm_states.BUILDING],
                          expected_task_state=[task_states.SCHEDULING])
        except (exception.InstanceUpdateConflict,
                exception.InstanceNotFound):
            return False        # a compute took it, or it was deleted
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot put instance %(inst)s, never claimed, in '
                        'ERROR; the next period tries again: %(err)s',
                        {'inst': instance.uuid, 'err': e})
            return False
        message = fault_message(timeout)
        try:
            restart.record_fault(ctxt, instance.uuid, host, message)
        except (exception.NovaException,
                oslo_messaging.MessagingException) as e:
            LOG.warning('Cannot record why instance %(inst)s went to ERROR '
                        '(%(why)s): %(err)s',
                        {'inst': instance.uuid, 'why': message, 'err': e})
        LOG.warning('Instance %(inst)s, allocated Ironic node %(node)s that '
                    'this host manages, was still building with no host '
                    '%(age)d s after it was created: put in ERROR ("%(why)s")',
                    {'inst': instance.uuid, 'node': nodes[0],
                     'age': (timeutils.utcnow() - timeutils.normalize_time(
                         instance.created_at)).total_seconds(),
                     'why': message})
        return True
