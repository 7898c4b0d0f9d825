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
"""How long this host's instances have held a task state.

A server whose task state never clears answers 409 to every action but
delete until an admin resets it; operators alert on it. Each period reads
the host's instances (one query on the ``host`` index, none of the
instance's extra fields), keeps those that hold a task state and publishes how
many hold each and how long ago the oldest was last written: nova writes
an instance when it sets or clears its task state, and not while an
action waits on Ironic, so that age is how long it has been stuck.

A takeover's claim is not among nova's task states: the claims are given
back by :func:`nova_ironic_multi.hosts.moves.release_claims`.
"""

from __future__ import annotations

from collections.abc import Iterable
import datetime
from typing import Any

from nova.compute import task_states
from nova import context as nova_context
from nova import objects

from nova_ironic_multi import metrics

#: Every task state nova sets (its module's constants), sorted.
ALL: tuple[str, ...] = tuple(sorted(
    value for name, value in vars(task_states).items()
    if name.isupper() and isinstance(value, str)))


def age(instance: Any, now: datetime.datetime) -> float:
    """Seconds since ``instance`` was last written."""
    changed = instance.updated_at or instance.created_at
    if changed is None:
        return 0.0
    seconds: float = (now - changed.replace(tzinfo=None)).total_seconds()
    return max(0.0, seconds)


def publish(instances: Iterable[Any], now: datetime.datetime) -> None:
    """Record the counts by task state and the oldest's age."""
    counts: dict[str, int] = {}
    oldest = 0.0
    for inst in instances:
        counts[inst.task_state] = counts.get(inst.task_state, 0) + 1
        oldest = max(oldest, age(inst, now))
    metrics.task_states(counts, oldest)


def read(host: str) -> list[Any]:
    """``host``'s instances that hold one of nova's task states.

    Read by host (nova's plain per-host query: no filter that needs the
    database's regular expressions, which a cell-targeted compute's
    configuration may not name), the task states picked here.

    :raises nova.exception.NovaException:
    :raises oslo_messaging.MessagingException:
    """
    found = objects.InstanceList.get_by_host(
        nova_context.get_admin_context(), host, expected_attrs=[])
    return [inst for inst in found if inst.task_state in ALL]
