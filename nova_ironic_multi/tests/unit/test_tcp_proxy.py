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
"""The soak's RabbitMQ proxy: it cuts connections when told, and only then.

A connection it closed on its own would be a broker restart the soak never
scheduled: messages lost in it would be blamed on the deployment.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import socket
import threading
import time

import pytest

from nova_ironic_multi.tests.soak import tcp_proxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A server that sends back what it gets, and never speaks first."""
    server = socket.create_server(('127.0.0.1', 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,),
                                 daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    server.close()


@pytest.fixture
def proxy(echo: tuple[str, int],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[tcp_proxy.TcpProxy]:
    monkeypatch.setattr(tcp_proxy, 'CONNECT_TIMEOUT', 0.2)
    p = tcp_proxy.TcpProxy(echo)
    p.start()
    yield p
    p.stop()


def _roundtrip(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    return conn.recv(4096)


def test_a_silent_connection_stays_open(proxy: tcp_proxy.TcpProxy) -> None:
    with socket.create_connection(('127.0.0.1', proxy.port), 5) as conn:
        assert _roundtrip(conn, b'hello') == b'hello'
        # Longer than the connect timeout without a byte either way, as a
        # broker between two heartbeats.
        time.sleep(1.0)
        assert _roundtrip(conn, b'again') == b'again'
    assert proxy.connections == 1


def test_cut_closes_and_refuses_until_restored(
        proxy: tcp_proxy.TcpProxy) -> None:
    conn = socket.create_connection(('127.0.0.1', proxy.port), 5)
    assert _roundtrip(conn, b'x') == b'x'
    assert proxy.cut() == 1
    assert conn.recv(4096) == b''
    conn.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.1', proxy.port), 5)
    assert proxy.restore() == proxy.port
    with socket.create_connection(('127.0.0.1', proxy.port), 5) as again:
        assert _roundtrip(again, b'y') == b'y'
