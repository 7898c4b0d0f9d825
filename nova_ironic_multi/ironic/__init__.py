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
"""Everything that talks to Ironic, through python-ironicclient.

* The connection reuses nova's ``[ironic]`` keystoneauth options; every
  request has a timeout (``[ironic] timeout``, else ``[ironic_multi]
  request_timeout``).
* python-ironicclient's own retries are off: it retries every request
  alike (409s, 503s, connection failures), the reservation included. Here
  one policy, :meth:`Ironic._call`, decides per request, and the counts
  are nova's ``[ironic]`` options as :mod:`nova_ironic_multi.ironic.retries`
  says (``api_max_retries`` / ``api_retry_interval``, and keystoneauth's
  ``connect_retries`` / ``status_code_retries``, which are never given to
  keystoneauth itself):

  - a 409 saying a conductor holds the node's lock (:func:`is_node_locked`)
    is retried, except for the reservation; any other 409 (already
    associated, already attached, a duplicate volume target) is an answer;
  - a transient failure (:func:`is_transient`: a 503, which Ironic answers
    with ``NoFreeConductorWorker`` when its conductors are busy, before it
    acts; or a failed connection, but not an answer that timed out) is
    retried for requests that end the same however often they are asked:
    reads, power on and off, writing instance_info, consoles, removing a
    volume target;
  - a request that changes Ironic and must not reach it twice (provision
    state changes: deploy, rebuild, undeploy, rescue, unrescue; reboot;
    creating a volume target; VIF attach and detach; releasing the node;
    an NMI) is retried only when Ironic surely did not act
    (:func:`did_not_act`: a 503, a refused connection, a name that did not
    resolve, a connect timeout). keystoneauth reports a connection broken
    after the request was sent as the same ``ConnectFailure``; then the
    node is read (:mod:`nova_ironic_multi.ironic.acted`): if Ironic took the
    request it succeeded and is not sent again, if the node shows no trace
    of it it may be asked again, if the node cannot be read the failure
    stands. An NMI leaves no trace: after a lost answer it fails;
  - the reservation PATCH is never retried, on any error: a 409 there is
    the answer (another instance holds the node), and on any other failure
    nova reschedules the server, which beats insisting on one node. An
    answer lost after sending is judged from the node: holding this
    instance, it is reserved;
  - the node listing is not retried either: the periodic refresh is its
    retry, and an outage is reported in the same period instead of holding
    nova's resource tracker for minutes;
  - inside :meth:`Ironic.fail_fast` (nova's resource-tracker period and the
    service's start) no request of that thread is retried, whatever its
    kind: ``GET /v1/shards``, the reads of single nodes, the volume-target
    sweep. The next period is the retry.

  Each retry is logged at DEBUG, exhausted retries at WARNING. The waits
  that poll Ironic (:mod:`nova_ironic_multi.actions.waits`) go on past a failed
  poll until their own timeout.
* Microversions are negotiated once (1.46 at least; 1.82 when Ironic has
  it, for shards).
* The node listing pages with explicit markers and the scope filters on
  every request: Ironic's own ``next`` links drop the filters.
* Errors come out as the exceptions below, never as client or keystoneauth
  ones.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Sequence
import contextlib
import enum
import itertools
import logging as std_logging
import re
import socket
import threading
import time
from typing import Any

from ironicclient import client as ir_client
from ironicclient import exc as ir_exc
from ironicclient.v1 import node as ir_node
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_log import log as logging
import requests
from urllib3 import exceptions as urllib3_exc

from nova_ironic_multi.division import partition
from nova_ironic_multi.ironic import acted
from nova_ironic_multi.ironic import nodeinfo
from nova_ironic_multi.ironic import retries

LOG = logging.getLogger(__name__)

GROUP = 'ironic'
MIN_VERSION = (1, 46)        # conductor_group filter and field
CONDUCTOR_VERSION = (1, 49)  # conductor field
SHARD_VERSION = (1, 82)      # shard filter and field
NEGOTIATE = ['%d.%d' % MIN_VERSION, '%d.%d' % SHARD_VERSION]
#: Shard names per listing request: ``shard=a,b,...`` travels in the URL.
SHARDS_PER_REQUEST = 50
#: The name ``GET /v1/shards`` counts the nodes without a shard under.
UNSHARDED = 'None'


class IronicError(Exception):
    """A call to Ironic failed."""


class IronicUnavailable(IronicError):
    """Ironic cannot be reached, timed out, or answered with a 5xx."""


class NodeNotFound(IronicError):
    """Ironic answered 404 for the node."""


class Conflict(IronicError):
    """Ironic answered 409 (node locked, or a conflicting resource)."""


class BadRequest(IronicError):
    """Ironic answered 400 (invalid request or state transition)."""


class VersionNotSupported(IronicError):
    """Ironic lacks the API microversion a feature needs."""


class IronicMisconfigured(IronicError):
    """nova's ``[ironic]`` options cannot work: fix them, not the network.

    Keystone rejected the credentials, the auth options are incomplete, or
    the service catalog has no Ironic endpoint that the options select.
    Raised when connecting; the message names the options to fix.
    """


#: What an operator checks when Keystone refuses the service user.
CREDENTIAL_OPTIONS = (
    '[ironic] auth_url, auth_type, username, password, user_domain_name, '
    'project_name and project_domain_name (or application_credential_id '
    'and application_credential_secret with auth_type = '
    'v3applicationcredential)')
NO_AUTH = ('No Ironic endpoint: [ironic] has neither endpoint_override nor '
           'auth_type. Set [ironic] endpoint_override, or set %s so that '
           'the endpoint is found in the service catalog.'
           % CREDENTIAL_OPTIONS)
#: What decides which catalog endpoint is Ironic's.
CATALOG_OPTIONS = ('[ironic] service_type, valid_interfaces and region_name '
                   '(or set [ironic] endpoint_override)')


def _keystone_down(error: BaseException) -> bool:
    """Whether ``error`` comes from Keystone being unreachable or failing.

    keystoneauth reports an unreachable ``auth_url`` as a discovery failure
    when it cannot tell the API version from the URL; the connection error
    is then its context. That is an outage, not a configuration error.
    """
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, (ks_exc.ConnectionError, ks_exc.RequestTimeout,
                             ks_exc.HttpServerError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _auth_error(conf: cfg.ConfigOpts, error: Exception) -> IronicError:
    """The exception of this module for a keystoneauth failure."""
    group = conf[GROUP]
    if _keystone_down(error):
        return IronicUnavailable(
            'Keystone at %s cannot be reached or failed: %s'
            % (group.auth_url, error))
    if isinstance(error, (ks_exc.EndpointNotFound, ks_exc.EmptyCatalog,
                          ks_exc.CatalogException)):
        return IronicMisconfigured(
            'The service catalog has no %s endpoint with interface %s in '
            'region %s (%s): check %s.'
            % (group.service_type, ','.join(group.valid_interfaces or ()),
               group.region_name, error, CATALOG_OPTIONS))
    if isinstance(error, ks_exc.MissingAuthPlugin):
        return IronicMisconfigured(NO_AUTH)
    if isinstance(error, (ks_exc.OptionError, ks_exc.AuthPluginException)):
        return IronicMisconfigured(
            'The [ironic] authentication options are incomplete (%s): set '
            '%s.' % (error, CREDENTIAL_OPTIONS))
    return IronicMisconfigured(
        'Keystone at %s rejected the service user of [ironic] (auth_type '
        '%s): %s. Check %s.'
        % (group.auth_url, group.auth_type, error, CREDENTIAL_OPTIONS))


class Retry(enum.Flag):
    """What a request may be retried on."""

    NEVER = 0
    #: 409: a conductor holds the node's lock; it will let go.
    LOCKED = enum.auto()
    #: :func:`is_transient`: Ironic did not act, asking again may work.
    TRANSIENT = enum.auto()
    #: :func:`did_not_act`: Ironic surely did not act (for requests that
    #: must never reach it twice).
    UNACTED = enum.auto()
    ALWAYS = LOCKED | TRANSIENT
    #: For requests that change Ironic and must not be repeated once it
    #: may have acted (an answer lost after sending is judged from the
    #: node instead).
    ONCE_ACTED = LOCKED | UNACTED


#: Failures after which Ironic most likely has not acted: a 503 (Ironic
#: answers ``NoFreeConductorWorker`` when every conductor worker is busy,
#: and restores the node first) or no connection (refused, reset, timed
#: out connecting).
_TRANSIENT: tuple[type[BaseException], ...] = (
    ir_exc.ServiceUnavailable, ir_exc.ConnectionRefused,
    ks_exc.RetriableConnectionFailure)


def is_transient(error: BaseException) -> bool:
    """Whether asking again may succeed where ``error`` failed.

    Takes client exceptions or this module's (judged by their cause). A
    500, an answer that timed out (keystoneauth reports it as a connect
    timeout, raised while handling the read timeout) or a 4xx is not
    transient: Ironic may have acted, or would answer the same again.
    """
    if isinstance(error, IronicError):
        cause = error.__cause__
        return cause is not None and is_transient(cause)
    if isinstance(error, ks_exc.ConnectTimeout) and isinstance(
            error.__context__, requests.exceptions.ReadTimeout):
        return False
    return isinstance(error, _TRANSIENT)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it, through requests' and urllib3's
    wrappers (which keep the cause as ``reason`` or their first argument).
    """
    seen: BaseException | None = error
    for _ in range(10):
        if seen is None:
            return
        yield seen
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            reason = getattr(seen, 'reason', None)
            if isinstance(reason, BaseException):
                nxt = reason
            elif seen.args and isinstance(seen.args[0], BaseException):
                nxt = seen.args[0]
        seen = nxt


