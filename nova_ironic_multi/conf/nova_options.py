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
"""nova's ``[ironic]`` options: what each does with this driver.

A host moved from nova's in-tree ``ironic.IronicDriver`` keeps its
``[ironic]`` section. Most options mean here what they mean there; the few
whose effect differs are listed in :data:`OPTIONS` with what this driver
does instead, and :func:`warn_differences` logs one WARNING per such option
that the configuration files set, when nova-compute starts. The
configuration guide's table says the same for every option.

The timeouts the two drivers share are read here too:
:func:`console_timeout` and :func:`unprovision_timeout`.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi import compat

LOG = logging.getLogger(__name__)

GROUP = 'ironic'
OURS = 'ironic_multi'

SERIAL = 'serial'
VNC = 'vnc'


def is_set(conf: cfg.ConfigOpts, name: str, group: str) -> bool:
    """Whether ``[group] name`` has a value other than its default."""
    location = conf.get_location(name, group)
    return location is not None and location.location not in (
        cfg.Locations.opt_default, cfg.Locations.set_default)


def in_files(conf: cfg.ConfigOpts, name: str, group: str) -> bool:
    """Whether the operator set ``[group] name`` (files, command line)."""
    location = conf.get_location(name, group)
    return location is not None and location.location.is_user_controlled


def console_timeout(conf: cfg.ConfigOpts, kind: str) -> float | None:
    """Seconds to wait for a console change; None for no bound.

    ``[ironic] serial_console_state_timeout`` or ``vnc_console_state_timeout``
    (0 there is no bound, as in nova's in-tree driver). The deprecated
    ``[ironic_multi] console_timeout`` still applies where the ``[ironic]``
    option is not set.
    """
    name = '%s_console_state_timeout' % kind
    ours = conf[OURS].console_timeout
    if ours is not None and not (compat.defines(conf, GROUP, name) and
                                 is_set(conf, name, GROUP)):
        return float(ours)
    value = compat.ironic_option(conf, name)
    return float(value) if value else None


def in_tree_teardown_wait(conf: cfg.ConfigOpts) -> float:
    """How long nova's in-tree driver waits for a tear-down, in seconds.

    It polls ``api_max_retries + 1`` times, ``api_retry_interval`` apart.
    """
    group = conf[GROUP]
    return float((group.api_max_retries + 1) * group.api_retry_interval)


def unprovision_timeout(conf: cfg.ConfigOpts) -> float | None:
    """Seconds to wait for a tear-down; None for no bound.

    ``[ironic_multi] unprovision_timeout`` (0: no bound), but never less
    than nova's in-tree driver waits with the same ``[ironic]`` options,
    so that a configuration tuned to out-wait Ironic there does here too.
    """
    ours = conf[OURS].unprovision_timeout
    if not ours:
        return None
    return max(float(ours), in_tree_teardown_wait(conf))


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``[ironic]`` option: its effect in nova's driver and here."""

    name: str
    in_tree: str
    here: str
    #: Given the configuration and this host, what this driver does
    #: differently when the option is set; None when it does not differ.
    differs: Callable[[cfg.ConfigOpts, str], str | None] | None = None


def _always(text: str) -> Callable[[cfg.ConfigOpts, str], str | None]:
    return lambda conf, host: text


def _peer_list(conf: cfg.ConfigOpts, host: str) -> str | None:
    group = conf[GROUP]
    peers = {p.strip().lower() for p in group.peer_list if p.strip()}
    if not peers:
        return None
    why = []
    if group.conductor_group is None:
        why.append('it applies without [ironic] conductor_group, where '
                   'nova\'s driver ignores it: only the listed hosts share '
                   'the nodes')
    if group.shard:
        why.append('with [ironic] shard set it divides that shard between '
                   'the listed hosts, where nova\'s driver ignores it')
    if host.lower() not in peers:
        why.append('it does not list this host (%s), which nova\'s driver '
                   'refuses; this host then claims no free node and keeps '
                   'only the nodes of its own instances' % host)
    return '; '.join(why) or None


def _shard(conf: cfg.ConfigOpts, host: str) -> str | None:
    if conf[GROUP].shard and conf[GROUP].peer_list:
        return ('with [ironic] peer_list also set, the shard\'s nodes are '
                'divided between the listed hosts; nova\'s driver manages '
                'the whole shard from this host alone')
    return None


_RETRY_SCOPE = (
    'never inside nova\'s periodic tasks or start-up, never a request that '
    'changes Ironic and may have reached it, and never through '
    'keystoneauth itself (see the retry section of the configuration '
    'guide)')

SAME = 'The same.'

OPTIONS: tuple[Option, ...] = (
    Option(
        'api_max_retries',
        'How many times the tear-down of a deleted instance is polled '
        '(the wait is (api_max_retries + 1) x api_retry_interval seconds).',
        'How many times a request on a node locked by a conductor (409) is '
        'retried, and a failed connection or 503 unless connect_retries / '
        'status_code_retries are set; the tear-down wait is never shorter '
        'than the in-tree one.',
        _always('it counts the retries of a request on a locked node (and '
                'of a failed connection or 503), not tear-down polls; the '
                'tear-down wait is [ironic_multi] unprovision_timeout, '
                'never less than (api_max_retries + 1) x '
                'api_retry_interval')),
    Option(
        'api_retry_interval',
        'The interval of every poll: deploy, tear-down, power, rescue.',
        'The delay between two retries of a request; polls use '
        '[ironic_multi] poll_interval. Part of the lower bound of the '
        'tear-down wait.',
        _always('it is the delay between retries of a request, not the '
                'poll interval ([ironic_multi] poll_interval polls); it '
                'still sizes the lower bound of the tear-down wait')),
    Option('serial_console_state_timeout',
           'Bound of the wait for a serial console change; 0: no bound.',
           SAME),
    Option('vnc_console_state_timeout',
           'Bound of the wait for a VNC console change; 0: no bound.',
           SAME),
    Option('conductor_group',
           'Only nodes of this conductor group are managed.',
           'The same; it must equal [ironic_multi] partition_key if both '
           'are set.'),
    Option('shard',
           'Only nodes of this shard are managed, by this host alone '
           '(peer_list ignored).',
           'The same without peer_list; with peer_list the listed hosts '
           'divide the shard. Excludes [ironic_multi] divide = shards.',
           _shard),
    Option('peer_list',
           'With conductor_group: the hosts dividing the group\'s nodes; '
           'ignored without conductor_group or with shard; the service '
           'refuses to start if the list lacks this host.',
           'The hosts dividing the nodes in scope, whether or not '
           'conductor_group or shard is set; a list without this host is '
           'accepted (the host claims no free node). Same as '
           '[ironic_multi] peer_list.',
           _peer_list),
    Option('connect_retries',
           'Every request is repeated on a failed connection, including '
           'one dropped after it was sent.',
           'Retries of a failed connection, ' + _RETRY_SCOPE + '.',
           _always('it retries a failed connection only where the request '
                   'may be repeated: ' + _RETRY_SCOPE)),
    Option('connect_retry_delay',
           'Delay between connection retries (unset: back-off).',
           'The same, for the retries connect_retries allows.',
           _always('it applies only to the retries connect_retries allows: '
                   + _RETRY_SCOPE)),
    Option('status_code_retries',
           'Every request is repeated on a status of '
           'retriable_status_codes.',
           'Retries of a 503, and for reads of any status of '
           'retriable_status_codes, ' + _RETRY_SCOPE + '.',
           _always('it retries a 503 (Ironic did not act), and other '
                   'listed statuses for reads only: ' + _RETRY_SCOPE)),
    Option('status_code_retry_delay',
           'Delay between status retries (unset: back-off).',
           'The same, for the retries status_code_retries allows.',
           _always('it applies only to the retries status_code_retries '
                   'allows: ' + _RETRY_SCOPE)),
    Option('retriable_status_codes',
           'The statuses repeated (default 503).',
           'The statuses retried for reads; a request that changes Ironic '
           'is retried only on 503.',
           _always('a request that changes Ironic is retried only on 503 '
                   '(a 502 or 504 does not say whether Ironic acted); the '
                   'other listed statuses are retried for reads')),
    Option('timeout',
           'Bound of each request; unset: none.',
           'The same; unset: [ironic_multi] request_timeout (60 s).'),
)

#: Options whose effect is the same; listed so that the table is complete.
SAME_AS_IN_TREE = (
    # keystoneauth session
    'cafile', 'certfile', 'keyfile', 'insecure', 'collect_timing',
    'split_loggers', 'tls_ciphers', 'tls_min_version',
    # keystoneauth authentication
    'auth_type', 'auth_section', 'auth_url', 'system_scope', 'domain_id',
    'domain_name', 'project_id', 'project_name', 'project_domain_id',
    'project_domain_name', 'trust_id', 'user_id', 'username',
    'user_domain_id', 'user_domain_name', 'password',
    # keystoneauth adapter: finding the endpoint
    'service_type', 'service_name', 'valid_interfaces', 'region_name',
    'endpoint_override', 'version', 'min_version', 'max_version',
)


def covered() -> frozenset[str]:
    """Every ``[ironic]`` option this module accounts for."""
    return frozenset(o.name for o in OPTIONS) | frozenset(SAME_AS_IN_TREE)


def _value(conf: cfg.ConfigOpts, name: str) -> Any:
    value = conf[GROUP][name]
    return ','.join(str(v) for v in value) if isinstance(
        value, list) else value


def differences(conf: cfg.ConfigOpts, host: str) -> list[tuple[str, str]]:
    """What this driver does instead, per option set that differs.

    (option, text) for each ``[ironic]`` option set in the files whose
    effect differs from nova's in-tree driver.
    """
    found = []
    for option in OPTIONS:
        if (option.differs is None or
                not compat.defines(conf, GROUP, option.name) or
                not in_files(conf, option.name, GROUP)):
            continue
        instead = option.differs(conf, host)
        if instead:
            found.append((option.name, instead))
    return found


def warn_differences(conf: cfg.ConfigOpts, host: str) -> None:
    """One WARNING per ``[ironic]`` option set whose effect differs."""
    for name, instead in differences(conf, host):
        LOG.warning('[ironic] %(name)s = %(value)s is set, and '
                    'nova-ironic-multi does not use it as nova\'s in-tree '
                    'Ironic driver does: %(instead)s. See "nova\'s [ironic] '
                    'options" in the configuration guide.',
                    {'name': name, 'value': _value(conf, name),
                     'instead': instead})
