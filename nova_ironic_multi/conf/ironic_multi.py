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
"""The ``[ironic_multi]`` option group.

The connection to Ironic is not configured here: the driver reuses nova's
``[ironic]`` keystoneauth and endpoint options, so moving a host from the
in-tree driver changes only ``compute_driver``.
"""

from oslo_config import cfg

from nova_ironic_multi.conf import hosts_opts
from nova_ironic_multi.conf import listing_opts
from nova_ironic_multi.conf import status_opts
from nova_ironic_multi.conf import wait_opts

GROUP = cfg.OptGroup(
    'ironic_multi',
    title='nova-ironic-multi options',
    help="""
Options of the nova-ironic-multi compute driver
(``compute_driver = nova_ironic_multi.IronicDriver``): how Ironic nodes are
divided between several nova-compute services, and how long the driver waits
for Ironic. The connection to Ironic itself uses nova's ``[ironic]`` options.
""")

PARTITION_KEY_REGEX = r'^[a-zA-Z0-9_.-]*$'

partition_opts = [
    cfg.StrOpt(
        'partition_key',
        default=None,
        mutable=True,
        max_length=255,
        regex=PARTITION_KEY_REGEX,
        help="""
The Ironic conductor group whose nodes this service may manage.

When set, only nodes whose ``conductor_group`` matches (case-insensitively)
are considered, and the nodes are divided only between the hosts in
``peer_list``. The value is checked against every node Ironic returns, not
only sent as a filter. Reloaded on SIGHUP.

Possible values:

* Unset (the default): nodes of every conductor group are eligible.
* The empty string (``partition_key = ""``): only nodes in Ironic's default
  conductor group. This differs from leaving the option unset.
* A group name of up to 255 letters, digits, ``_``, ``.`` or ``-``.

Related options:

* ``peer_list``: required when this option is set, unless
  ``membership_driver = tooz`` (its groups are per conductor group);
  otherwise nova-compute refuses to start.
* ``[ironic] conductor_group``: nova's own option for the same purpose. If
  both are set they must be equal; otherwise nova-compute refuses to start.
"""),
    cfg.ListOpt(
        'peer_list',
        default=[],
        mutable=True,
        help="""
The nova-compute hosts that share the nodes selected by ``partition_key``.

Only hosts that are listed here and whose nova-compute service is up take
part in the division, so hosts that serve other conductor groups are never
counted. Host names are compared case-insensitively. Reloaded on SIGHUP
(nova's ``[ironic] peer_list`` is applied at start only: a reload that
changes it is refused whole).

Possible values:

* An empty list (the default): with no ``partition_key``, the peers are
  found by the ``membership_driver``.
* A comma-separated list of host names, normally including this host's
  ``[DEFAULT] host``. A list without this host is accepted: the host then
  claims no free node and keeps only the nodes of its own instances (how a
  host leaves a group by SIGHUP). A list with an empty entry, or with two
  entries that differ only in case, is refused.

Related options:

* ``partition_key``: when it is set this list must not be empty, unless
  ``membership_driver = tooz``.
* ``[ironic] peer_list``: nova's deprecated option for the same purpose. If
  both are set they must name the same hosts.
"""),
    cfg.StrOpt(
        'divide',
        default='nodes',
        choices=[
            ('nodes', 'Every host lists every node in scope; the ring '
                      'divides the nodes.'),
            ('shards', 'The ring divides Ironic shards; every host lists '
                       'only the nodes of its shards, the nodes without a '
                       'shard and the nodes of its own instances.'),
        ],
        mutable=True,
        help="""
What the ring divides between the peers, and so what each host lists from
Ironic every period.

With ``nodes`` every host lists every node in scope, and Ironic serves as
many full listings per period as there are hosts. With ``shards`` the ring
maps Ironic shard names (the node ``shard`` field, Ironic API 1.82) to the
peers and each host lists only its shards' nodes, the nodes without a shard
(divided node by node, as with ``nodes``) and the nodes of its own
instances wherever they are: Ironic serves about one full listing per
period whatever the number of hosts. The three ownership rules are the same
in both modes. Every peer must use the same value; reloaded on SIGHUP
together with ``partition_key`` and ``peer_list``.

Possible values:

* ``nodes`` (default): today's division, node by node.
* ``shards``: divide by shard. nova-compute refuses to start, and a reload
  is rejected, when nova's ``[ironic] shard`` is also set; a host whose
  Ironic lacks API 1.82 manages nothing new and says why (it never widens
  to every node).

Related options:

* ``[ironic] shard``: nova's static one-compute-per-shard option; it
  excludes ``divide = shards``.
* ``ring_algorithm``: with ``balanced`` the shards are weighed by their
  node counts.
* ``nova-ironic-multi shards plan|apply`` labels nodes with shards.
"""),
    cfg.StrOpt(
        'membership_driver',
        default='servicegroup',
        help="""
How this service learns which peer nova-compute services are alive.

Possible values:

* ``servicegroup`` (default): the nova-compute services that run this
  driver (each publishes a marker in placement) and are up and enabled
  according to nova's servicegroup API (``service_down_time`` and
  ``forced_down`` count).
* ``static``: the hosts of ``peer_list`` that are up.
* ``tooz``: the members of a tooz group that keep heartbeating, so a dead
  host leaves within ``tooz_member_timeout`` seconds.
* The name of any other plugin installed in the
  ``nova_ironic_multi.membership`` entry point namespace.

Related options:

* ``peer_list``, ``tooz_backend_url``
"""),
    cfg.StrOpt(
        'ring_algorithm',
        default='compatible',
        help="""
The algorithm that maps each free Ironic node to one of the live peers.

Every peer must use the same algorithm and exponent, or two hosts may claim
the same node.

Possible values:

* ``compatible`` (default): exactly the mapping of nova's in-tree Ironic
  driver at the same exponent, so hosts can be moved from the in-tree driver
  one at a time.
* ``balanced``: a mapping that spreads nodes far more evenly and moves few
  nodes when a peer joins or leaves. Use it for new fleets.
* The name of any other plugin installed in the ``nova_ironic_multi.rings``
  entry point namespace.

Related options:

* ``hash_partition_exponent``
"""),
    cfg.IntOpt(
        'hash_partition_exponent',
        default=5,
        min=1,
        max=10,
        help="""
The number of hash ring buckets per peer, as a power of two.

With the ``compatible`` ring each peer is placed on the ring ``2 **
hash_partition_exponent`` times; nova's in-tree driver uses 5 (32 buckets),
so keep 5 while migrating from it. The ``balanced`` ring places each peer
``64 * 2 ** hash_partition_exponent`` times (2048 at the default, about
24 bytes each); its balance comes from its capacity cap, so the default is
right for fleets of up to thousands of peers.

Possible values:

* An integer from 1 to 10.

Related options:

* ``ring_algorithm``
"""),
]

