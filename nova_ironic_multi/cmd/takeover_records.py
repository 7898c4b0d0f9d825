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
"""The takeovers recorded, automatic and by hand, newest first.

A host that takes an instance over from a fenced host records a nova
instance action (``takeover``, with one event ``takeover_from_<old host>``
whose host is the new one: see :mod:`nova_ironic_multi.hosts.takeover`), and
``nova-ironic-multi takeover`` records ``manual-takeover`` with the same
event; this reads them back from each cell's database for ``ring show``.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import datetime
from typing import Any

from nova.db.main import api as main_db_api
from nova.db.main import models

from nova_ironic_multi.hosts import takeover

#: Takeovers ``ring show`` lists, at most.
LIMIT = 20


@dataclasses.dataclass(frozen=True)
class Takeover:
    at: datetime.datetime | None
    instance: str
    source: str
    destination: str
    cell: str
    #: ``automatic`` (the fenced takeover) or ``manual`` (the command).
    how: str = 'automatic'

    def as_dict(self) -> dict[str, Any]:
        return {'time': self.at.isoformat() if self.at else None,
                'instance': self.instance, 'from': self.source,
                'to': self.destination, 'cell': self.cell, 'how': self.how}


_HOW = {takeover.ACTION: 'automatic', takeover.MANUAL_ACTION: 'manual'}


def _read(cell: str, cctxt: Any, limit: int) -> list[Takeover]:
    action, event = models.InstanceAction, models.InstanceActionEvent
    with main_db_api.get_context_manager(cctxt).reader.using(cctxt):
        rows = (cctxt.session.query(action.instance_uuid, action.start_time,
                                    event.event, event.host, action.action)
                .join(event, event.action_id == action.id)
                .filter(action.action.in_(sorted(_HOW)))
                .filter(event.event.like(takeover.EVENT_PREFIX + '%'))
                .order_by(action.start_time.desc(), action.id.desc())
                .limit(limit).all())
    return [Takeover(at, uuid, name[len(takeover.EVENT_PREFIX):], host or '',
                     cell, _HOW[kind])
            for uuid, at, name, host, kind in rows]


def recent(cells: Iterable[tuple[str, Any]],
           limit: int = LIMIT) -> list[Takeover]:
    """The latest ``limit`` takeovers of all cells, newest first."""
    found: list[Takeover] = []
    for cell, cctxt in cells:
        found += _read(cell, cctxt, limit)
    oldest = datetime.datetime.min
    found.sort(key=lambda t: (t.at or oldest).replace(tzinfo=None),
               reverse=True)
    return found[:limit]
