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
"""Whether a tooz back end can hold the groups of ``membership_driver = tooz``.

Checked without reaching the back end (an outage may end; a wrong URL, a
missing client library or a driver without groups never fixes itself):

* the URL is set and its scheme names an installed tooz driver;
* the driver's client library imports;
* the driver implements tooz's group API (join, members, capabilities);
* its members expire: a member timeout this module knows where to set
  (:data:`TIMEOUT_PARAMETER`), or a dead host would stay a member.

Which tooz drivers qualify, and what ``tooz_member_timeout`` becomes for
each, is in the operations guide ("tooz back ends").
"""

from __future__ import annotations

import importlib.metadata
from typing import Any
from urllib import parse

from tooz import coordination

from nova_ironic_multi import compat

OPTION = '[ironic_multi] tooz_backend_url'

#: tooz's entry point namespace of drivers, keyed by URL scheme.
NAMESPACE = 'tooz.backends'

#: The client library of each driver, and tooz's extra that brings it.
CLIENTS = {
    'redis': ('redis', 'redis'),
    'etcd3+http': ('etcd3gw', 'etcd3gw'),
    'etcd3+https': ('etcd3gw', 'etcd3gw'),
    'zookeeper': ('kazoo', 'zookeeper'),
    'kazoo': ('kazoo', 'zookeeper'),
    'memcached': ('pymemcache', 'memcached'),
    'mysql': ('PyMySQL', 'mysql'),
    'postgresql': ('psycopg2', 'postgresql'),
    'ipc': ('sysv-ipc', 'ipc'),
    'kubernetes': ('kubernetes and sherlock', 'kubernetes'),
}

#: Where the member timeout goes in the URL, per scheme: the drivers whose
#: members expire on a TTL read ``membership_timeout``; ZooKeeper's members
#: are ephemeral nodes of a session, and the file driver's are files whose
#: age counts: both read ``timeout``.
TIMEOUT_PARAMETER = {
    'redis': 'membership_timeout',
    'etcd3+http': 'membership_timeout',
    'etcd3+https': 'membership_timeout',
    'memcached': 'membership_timeout',
    'zookeeper': 'timeout',
    'kazoo': 'timeout',
    'file': 'timeout',
}

#: Drivers whose groups only the processes of one machine share.
ONE_MACHINE = frozenset(['file', 'ipc'])

_GROUP_API = ('join_group', 'leave_group')


class Unusable(ValueError):
    """The back end cannot work; the message names the option and the fix."""


def schemes() -> list[str]:
    """The URL schemes of the installed tooz drivers, sorted."""
    return sorted({ep.name for ep in
                   importlib.metadata.entry_points(group=NAMESPACE)})


def supports_groups(driver: type) -> bool:
    """Whether a tooz driver class implements the group API we use."""
    base = coordination.CoordinationDriver
    return all(getattr(driver, name, None) is not getattr(base, name)
               for name in _GROUP_API + compat.group_read_api())


def driver_class(url: str | None) -> type:
    """The tooz driver class for ``url``, checked as the module says.

    :raises Unusable: the URL is missing, or its back end cannot work.
    """
    fix = ('Fix: set it to a tooz back end with groups, for example '
           'redis://127.0.0.1:6379 or etcd3+http://127.0.0.1:2379.')
    if not url:
        raise Unusable('[ironic_multi] membership_driver = tooz needs %s, '
                       'which is not set. %s' % (OPTION, fix))
    scheme = parse.urlsplit(url).scheme
    found = [ep for ep in importlib.metadata.entry_points(group=NAMESPACE)
             if ep.name == scheme]
    if not found:
        raise Unusable('%s: %r is not the scheme of an installed tooz '
                       'driver (installed: %s). %s'
                       % (OPTION, scheme, ', '.join(schemes()), fix))
    try:
        cls: Any = found[0].load()
    except ImportError as e:
        package, extra = CLIENTS.get(scheme, (e.name or 'its client', ''))
        how = (" (pip install 'tooz[%s]')" % extra) if extra else ''
        raise Unusable(
            '%s: the tooz driver for %s:// cannot load its client library '
            '(%s). Fix: install %s on this host%s, or use another back '
            'end.' % (OPTION, scheme, e, package, how)) from e
    if not supports_groups(cls):
        raise Unusable(
            '%s: the tooz driver for %s:// has no groups with heartbeats, '
            'which membership_driver = tooz needs. Fix: use redis://, '
            'etcd3+http://, zookeeper:// or memcached://.'
            % (OPTION, scheme))
    if scheme not in TIMEOUT_PARAMETER:
        # Members that never expire: a host that dies stays a member, and
        # its share of the free nodes with it, for good.
        raise Unusable(
            '%s: the members of a tooz %s:// group do not expire by any '
            'timeout this driver knows how to set, so a host that dies '
            'would keep its free nodes for good. Fix: use redis://, '
            'etcd3+http://, zookeeper:// or memcached://.'
            % (OPTION, scheme))
    driver: type = cls
    return driver


def check(url: str | None) -> None:
    """Whether ``url`` can work (see the module).

    :raises Unusable: it cannot, and the message says how to fix it.
    """
    driver_class(url)


def one_machine(url: str) -> bool:
    """Whether the back end of ``url`` only reaches one machine's processes."""
    return parse.urlsplit(url).scheme in ONE_MACHINE


def with_member_timeout(url: str, member_timeout: int) -> str:
    """``url`` with the member timeout, unless the URL sets its own."""
    parsed = parse.urlsplit(url)
    parameter = TIMEOUT_PARAMETER.get(parsed.scheme, 'membership_timeout')
    query = parse.parse_qs(parsed.query)
    if parameter not in query:
        query[parameter] = [str(member_timeout)]
    return parse.urlunsplit(parsed._replace(
        query=parse.urlencode(query, doseq=True)))
