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
"""How each request to Ironic is sent, retried and judged.

* python-ironicclient's own retries are off: it retries every request
  alike (409s, 503s, connection failures), the reservation included. Here
  one policy, :meth:`Session._call`, decides per request, and the counts
  are nova's ``[ironic]`` options as :mod:`nova_ironic_multi.ironic.retries`
  says (``api_max_retries`` / ``api_retry_interval``, and keystoneauth's
  ``connect_retries`` / ``status_code_retries``, which are never given to
  keystoneauth itself):

  - a 409 saying a conductor holds the node's lock
    (:func:`.errors.is_node_locked`) is retried, except for the
    reservation; any other 409 (already associated, already attached, a
    duplicate volume target) is an answer;
  - a transient failure (:func:`.errors.is_transient`: a 503, which Ironic
    answers with ``NoFreeConductorWorker`` when its conductors are busy,
    before it acts; or a failed connection, but not an answer that timed
    out) is
    retried for requests that end the same however often they are asked:
    reads, power on and off, writing instance_info, consoles, removing a
    volume target;
  - a request that changes Ironic and must not reach it twice (provision
    state changes: deploy, rebuild, undeploy, rescue, unrescue; reboot;
    creating a volume target; VIF attach and detach; releasing the node;
    an NMI) is retried only when Ironic surely did not act
    (:func:`.errors.did_not_act`: a 503, a refused connection, a name that
    did not resolve, a connect timeout). keystoneauth reports a connection
    broken after the request was sent as the same ``ConnectFailure``; then the
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
  - inside :meth:`Session.fail_fast` (nova's resource-tracker period and the
    service's start) no request of that thread is retried, whatever its
    kind: ``GET /v1/shards``, the reads of single nodes, the volume-target
    sweep. The next period is the retry.

  Each retry is logged at DEBUG, exhausted retries at WARNING. The waits
  that poll Ironic (:mod:`nova_ironic_multi.actions.waits`) go on past a failed
  poll until their own timeout.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
import contextlib
import enum
import itertools
import threading
import time
from typing import Any

from ironicclient import client as ir_client
from ironicclient import exc as ir_exc
from oslo_config import cfg
from oslo_log import log as logging

from nova_ironic_multi.ironic import connection
from nova_ironic_multi.ironic import errors
from nova_ironic_multi.ironic import pages
from nova_ironic_multi.ironic import retries
from nova_ironic_multi import metrics

LOG = logging.getLogger(__name__)


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


class Session:
    """A thread-safe, lazily connected client: how each request is sent.

    :class:`nova_ironic_multi.ironic.Ironic` adds the requests.
    """

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
        connection.quiet_client_retry_log()
        #: Requests sent, by kind; read by benchmarks and logs.
        self.requests: collections.Counter[str] = collections.Counter()

    # Connection ---------------------------------------------------------
    def _connect(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            with errors.translated('connecting to Ironic'):
                session, endpoint = connection.session_and_endpoint(
                    self._conf)
            return self._negotiate(session, endpoint)

    def _negotiate(self, session: Any, endpoint: str) -> Any:
        """A client of ``endpoint`` at the highest version both sides know.

        Called with the lock held; the client is kept only on success.

        :raises errors.VersionNotSupported: Ironic offers no version this
            driver can use; the message says which it offers and which
            it needs.
        """
        with errors.translated('connecting to Ironic'):
            client = ir_client.get_client(
                '1', session=session, endpoint=endpoint,
                # A list negotiates the highest version both sides know.
                os_ironic_api_version=connection.NEGOTIATE,  # type: ignore[arg-type]
                max_retries=0, retry_interval=0)
            self.requests['version'] += 1
            try:
                negotiated = client.negotiate_api_version()
            except ir_exc.UnsupportedVersion as e:
                raise errors.VersionNotSupported(
                    connection.too_old(endpoint, e)) from e
            # Read by _call(manager='node_pages').
            client.node_pages = pages.NodePages(  # type: ignore[attr-defined]
                client.http_client)
        version = connection.version_tuple(negotiated)
        if version < connection.MIN_VERSION:
            raise errors.VersionNotSupported(
                connection.too_old(endpoint, negotiated))
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
            except errors.IronicError as e:
                LOG.debug('Negotiating the Ironic API version again '
                          'failed: %s', e)
            assert self._version is not None
            return self._version >= needed

    def connect(self) -> None:
        """Authenticate, find Ironic and negotiate the version now.

        nova-compute calls this at start so that a wrong ``[ironic]``
        section stops the service with
        :class:`~.errors.IronicMisconfigured` instead of failing every
        period.
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
                with errors.translated(what):
                    result = call(*args, **kwargs)
                metrics.IRONIC_REQUESTS.labels('ok').inc()
                return result
            except errors.IronicError as e:
                metrics.IRONIC_REQUESTS.labels(errors.outcome(e)).inc()
                request = '%s.%s %s' % (manager, method,
                                        args[0] if args else '')
                retriable = self._retriable(e, retry)
                if (not retriable and acted is not None and
                        errors.is_transient(e) and not errors.did_not_act(e)):
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
                kind = errors.failure_kind(e)
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

    def _retriable(self, error: errors.IronicError, retry: Retry) -> bool:
        if isinstance(error, errors.Conflict):
            # Only a lock goes away by itself; any other 409 (already
            # associated, a duplicate volume target) would repeat.
            return bool(retry & Retry.LOCKED) and errors.is_node_locked(error)
        if retry & Retry.UNACTED and errors.did_not_act(error):
            return True
        if not retry & Retry.TRANSIENT:
            return False
        return errors.is_transient(error) or self._listed_status_on_read(error)

    @staticmethod
    def _acted(request: str, error: errors.IronicError,
               acted: Callable[[], bool]) -> bool:
        """Whether Ironic took a request whose answer was lost.

        :raises errors.IronicError: ``error``, when the node cannot be read.
        """
        unreadable: errors.IronicError | None = None
        try:
            took = acted()
        except errors.IronicError as e:
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

    def _listed_status_on_read(self, error: errors.IronicError) -> bool:
        """A GET answered with a status of ``retriable_status_codes``."""
        cause = error.__cause__
        return (str(getattr(cause, 'method', '')).upper() == 'GET' and
                getattr(cause, 'http_status', None) in
                retries.retriable_status_codes(self._conf))