def did_not_act(error: BaseException) -> bool:
    """Whether Ironic surely did not act on the request that failed so.

    Ironic answered 503 (``NoFreeConductorWorker``, or Keystone
    unreachable: it answers before acting), or the request never left this
    host: the connection was refused, the name did not resolve, connecting
    timed out. Not a connection that broke after the request was sent
    ("Connection aborted", ``RemoteDisconnected``, a reset): keystoneauth
    reports those as the same ``ConnectFailure``, but Ironic may have acted
    and only its answer was lost.
    """
    if isinstance(error, IronicError):
        cause = error.__cause__
        return cause is not None and did_not_act(cause)
    if isinstance(error, (ir_exc.ServiceUnavailable,
                          ir_exc.ConnectionRefused)):
        return True
    if isinstance(error, ks_exc.ConnectTimeout):
        return isinstance(error.__context__,
                          requests.exceptions.ConnectTimeout)
    if isinstance(error, ks_exc.ConnectFailure):
        return any(isinstance(e, (urllib3_exc.NewConnectionError,
                                  ConnectionRefusedError, socket.gaierror))
                   for e in _chain(error))
    return False


def is_node_locked(error: Conflict) -> bool:
    """Whether a 409 is Ironic's ``NodeLocked``, which a retry may cure.

    (Ironic's error body carries only the message, so the message it is.)
    """
    return 'is locked by host' in str(error)


