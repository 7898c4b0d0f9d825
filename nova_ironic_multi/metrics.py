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
"""The Prometheus metrics of this driver, one set per process.

Recording a value only updates memory under a short lock: it never waits
on the network and never raises into a period. The HTTP exporter
(:mod:`nova_ironic_multi.service.exporter`) serves :data:`REGISTRY`.
Labels name kinds, never nodes or instances, so the series stay few.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client import Counter
from prometheus_client import Gauge
from prometheus_client import Histogram

#: Every metric of this package (not prometheus_client's global registry:
#: nothing else nova-compute loads shows up here, nor ours there).
REGISTRY = CollectorRegistry(auto_describe=True)

_PREFIX = 'nova_ironic_multi_'

#: Seconds: a period lists up to 10^5 nodes (tens of seconds).
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
            300.0)

NODES = Gauge(
    _PREFIX + 'nodes',
    'Ironic nodes this host manages, by kind: managed (all), free, '
    'with_instance (this host\'s instances), orphaned (deleted instances '
    'kept for nova\'s reaper); and share: the nodes the ring gives this '
    'host, free or not (summed over the hosts: every node in scope once).',
    ['kind'], registry=REGISTRY)
UNKNOWN_INSTANCE_NODES = Gauge(
    _PREFIX + 'nodes_with_unknown_instance',
    'Nodes in this host\'s ring share carrying an instance nova has never '
    'heard of (nobody manages them).', registry=REGISTRY)
PEERS = Gauge(
    _PREFIX + 'peers',
    'Live peers this host sees (the ring\'s members).', registry=REGISTRY)
MEMBER = Gauge(
    _PREFIX + 'member',
    '1 if this host is among the peers it sees, else 0 (disabled, '
    'draining, or its heartbeat is missing).', registry=REGISTRY)
MEMBER_VIEW = Gauge(
    _PREFIX + 'member_view_info',
    'Always 1; its digest label is a hash of the member set this host '
    'sees (hosts of one scope that agree show the same digest), its scope '
    'label the nodes it divides (all nodes, a conductor group, a shard).',
    ['scope', 'digest'], registry=REGISTRY)
NOT_READY = Gauge(
    _PREFIX + 'not_ready',
    '1 while the last period was NotReady (no division computed).',
    registry=REGISTRY)
NOT_READY_PERIODS = Counter(
    _PREFIX + 'not_ready_periods',
    'Periods that could not compute the division, by reason: ironic, nova, '
    'membership, configuration.', ['reason'], registry=REGISTRY)
LAST_SUCCESS = Gauge(
    _PREFIX + 'last_success_timestamp_seconds',
    'When the last period that computed the division ended (Unix time).',
    registry=REGISTRY)
PERIOD_SECONDS = Histogram(
    _PREFIX + 'period_duration_seconds',
    'How long a period took (listing, division and side jobs).',
    buckets=_BUCKETS, registry=REGISTRY)
LISTING_SECONDS = Histogram(
    _PREFIX + 'listing_duration_seconds',
    'How long a period\'s listing of Ironic nodes took.',
    buckets=_BUCKETS, registry=REGISTRY)
PERIOD_INTERVAL = Gauge(
    _PREFIX + 'period_interval_seconds',
    'Seconds between two periods, as nova runs them.', registry=REGISTRY)
IRONIC_REQUESTS = Counter(
    _PREFIX + 'ironic_requests',
    'Ironic API requests (each attempt), by outcome: ok; transient (Ironic '
    'busy or unreachable, the request surely not taken); refused (an '
    'answer other than success: not found, conflict, bad request, policy); '
    'lost (the connection broke after the request may have been taken).',
    ['outcome'], registry=REGISTRY)
TAKEOVERS = Counter(
    _PREFIX + 'takeovers',
    'Instances (and orphans) this host took over from fenced hosts.',
    registry=REGISTRY)
DRAINS = Counter(
    _PREFIX + 'drains',
    'Drains this host ran as it stopped, by result: done, left (some '
    'instances stayed), refused (no plan could be made).', ['result'],
    registry=REGISTRY)
HANDOVERS = Counter(
    _PREFIX + 'handovers',
    'Instances this host handed over to peers as it drained.',
    registry=REGISTRY)
ORPHANS_REAPED = Counter(
    _PREFIX + 'orphans_reaped',
    'Nodes of deleted instances torn down for nova\'s reaper.',
    registry=REGISTRY)
BUILDS_SWEPT = Counter(
    _PREFIX + 'builds_swept',
    'Builds no host ever claimed that this host put in ERROR.',
    registry=REGISTRY)
NODES_LEAKED = Counter(
    _PREFIX + 'nodes_leaked',
    'Nodes an action left holding an instance it gave up on (logged '
    'LEAKED; a period undoes them once Ironic allows).', registry=REGISTRY)

LISTING_RESYNCS = Counter(
    _PREFIX + 'listing_resyncs',
    'With listing = delta, periods that listed the nodes in full, by '
    'reason: start (nothing kept), scheduled (delta_resync_periods), busy '
    '(so many changes that a full listing costs Ironic less), anomaly (the '
    'change feed could not be trusted).', ['reason'],
    registry=REGISTRY)

IN_TASK_STATE = Gauge(
    _PREFIX + 'instances_in_task_state',
    'This host\'s instances holding a task state (an action under way), '
    'by task state.', ['task_state'], registry=REGISTRY)
TASK_STATE_OLDEST = Gauge(
    _PREFIX + 'task_state_oldest_seconds',
    'Seconds since the longest-held task state of this host\'s instances '
    'was set (0 if none holds one): a stuck action, if it keeps growing.',
    registry=REGISTRY)

#: Task states :data:`IN_TASK_STATE` has shown (set to 0 once none holds
#: them, so a series ends at 0 rather than at its last count).
_shown: set[str] = set()


def task_states(counts: dict[str, int], oldest: float) -> None:
    """This host's instances in each task state, and the oldest's age."""
    for state in _shown - set(counts):
        IN_TASK_STATE.labels(state).set(0)
    for state, n in counts.items():
        IN_TASK_STATE.labels(state).set(n)
    _shown.update(counts)
    TASK_STATE_OLDEST.set(oldest)


#: The NotReady reasons :data:`NOT_READY_PERIODS` counts (its label).
REASONS = ('ironic', 'nova', 'membership', 'configuration')
#: The outcomes :data:`IRONIC_REQUESTS` counts (its label).
OUTCOMES = ('ok', 'transient', 'refused', 'lost')

for _reason in REASONS:
    NOT_READY_PERIODS.labels(_reason)
for _outcome in OUTCOMES:
    IRONIC_REQUESTS.labels(_outcome)
for _result in ('done', 'left', 'refused'):
    DRAINS.labels(_result)


def member_view(scope: str, digest: str) -> None:
    """Show ``digest`` as this host's member view, and no other."""
    MEMBER_VIEW.clear()
    MEMBER_VIEW.labels(scope, digest).set(1)
