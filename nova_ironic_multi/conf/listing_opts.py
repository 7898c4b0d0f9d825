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
"""``[ironic_multi]`` options of how a period reads the nodes from Ironic."""

from oslo_config import cfg

OPTS = [
    cfg.StrOpt(
        'listing',
        default='full',
        choices=[
            ('full', 'Every period lists the nodes it needs from Ironic.'),
            ('delta', 'A period reads only the nodes Ironic changed since '
                      'the last one, with periodic checks and resyncs.'),
        ],
        mutable=True,
        help="""
How a period reads its nodes from Ironic.

With ``full`` every period lists every node it needs (the whole scope with
``divide = nodes``; its shards, the nodes without a shard and the nodes of
its instances with ``divide = shards``). With ``delta`` the host keeps what
it listed and, each period, reads only the nodes Ironic changed since the
last period (one page of nodes sorted by ``updated_at``, newest first,
until the page reaches the last period's time, checked by reading that
node's ``updated_at``), and applies them. The division is the same as with
``full``: a node whose change moves it out of a listing leaves the kept
copy, one that moves in joins it.

Ironic does not mark every change: deleting a node and writing traits
straight into its database leave ``updated_at`` alone. A list of node UUIDs
every ``delta_check_periods`` periods catches deleted and newly enrolled
nodes, and a full listing every ``delta_resync_periods`` periods catches
everything else. A full listing also runs at start, when the scope or
``divide`` changes, and whenever the change feed cannot be trusted (the
page never reaches the last period's time, a read fails mid-way, Ironic's
clocks disagree by more than ``delta_overlap``).

Reloaded on SIGHUP; each host may choose for itself (the division does not
depend on it).

Possible values:

* ``full`` (default): simplest; Ironic serves one full listing per host and
  period (``divide = nodes``) or about one per fleet (``divide = shards``).
* ``delta``: for large fleets, where a full listing costs Ironic seconds of
  CPU per period; see "Reading only what changed" in the operations guide
  for the figures.

Related options:

* ``delta_overlap``, ``delta_check_periods``, ``delta_resync_periods``
"""),
    cfg.IntOpt(
        'delta_overlap',
        default=60,
        min=0,
        max=3600,
        mutable=True,
        help="""
With ``listing = delta``: seconds before the last period's start that a
period still reads changes from.

It covers the skew between the clocks of Ironic's API and conductor
processes (``updated_at`` is written by whichever process changed the
node; the period's time is taken from the ``Date`` of Ironic's answer) and
changes committed a little after the time they carry. A change read twice
costs nothing; a change older than the overlap when it becomes visible is
missed until the next check or resync.

Possible values:

* Seconds, 0 to 3600. Keep it above the largest clock skew between
  Ironic's hosts (NTP keeps it well under a second).

Related options:

* ``listing``
"""),
    cfg.IntOpt(
        'delta_check_periods',
        default=5,
        min=1,
        mutable=True,
        help="""
With ``listing = delta``: every this many periods, list the UUIDs of the
nodes the host keeps (the same filters, only the ``uuid`` field), to catch
nodes deleted or enrolled without a change Ironic marks.

Until that check, a deleted node stays among the host's nodes (a build
scheduled to it fails and is rescheduled) and a node enrolled but never
changed since is not yet managed.

Possible values:

* A number of periods, 1 or more (1: every period).

Related options:

* ``listing``, ``delta_resync_periods``
"""),
    cfg.IntOpt(
        'delta_resync_periods',
        default=60,
        min=1,
        mutable=True,
        help="""
With ``listing = delta``: every this many periods, list every node in full
again, to catch changes Ironic does not mark at all (traits written
straight into its database) and anything the change feed missed.

Possible values:

* A number of periods, 1 or more (1: a full listing every period, as with
  ``listing = full``).

Related options:

* ``listing``, ``delta_check_periods``
"""),
]