tooz_opts = [
    cfg.StrOpt(
        'tooz_backend_url',
        secret=True,
        help="""
The tooz coordination back end used by ``membership_driver = tooz``.

It must be a tooz driver with groups, installed with its client library:
otherwise nova-compute refuses to start, and a reload to it is refused. It
is not reached at start: an outage makes the periods not ready until it
ends. Read at start only.

Possible values:

* ``redis://HOST:6379`` (client ``redis``),
  ``etcd3+http://HOST:2379`` (``etcd3gw``), ``zookeeper://HOST:2181``
  (``kazoo``) or ``memcached://HOST:11211`` (``pymemcache``); ``pip install
  'tooz[etcd3gw]'`` and so on bring the client.
* ``file://PATH`` for the processes of one machine only (a test bed).
* Not ``ipc``, ``mysql``, ``postgresql`` or ``kubernetes``: they have no
  groups.

Related options:

* ``membership_driver``, ``tooz_group``, ``tooz_heartbeat_interval``,
  ``tooz_member_timeout``
"""),
    cfg.StrOpt(
        'tooz_group',
        default='nova-ironic-multi',
        regex=r'^[a-zA-Z0-9_.-]+$',
        help="""
The name of the tooz group the peers join. The ``partition_key`` in force is
appended, so peers of different conductor groups never share a group.

Possible values:

* Letters, digits, ``_``, ``.`` or ``-``.

Related options:

* ``tooz_backend_url``
"""),
    cfg.FloatOpt(
        'tooz_heartbeat_interval',
        default=1.0,
        min=0.1,
        max=60.0,
        help="""
Seconds between two heartbeats of this service to the tooz back end.

Possible values:

* A number from 0.1 to 60; it must be well below ``tooz_member_timeout``.

Related options:

* ``tooz_member_timeout``
"""),
    cfg.IntOpt(
        'tooz_member_timeout',
        default=10,
        min=1,
        max=3600,
        help="""
Seconds after its last heartbeat at which a peer is no longer a member.

This bounds how long the free nodes of a dead host stay unmanaged. It is
added to ``tooz_backend_url`` unless the URL sets it: as
``membership_timeout`` for Redis (the life of a member's heartbeat key),
etcd3 (its lease TTL) and memcached (its key expiry), as ``timeout`` for
ZooKeeper (the session timeout) and the file driver (a member file's age).

Possible values:

* An integer from 1 to 3600.

Related options:

* ``tooz_heartbeat_interval``
"""),
]

# The options of the waits, and of instances changing hosts, live beside.
ironic_wait_opts = wait_opts.OPTS
takeover_opts = hosts_opts.takeover_opts
drain_opts = hosts_opts.drain_opts
health_opts = status_opts.OPTS
node_listing_opts = listing_opts.OPTS

ALL_OPTS = (partition_opts + tooz_opts + ironic_wait_opts + takeover_opts +
            drain_opts + health_opts + node_listing_opts)


def register_opts(conf: cfg.ConfigOpts) -> None:
    # oslo.config registers a shallow copy of the group, sharing its option
    # table: give every ConfigOpts a group of its own so that overrides on
    # one (tests, the CLI) never show through another.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title,
                                     help=GROUP.help))
    conf.register_opts(ALL_OPTS, group=GROUP)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(GROUP, ALL_OPTS)]
