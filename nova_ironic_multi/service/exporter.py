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
"""The HTTP endpoint Prometheus scrapes (``[ironic_multi] metrics_port``).

prometheus_client's server, in a daemon thread of its own (a green thread
under eventlet): a scrape reads :data:`metrics.REGISTRY` and never touches
a period. Started once per process, at ``init_host``; a port that cannot
be bound is logged at ERROR and the service runs on without metrics.
"""

from __future__ import annotations

import threading
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging
import prometheus_client

from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
#: (address, port) -> the server serving it, in this process.
_servers: dict[tuple[str, int], Any] = {}


def start(conf: cfg.ConfigOpts) -> tuple[str, int] | None:
    """Serve the metrics if ``metrics_port`` is set; where, or None."""
    port = conf.ironic_multi.metrics_port
    if not port:
        return None
    address = conf.ironic_multi.metrics_host
    where = (address, port)
    with _lock:
        if where in _servers:
            return where
        try:
            server, _thread = prometheus_client.start_http_server(
                port, addr=address, registry=metrics.REGISTRY)
        except OSError as e:
            LOG.error('Cannot serve the metrics on %(addr)s port %(port)d '
                      '([ironic_multi] metrics_host, metrics_port): %(err)s.'
                      ' nova-compute runs on without them; free the port '
                      'or choose another, then restart it.',
                      {'addr': address, 'port': port, 'err': e})
            return None
        _servers[where] = server
    LOG.info('Serving Prometheus metrics on http://%(addr)s:%(port)d/'
             'metrics', {'addr': address, 'port': port})
    return where


def stop_all() -> None:
    """Stop every server this process started (tests)."""
    with _lock:
        for server in _servers.values():
            server.shutdown()
            server.server_close()
        _servers.clear()
