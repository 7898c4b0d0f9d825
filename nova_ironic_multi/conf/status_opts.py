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
"""``[ironic_multi]`` options of what a service tells about its health."""

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
]