def failure_kind(error: IronicError) -> retries.Kind:
    """Which retry options size the retries of ``error``."""
    if isinstance(error, Conflict):
        return retries.Kind.LOCKED
    if getattr(error.__cause__, 'http_status', None) is not None:
        return retries.Kind.STATUS
    return retries.Kind.CONNECT


def version_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split('.')
    return int(major), int(minor)


#: The range in python-ironicclient's UnsupportedVersion (wrapped text).
_RANGE = re.compile(r'range\s+is:?\s+(\S+)\s+to\s+(\d+\.\d+)')


def _too_old(endpoint: str, offered: Any) -> str:
    """What an Ironic too old for this driver offers, and what it needs.

    :param offered: the version negotiated, or python-ironicclient's
        ``UnsupportedVersion`` (its message holds the range Ironic offers).
    """
    m = _RANGE.search(str(offered))
    if m:
        what = 'API versions %s to %s' % m.groups()
    elif isinstance(offered, str):
        what = 'API %s at most' % offered
    else:
        what = 'no API version this driver can use (%s)' % offered
    return ('Ironic at %s offers %s; this driver needs %d.%d or newer '
            '(%d.%d for [ironic_multi] divide = shards). Fix: upgrade '
            'Ironic (nova-compute uses the new version without a restart) '
            'or point [ironic] at a newer one.'
            % ((endpoint, what) + MIN_VERSION + SHARD_VERSION))


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn client and keystoneauth exceptions into this module's."""
    try:
        yield
    except ir_exc.NotFound as e:
        raise NodeNotFound('%s: %s' % (what, e)) from e
    except ir_exc.Conflict as e:
        raise Conflict('%s: %s' % (what, e)) from e
    except ir_exc.BadRequest as e:
        raise BadRequest('%s: %s' % (what, e)) from e
    except ir_exc.UnsupportedVersion as e:
        raise VersionNotSupported('%s: %s' % (what, e)) from e
    except (ir_exc.HttpServerError, ir_exc.ServiceUnavailable,
            ir_exc.ConnectionRefused) as e:
        raise IronicUnavailable('%s: %s' % (what, e)) from e
    except ir_exc.ClientException as e:
        raise IronicError('%s: %s' % (what, e)) from e
    except ks_exc.ClientException as e:
        # Connection refused, timeouts, catalog and discovery failures.
        raise IronicUnavailable('%s: %s' % (what, e)) from e


class _ClientRetryLog(std_logging.Filter):
    """Drops python-ironicclient's own retry-loop lines.

    With its retries off, the client logs every 503 or failed connection
    at ERROR ("Attempt 1 of 1") before raising it, even when
    :meth:`Ironic._call` then retries and succeeds; ``_call`` logs what
    really happens.
    """

    def filter(self, record: std_logging.LogRecord) -> bool:
        return not str(record.msg).startswith(
            'Error contacting Ironic server')


_CLIENT_LOG = 'ironicclient.common.http'


def _quiet_client_retry_log() -> None:
    logger = std_logging.getLogger(_CLIENT_LOG)
    if not any(isinstance(f, _ClientRetryLog) for f in logger.filters):
        logger.addFilter(_ClientRetryLog())


