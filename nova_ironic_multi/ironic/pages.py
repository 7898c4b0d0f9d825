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
"""The node listing, a page at a time, and how a log shows its filters."""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import threading
from typing import Any

from ironicclient.v1 import node as ir_node


class Filters:
    """A listing's filters as a log shows them, formatted only if logged."""

    def __init__(self, filters: dict[str, Any]) -> None:
        self._filters = filters

    def __str__(self) -> str:
        shown = ['%s=%s' % (k, ','.join(v) if isinstance(v, list) else v)
                 for k, v in sorted(self._filters.items()) if k != 'fields']
        return ', '.join(shown) or 'every node'


def answer_clock(response: Any) -> datetime.datetime | None:
    """The time in an HTTP answer's ``Date`` header (UTC), if any."""
    headers = getattr(response, 'headers', None) or {}
    value = headers.get('Date')
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when


@dataclasses.dataclass(frozen=True)
class Changed:
    """A page of the change feed (``Ironic.changed_nodes``)."""

    nodes: list[Any]
    #: Whether Ironic may have more (its answer had a ``next`` link).
    more: bool
    #: Ironic's clock when it answered, if it said.
    clock: datetime.datetime | None


class NodePages:
    """``node.list`` one page at a time, with whether Ironic has more.

    python-ironicclient's ``list(limit=None)`` makes one request and drops
    the page's ``next`` link. Ironic sets that link exactly when the page
    is full (``[api] max_limit`` items): without it the listing is
    complete, and asking for one more (empty) page would cost Ironic a
    request per listing. This stands in for the client's HTTP client
    (everything else passes through) to keep that one bit.
    """

    def __init__(self, http_client: Any) -> None:
        self._http = http_client
        self._local = threading.local()
        # Duck-typed: the manager only needs json_request and what the
        # HTTP client's other attributes give.
        self._nodes = ir_node.NodeManager(self)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._http, name)

    def json_request(self, method: str, url: str,
                     **kwargs: Any) -> tuple[Any, Any]:
        response, body = self._http.json_request(method, url, **kwargs)
        self._local.more = not (isinstance(body, dict) and
                                not body.get('next'))
        self._local.clock = answer_clock(response)
        return response, body

    def page(self, **kwargs: Any) -> tuple[list[Any], bool]:
        """One page of ``node.list(**kwargs)`` and whether more follow.

        "More" unless the answer proved otherwise.
        """
        self._local.more = True
        self._local.clock = None
        found = self._nodes.list(**kwargs)
        return found, self._local.more

    def clock(self) -> datetime.datetime | None:
        """Ironic's clock (its ``Date``) at this thread's last page."""
        return getattr(self._local, 'clock', None)
