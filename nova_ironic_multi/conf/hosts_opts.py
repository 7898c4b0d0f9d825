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
"""``[ironic_multi]`` options of instances changing hosts.

The automatic takeover of a fenced host's instances, and the drain of a
stopping host.
"""

from oslo_config import cfg

takeover_opts = [
    cfg.StrOpt(
        'takeover',
        default='manual',
        choices=[
            ('manual', 'Instances of a dead host move only with the '
                       '``nova-ironic-multi takeover`` command.'),
            ('fenced', 'Within one period of a host being forced down, '
                       'the live peers take over its instances, node by '
                       'node, as the ring names them.'),
        ],
        mutable=True,
        help="""
What happens to the instances of a nova-compute host that is fenced: forced
down in nova (``openstack compute service set --down HOST nova-compute``),
as an operator or an external monitor does once the host is powered off.

A node that carries an instance stays with the instance's host, so the
instances of a dead host cannot be rebooted, stopped or deleted until they
change hosts. With ``fenced``, in each period every host looks for forced
down nova-compute services; each node in its scope that carries one of their
instances (or an instance nova deleted while that host was down) goes to
the live peer the ring names for that node, which moves the instances to
itself with a compare-and-swap, so that exactly one peer acts, and logs a
warning naming the node, the instances and the fenced host. nova's
resource tracker then moves the compute node record (same UUID, same
resource provider). A host that is merely down (missed heartbeats) is not
fenced: nothing moves until it is forced down. Every peer should use the
same value.

Possible values:

* ``manual`` (default): never move instances by themselves; use
  ``nova-ironic-multi takeover --from HOST --to HOST --execute``. The
  default so that an upgrade changes nothing: enable ``fenced`` once a
  forced down host is sure to be off at your site (an operator's
  procedure or a monitor that powers the host off before it forces the
  service down), as nova's evacuate assumes too.
* ``fenced``: take over the instances of forced down hosts. A host forced
  down while it still runs stops managing the instances taken from it
  from its next period, but actions it had under way may still reach
  their nodes: fence only hosts that are off.

Related options:

* ``[DEFAULT] service_down_time``: a merely down host is never taken over.
"""),
]

drain_opts = [
    cfg.BoolOpt(
        'drain_on_stop',
        default=False,
        mutable=True,
        help="""
Hand this host's instances over to its peers when nova-compute stops, for a
host removed from the fleet on purpose (scale-in).

A node that carries an instance stays with the instance's host, so the
instances of a host that is gone cannot be rebooted, stopped or deleted.
With this option set, SIGTERM disables the host's nova-compute service
(with a reason naming this option), so it takes no new build and its peers
take its free nodes; nova lets the operations under way finish (``[DEFAULT]
manager_shutdown_timeout``); then each node with one of its instances (or an
instance nova deleted while it was down) goes, with its instances, to the
live peer the ring names for it without this host, among the peers in the
same partition and availability zone. The peer manages it from its next
period. No fence is needed: the host stops acting before it hands over.
Started again, the host enables its service if the drain disabled it; the
instances stay with the peers.

Read when the service stops: set it (and send SIGHUP) just before removing
a host, or keep it on in a group whose every stop is a removal. Every stop
drains while it is set, a restart included.

Possible values:

* ``false`` (default): a stopped host keeps its instances until it starts
  again or is fenced and taken over.
* ``true``: hand the instances over on every stop.

Related options:

* ``[DEFAULT] manager_shutdown_timeout``: how long nova waits for the
  operations under way; the hand-over gets what nova keeps for its
  clean-up (at most 20 seconds).
* ``[DEFAULT] graceful_shutdown_timeout``: the process is killed after it.
* ``takeover``: the peers' automatic takeover of a fenced (dead) host.
"""),
]