class _Filters:
    """A listing's filters as a log shows them, formatted only if logged."""

    def __init__(self, filters: dict[str, Any]) -> None:
        self._filters = filters

    def __str__(self) -> str:
        shown = ['%s=%s' % (k, ','.join(v) if isinstance(v, list) else v)
                 for k, v in sorted(self._filters.items()) if k != 'fields']
        return ', '.join(shown) or 'every node'


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
        return response, body

    def page(self, **kwargs: Any) -> tuple[list[Any], bool]:
        """One page of ``node.list(**kwargs)`` and whether more follow.

        "More" unless the answer proved otherwise.
        """
        self._local.more = True
        found = self._nodes.list(**kwargs)
        return found, self._local.more


class Ironic:
    """A thread-safe, lazily connected Ironic API client."""

    def __init__(self, conf: cfg.ConfigOpts,
                 sleep: Any = time.sleep) -> None:
        self._conf = conf
        self._lock = threading.Lock()
        self._client: Any = None
        self._version: tuple[int, int] | None = None
        #: ``(session, endpoint)`` of the last connection, for
        #: :meth:`offers`.
        self._where: tuple[Any, str] | None = None
        self._sleep = sleep
        #: ``fast``: how deep this thread is in :meth:`fail_fast` blocks.
        self._local = threading.local()
        _quiet_client_retry_log()
        #: Requests sent, by kind; read by benchmarks and logs.
        self.requests: collections.Counter[str] = collections.Counter()

    # Connection ---------------------------------------------------------

    def _session_and_endpoint(self) -> tuple[Any, str]:
        """Authenticate and find Ironic, as nova's ``[ironic]`` says.

        Without ``endpoint_override`` the endpoint comes from the service
        catalog of the token (``service_type``, ``valid_interfaces``,
        ``region_name``), so this is also the first request to Keystone.

        :raises IronicMisconfigured: Keystone refused the credentials, the
            options are incomplete, or the catalog has no matching Ironic.
        :raises IronicUnavailable: Keystone cannot be reached.
        """
        conf = self._conf
        try:
            auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
            session = ks_loading.load_session_from_conf_options(
                conf, GROUP, auth=auth)
            if not conf[GROUP].timeout:
                session.timeout = conf.ironic_multi.request_timeout
            adapter = ks_loading.load_adapter_from_conf_options(
                conf, GROUP, session=session, auth=auth)
            endpoint = adapter.get_endpoint()
        except ks_exc.ClientException as e:
            raise _auth_error(conf, e) from e
        if not endpoint:
            if auth is None:
                raise IronicMisconfigured(NO_AUTH)
            raise _auth_error(conf, ks_exc.EndpointNotFound())
        return session, endpoint

    def _connect(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            with translated('connecting to Ironic'):
                session, endpoint = self._session_and_endpoint()
            return self._negotiate(session, endpoint)

    def _negotiate(self, session: Any, endpoint: str) -> Any:
        """A client of ``endpoint`` at the highest version both sides know.

        Called with the lock held; the client is kept only on success.

        :raises VersionNotSupported: Ironic offers no version this driver
            can use; the message says which it offers and which it needs.
        """
        with translated('connecting to Ironic'):
            client = ir_client.get_client(
                '1', session=session, endpoint=endpoint,
                # A list negotiates the highest version both sides know.
                os_ironic_api_version=NEGOTIATE,  # type: ignore[arg-type]
                max_retries=0, retry_interval=0)
            self.requests['version'] += 1
            try:
                negotiated = client.negotiate_api_version()
            except ir_exc.UnsupportedVersion as e:
                raise VersionNotSupported(_too_old(endpoint, e)) from e
            # Read by _call(manager='node_pages').
            client.node_pages = NodePages(  # type: ignore[attr-defined]
                client.http_client)
        version = version_tuple(negotiated)
        if version < MIN_VERSION:
            raise VersionNotSupported(_too_old(endpoint, negotiated))
        self._client, self._version = client, version
        self._where = (session, endpoint)
        LOG.info('Connected to Ironic at %(url)s, API %(version)s',
                 {'url': endpoint, 'version': negotiated})
        return client

    def offers(self, needed: tuple[int, int]) -> bool:
        """Whether Ironic's API offers ``needed``, negotiating again if not.

        python-ironicclient keeps the version it first negotiated for the
        life of the client, so an Ironic upgraded since would go unseen
        until nova-compute restarts. When the version in use is older than
        ``needed``, one more negotiation (one request, never retried, as
        inside a period) asks Ironic again; the new client replaces the
        old one only if it connects.
        """
        if self.version >= needed:
            return True
        with self._lock:
            if self._where is None:     # pragma: no cover (connected above)
                return False
            try:
                self._negotiate(*self._where)
            except IronicError as e:
                LOG.debug('Negotiating the Ironic API version again '
                          'failed: %s', e)
            assert self._version is not None
            return self._version >= needed

    def connect(self) -> None:
        """Authenticate, find Ironic and negotiate the version now.

        nova-compute calls this at start so that a wrong ``[ironic]``
        section stops the service with :class:`IronicMisconfigured` instead
        of failing every period.
        """
        self._connect()

    @property
    def version(self) -> tuple[int, int]:
        self._connect()
        assert self._version is not None
        return self._version

    @contextlib.contextmanager
    def fail_fast(self) -> Iterator[None]:
        """Within the block, every request of this thread is asked once.

        For nova's resource-tracker period and the service's start: a 503,
        a refused connection or a connect timeout fails the request at
        once (one attempt, no sleep), so the period reports the outage and
        is not held for ``api_max_retries`` x ``api_retry_interval``
        seconds; the next period asks again. Nests; other threads (a
        deploy, a reboot) keep their retries.
        """
        depth = getattr(self._local, 'fast', 0)
        self._local.fast = depth + 1
        try:
            yield
        finally:
            self._local.fast = depth

    @property
    def failing_fast(self) -> bool:
        """Whether this thread is inside :meth:`fail_fast`."""
        return getattr(self._local, 'fast', 0) > 0

    def _call(self, what: str, method: str, *args: Any,
              retry: Retry = Retry.ALWAYS, manager: str = 'node',
              acted: Callable[[], bool] | None = None,
              **kwargs: Any) -> Any:
        """One API request, retried as ``retry`` allows.

        The only place requests are retried; how often and how far apart
        per kind of failure is :mod:`nova_ironic_multi.ironic.retries` (nova's
        ``[ironic] api_max_retries`` / ``api_retry_interval`` and
        keystoneauth's ``connect_retries`` / ``status_code_retries``
        options). ``retry`` decides whether at all: no option adds a
        retry that ``retry`` forbids, and inside :meth:`fail_fast` nothing
        is retried.

        :param acted: for a request that changes Ironic: reads the node
            and says whether Ironic took the request. Asked when the
            connection failed after the request may have been sent: if
            Ironic took it, the request succeeded (None is returned) and
            is not repeated; if not, it may be asked again.
        """
        budget = retries.Budget(self._conf)
        fast = self.failing_fast
        for attempt in itertools.count(1):
            try:
                call = getattr(getattr(self._connect(), manager), method)
                self.requests[what] += 1
                with translated(what):
                    return call(*args, **kwargs)
            except IronicError as e:
                request = '%s.%s %s' % (manager, method,
                                        args[0] if args else '')
                retriable = self._retriable(e, retry)
                if (not retriable and acted is not None and
                        is_transient(e) and not did_not_act(e)):
                    if self._acted(request.strip(), e, acted):
                        return None
                    # No trace of it in Ironic: asking again is safe
                    # (for a request that may be retried at all).
                    retriable = bool(retry & (Retry.TRANSIENT |
                                              Retry.UNACTED))
                if not retriable:
                    raise
                if fast:
                    LOG.debug('Ironic request %(request)s failed (%(error)s)'
                              '; not retried within a resource-tracker '
                              'period or the start: the next period asks '
                              'again', {'request': request.strip(),
                                        'error': e})
                    raise
                kind = failure_kind(e)
                rule = retries.rule(self._conf, kind)
                delay = budget.next_delay(kind)
                if delay is None:
                    if attempt > 1:
                        LOG.warning(
                            'Ironic request %(request)s still failed after '
                            '%(n)d attempts, giving up (%(options)s): '
                            '%(error)s',
                            {'request': request.strip(), 'n': attempt,
                             'options': rule.options, 'error': e})
                    raise
                LOG.debug('Ironic request %(request)s failed (%(error)s); '
                          'retry %(n)d of %(max)d in %(delay)s s '
                          '(%(options)s)',
                          {'request': request.strip(), 'error': e,
                           'n': budget.used(kind), 'max': rule.retries,
                           'delay': delay, 'options': rule.options})
                self._sleep(delay)
        raise AssertionError('unreachable')

    def _retriable(self, error: IronicError, retry: Retry) -> bool:
        if isinstance(error, Conflict):
            # Only a lock goes away by itself; any other 409 (already
            # associated, a duplicate volume target) would repeat.
            return bool(retry & Retry.LOCKED) and is_node_locked(error)
        if retry & Retry.UNACTED and did_not_act(error):
            return True
        if not retry & Retry.TRANSIENT:
            return False
        return is_transient(error) or self._listed_status_on_read(error)

    @staticmethod
    def _acted(request: str, error: IronicError,
               acted: Callable[[], bool]) -> bool:
        """Whether Ironic took a request whose answer was lost.

        :raises IronicError: ``error``, when the node cannot be read.
        """
        unreadable: IronicError | None = None
        try:
            took = acted()
        except IronicError as e:
            unreadable = e
        if unreadable is not None:
            LOG.warning('Ironic request %(request)s may have been taken '
                        '(the connection failed after sending it: '
                        '%(error)s) and the node cannot be read to tell '
                        '(%(read)s); not repeating it',
                        {'request': request, 'error': error,
                         'read': unreadable})
            raise error
        if took:
            LOG.warning('Ironic request %(request)s: the connection failed '
                        'after sending it (%(error)s), and the node shows '
                        'Ironic took it; not repeating it',
                        {'request': request, 'error': error})
        else:
            LOG.warning('Ironic request %(request)s: the connection failed '
                        'after sending it (%(error)s), and the node shows no '
                        'trace of it; it may be asked again',
                        {'request': request, 'error': error})
        return took

    def _listed_status_on_read(self, error: IronicError) -> bool:
        """A GET answered with a status of ``retriable_status_codes``."""
        cause = error.__cause__
        return (str(getattr(cause, 'method', '')).upper() == 'GET' and
                getattr(cause, 'http_status', None) in
                retries.retriable_status_codes(self._conf))

    # Reading nodes ------------------------------------------------------

    def _fields(self, conductor: bool = False) -> list[str]:
        """Every field a single node read may need.

        ``conductor`` (a read of one node by UUID only: Ironic 39 answers
        500 to a listing asked for it) adds the conductor serving it.
        """
        fields = list(nodeinfo.FIELDS)
        if conductor and self.version >= CONDUCTOR_VERSION:
            fields.append(nodeinfo.CONDUCTOR_FIELD)
        if self.version >= SHARD_VERSION:
            fields.append(nodeinfo.SHARD_FIELD)
        return fields

    def list_nodes(self, scope: partition.Scope,
                   shards: Sequence[str] | None = None,
                   sharded: bool | None = None,
                   with_shard: bool = False,
                   with_group: bool = False) -> list[nodeinfo.NodeInfo]:
        """Every node in ``scope``, one page per request.

        ``shards`` narrows the listing to the nodes of those shards (an
        empty sequence lists nothing, never everything) and ``sharded =
        False`` to the nodes without a shard; both need API 1.82 and add
        the ``shard`` field (``with_shard`` asks for it alone), so the caller
        can check each node; ``with_group`` adds ``conductor_group``. Many
        shard names are listed a batch at a time, so a request's URL stays
        short.

        Pages until Ironic says there is no more (a page without a
        ``next`` link, or an empty page), so the page size is whatever
        Ironic's ``[api] max_limit`` allows and a listing that fits one
        page is one request; duplicates (pages shifting under concurrent
        changes) are dropped. Only the fields a
        period needs are asked for: Ironic's time to serve them bounds the
        refresh. Scope is only a request here: the caller re-checks every
        node.

        :raises VersionNotSupported: the scope needs a filter Ironic lacks;
            managing every node instead would be wrong, so nothing is
            listed.
        """
        by_shard = shards is not None or sharded is not None or with_shard
        if by_shard:
            self.require_shards('Listing nodes by shard')
        if shards is not None:
            names = sorted(set(shards))
            found: list[nodeinfo.NodeInfo] = []
            for start in range(0, len(names), SHARDS_PER_REQUEST):
                found.extend(self._list_pages(
                    scope, by_shard, sharded=sharded,
                    shards=names[start:start + SHARDS_PER_REQUEST],
                    with_group=with_group))
            return found
        return self._list_pages(scope, by_shard, sharded=sharded,
                                with_group=with_group)

    def _list_pages(self, scope: partition.Scope, with_shard: bool,
                    sharded: bool | None = None,
                    shards: list[str] | None = None,
                    with_group: bool = False
                    ) -> list[nodeinfo.NodeInfo]:
        fields = nodeinfo.listing_fields(scope)
        if with_group and 'conductor_group' not in fields:
            fields.append('conductor_group')
        filters: dict[str, Any] = {'fields': fields}
        if with_shard:
            if nodeinfo.SHARD_FIELD not in fields:
                fields.append(nodeinfo.SHARD_FIELD)
            if shards is not None:
                filters['shards'] = shards
            if sharded is not None:
                filters['sharded'] = sharded
        if scope.conductor_group is not None:
            filters['conductor_group'] = scope.conductor_group
        if scope.shard is not None:
            if not self.offers(SHARD_VERSION):
                raise VersionNotSupported(
                    'Ironic API %d.%d cannot filter by shard (needs %d.%d); '
                    'refusing to manage nodes of every shard instead.'
                    % (self.version + SHARD_VERSION))
            filters['shards'] = [scope.shard]
        seen: set[str] = set()
        found: list[nodeinfo.NodeInfo] = []
        marker = None
        for pages in itertools.count(1):
            # limit=None: exactly one request, never a followed "next".
            # Not retried: the next period is the retry, and an outage
            # must not hold nova's resource tracker for minutes.
            page, more = self._call('list', 'page', retry=Retry.NEVER,
                                    manager='node_pages', marker=marker,
                                    limit=None, **filters)
            for node in page:
                if node.uuid not in seen:
                    seen.add(node.uuid)
                    found.append(nodeinfo.NodeInfo.from_api(node))
            if not page or not more:
                LOG.debug('Listed %(n)d Ironic nodes in %(pages)d '
                          'request(s) (%(filters)s)',
                          {'n': len(found), 'pages': pages,
                           'filters': _Filters(filters)})
                return found
            marker = page[-1].uuid
        raise AssertionError('unreachable')

    def require_shards(self, why: str) -> None:
        """Fail closed when Ironic cannot filter or count by shard.

        :param why: the option that needs shards, for the message.
        :raises VersionNotSupported: Ironic's API is older than 1.82 (asked
            again each time, so an upgraded Ironic is enough).
        """
        if not self.offers(SHARD_VERSION):
            raise VersionNotSupported(
                '%s needs Ironic API %d.%d (node shards); this Ironic does '
                'not offer it (API %d.%d in use). Refusing to divide the '
                'listing (it would mean listing every node on every host). '
                'Fix: upgrade Ironic, or set [ironic_multi] divide = nodes.'
                % ((why,) + SHARD_VERSION + self.version))

    def shards(self) -> dict[str, int]:
        """Every shard name with its node count (``GET /v1/shards``).

        One grouped count on Ironic's side. Nodes without a shard are
        counted under the name ``'None'`` (Ironic writes ``str(None)``); a
        shard really called so cannot be told apart, so that name is kept:
        listing it by name returns only the nodes labelled ``None``.

        :raises VersionNotSupported: Ironic lacks API 1.82.
        """
        self.require_shards('Listing shards')
        found = self._call('shards', 'list', manager='shard')
        return {str(s.name): int(s.count) for s in found}

    def get_node(self, node_uuid: str,
                 once: bool = False) -> nodeinfo.NodeInfo:
        """The node; with ``once``, asked once, never retried."""
        return nodeinfo.NodeInfo.from_api(
            self._call('get', 'get', node_uuid,
                       fields=self._fields(conductor=True),
                       retry=Retry.NEVER if once else Retry.ALWAYS))

    def node_exists(self, node_uuid: str) -> bool | None:
        """Whether Ironic has the node; None when Ironic cannot say.

        One request, never retried: nova asks this for every compute node
        no host reports, inside the resource-tracker period, and an answer
        of None (keep the record) is already the safe one. Retrying would
        hold the period for ``api_max_retries`` x ``api_retry_interval``
        seconds per such node during an outage.
        """
        try:
            self._call('get', 'get', node_uuid, retry=Retry.NEVER,
                       fields=['uuid'])
        except NodeNotFound:
            return False
        except IronicError:
            return None
        return True

    def node_for_instance(self,
                          instance_uuid: str) -> nodeinfo.NodeInfo | None:
        """The node an instance is on, or None if Ironic knows of none."""
        try:
            node = self._call('get', 'get_by_instance_uuid', instance_uuid,
                              fields=self._fields())
        except NodeNotFound:
            return None
        return nodeinfo.NodeInfo.from_api(node)

    def get_fields(self, node_uuid: str, fields: list[str]) -> Any:
        """Raw fields of a node (for the rare reads that need more)."""
        return self._call('get', 'get', node_uuid, fields=fields)

    # Changing nodes -----------------------------------------------------

    def _node_fields(self, node_uuid: str, fields: list[str]) -> Any:
        """A read for judging a lost answer (retried like any read)."""
        return self._call('get', 'get', node_uuid, fields=fields)

    def reserve(self, node_uuid: str, instance_uuid: str) -> None:
        """Associate the node with the instance; never retried.

        An answer lost after sending is judged from the node: the node
        holding this instance is a reservation made.

        :raises Conflict: another instance holds the node.
        """
        self._call('reserve', 'update', node_uuid,
                   [{'op': 'add', 'path': '/instance_uuid',
                     'value': instance_uuid}], retry=Retry.NEVER,
                   acted=lambda: self._node_fields(
                       node_uuid, ['instance_uuid']).instance_uuid ==
                   instance_uuid)

    def release(self, node_uuid: str) -> None:
        """Drop the node's instance association and instance_info.

        Not repeated once Ironic may have done it (a repeat is a 400: the
        paths are gone).
        """
        self._call('patch', 'update', node_uuid,
                   [{'op': 'remove', 'path': '/instance_uuid'},
                    {'op': 'remove', 'path': '/instance_info'}],
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: self._node_fields(
                       node_uuid, ['instance_uuid']).instance_uuid is None)

    def patch(self, node_uuid: str, patch: list[dict[str, Any]]) -> None:
        self._call('patch', 'update', node_uuid, patch)

    def validate(self, node_uuid: str) -> dict[str, dict[str, Any]]:
        """Interface name -> ``{'result': bool, 'reason': str}``."""
        result = self._call('validate', 'validate', node_uuid)
        raw = result.to_dict() if hasattr(result, 'to_dict') else result
        return {k: v for k, v in dict(raw).items() if isinstance(v, dict)}

    def set_provision_state(self, node_uuid: str, target: str,
                            **kwargs: Any) -> None:
        """Ask for a provision-state change (deploy, rebuild, ...).

        Retried only when Ironic surely did not act; an answer lost after
        sending is judged from the node's provision state (a repeat would
        be a 400 that fails a deploy under way). A rebuild ends where it
        starts, so the node is read first for it.
        """
        before = (self._node_fields(node_uuid, acted.PROVISION_FIELDS)
                  if acted.needs_before(target) else None)
        self._call('provision', 'set_provision_state', node_uuid, target,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: acted.provision(
                       target, self._node_fields(node_uuid,
                                                 acted.PROVISION_FIELDS),
                       before), **kwargs)

    def set_power_state(self, node_uuid: str, target: str,
                        soft: bool = False,
                        timeout: int | None = None) -> None:
        """Power on, off or reboot.

        On and off end the same however often asked (retried as reads
        are); a reboot is not
        repeated once Ironic may have taken it (the node is read first,
        and a lost answer is judged from its writes since).
        """
        if target == 'reboot':
            # (Whole reads: Ironic serves no updated_at among ``fields``.)
            before = self._call('get', 'get', node_uuid)
            self._call('power', 'set_power_state', node_uuid, target,
                       soft=soft, timeout=timeout, retry=Retry.ONCE_ACTED,
                       acted=lambda: acted.power(
                           target, self._call('get', 'get', node_uuid),
                           before))
            return
        self._call('power', 'set_power_state', node_uuid, target, soft=soft,
                   timeout=timeout)

    def inject_nmi(self, node_uuid: str) -> None:
        # Not idempotent, and it leaves no trace on the node: retried only
        # when Ironic surely did not get it, never after a lost answer.
        self._call('nmi', 'inject_nmi', node_uuid, retry=Retry.ONCE_ACTED)

    def vif_attach(self, node_uuid: str, vif_id: str) -> None:
        # A locked node is retried; any other 409 is an answer (see
        # vifs.plug). An answer lost after sending: the node's VIFs say.
        self._call('vif', 'vif_attach', node_uuid, vif_id,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: vif_id in self.vif_list(node_uuid))

    def vif_detach(self, node_uuid: str, vif_id: str) -> None:
        self._call('vif', 'vif_detach', node_uuid, vif_id,
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: vif_id not in self.vif_list(node_uuid))

    def vif_list(self, node_uuid: str) -> list[str]:
        """The IDs of the VIFs attached to the node."""
        vifs: list[Any] = self._call('vif', 'vif_list', node_uuid)
        return [str(v.id) for v in vifs]

    def get_console(self, node_uuid: str) -> dict[str, Any]:
        console: dict[str, Any] = self._call('console', 'get_console',
                                             node_uuid)
        return console

    def set_console_mode(self, node_uuid: str, enabled: bool) -> None:
        self._call('console', 'set_console_mode', node_uuid, enabled)

    # Ports and volumes ---------------------------------------------------

    def ports(self, node_uuid: str, address: str | None = None) -> list[Any]:
        ports: list[Any] = self._call('ports', 'list', manager='port',
                                      node=node_uuid, address=address,
                                      detail=True)
        return ports

    def portgroups(self, node_uuid: str,
                   address: str | None = None) -> list[Any]:
        groups: list[Any] = self._call('ports', 'list', manager='portgroup',
                                       node=node_uuid, address=address,
                                       detail=True)
        return groups

    def volume_targets(self, node_uuid: str,
                       once: bool = False) -> list[Any]:
        """The node's volume targets; with ``once``, never retried."""
        targets: list[Any] = self._call(
            'volumes', 'list', manager='volume_target', node=node_uuid,
            detail=True, retry=Retry.NEVER if once else Retry.ALWAYS)
        return targets

    def create_volume_target(self, **fields: Any) -> None:
        """Record a volume on the node; never created twice.

        A repeat after a lost answer would be a 409 that fails the build:
        the node's targets say whether Ironic created it.
        """
        node = fields['node_uuid']
        self._call('volumes', 'create', manager='volume_target',
                   retry=Retry.ONCE_ACTED,
                   acted=lambda: acted.volume_target(
                       fields, self.volume_targets(node)), **fields)

    def delete_volume_target(self, target_uuid: str,
                             once: bool = False) -> None:
        """Delete a volume target; with ``once``, never retried."""
        self._call('volumes', 'delete', target_uuid,
                   manager='volume_target',
                   retry=Retry.NEVER if once else Retry.ALWAYS)

    def volume_connectors(self, node_uuid: str) -> list[Any]:
        connectors: list[Any] = self._call('volumes', 'list',
                                           manager='volume_connector',
                                           node=node_uuid, detail=True)
        return connectors
