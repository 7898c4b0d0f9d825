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
"""What Ironic's failures are, and what each says of the request.

Every failure of a request comes out of :mod:`nova_ironic_multi.ironic` as
one of the exceptions here, never as a python-ironicclient or keystoneauth
one (:func:`translated`). The rest judge a failure: whether asking again
may work (:func:`is_transient`), whether Ironic surely did not act
(:func:`did_not_act`), whether a 409 is a node lock
(:func:`is_node_locked`), and which retry options size its retries
(:func:`failure_kind`).
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import socket

from ironicclient import exc as ir_exc
from keystoneauth1 import exceptions as ks_exc
import requests
from urllib3 import exceptions as urllib3_exc

from nova_ironic_multi.ironic import retries


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


def outcome(error: IronicError) -> str:
    """How a failed request ended, as ``metrics.IRONIC_REQUESTS`` counts it.

    ``transient``: Ironic surely did not take it (503, or it never left
    this host); ``refused``: Ironic answered, with an error; ``lost``: no
    answer came after the request may have been taken (a broken
    connection, a read timeout).
    """
    if did_not_act(error):
        return 'transient'
    if getattr(error.__cause__, 'http_status', None) is not None:
        return 'refused'
    return 'lost'


def failure_kind(error: IronicError) -> retries.Kind:
    """Which retry options size the retries of ``error``."""
    if isinstance(error, Conflict):
        return retries.Kind.LOCKED
    if getattr(error.__cause__, 'http_status', None) is not None:
        return retries.Kind.STATUS
    return retries.Kind.CONNECT


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
