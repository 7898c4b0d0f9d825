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
"""``[ironic_multi]`` options of what a service tells: health, metrics."""

from oslo_config import cfg

OPTS = [
    cfg.StrOpt(
        'state_file',
        sample_default='$state_path/ironic_multi/$host.json',
        mutable=True,
        help="""
The file each period of the resource tracker rewrites with this host's
state: when the period ended, whether it computed the division or why it
could not (NotReady), and the peers it saw. ``nova-ironic-multi health``
reads it, so that a container's liveness or readiness probe needs no
database or API access: run the probe with the same configuration files as
nova-compute, or give it ``--state-file``.

A failure to write the file is logged once and never fails a period. An
empty value writes no file.

Possible values:

* Unset (default): ``ironic_multi/HOST.json`` under nova's ``[DEFAULT]
  state_path``, HOST being nova-compute's ``[DEFAULT] host``.
* A path writable by nova-compute.
* Empty: no state file (``nova-ironic-multi health`` then reports broken).
"""),
    cfg.PortOpt(
        'metrics_port',
        help="""
The TCP port on which nova-compute serves Prometheus metrics
(``http://ADDRESS:PORT/metrics``, the standard text format): nodes
managed, free, with instances and orphaned; peers and a digest of the
member set; period and listing durations; Ironic requests by outcome;
NotReady periods by reason; takeovers, drains, hand-overs, reaped orphans,
swept builds and leaked nodes. See the "Monitoring and alerts" page.

Read at start only. A port that cannot be bound is logged at ERROR and
nova-compute runs on without metrics.

Possible values:

* Unset (default): no metrics are served.
* A free port; give each nova-compute of a machine its own.

Related options:

* ``metrics_host``
"""),
    cfg.HostAddressOpt(
        'metrics_host',
        default='127.0.0.1',
        help="""
The address the metrics endpoint listens on (``metrics_port``).

Possible values:

* ``127.0.0.1`` (default): this machine only, for a Prometheus agent or
  proxy beside nova-compute.
* ``0.0.0.0`` or ``::``: every address, for a Prometheus server elsewhere
  (the endpoint has no authentication: restrict it by network).
* One address of this machine.

Related options:

* ``metrics_port``
"""),
]
