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
"""A TCP forwarder that can play a restarting server.

The soak's services reach RabbitMQ through it. :meth:`TcpProxy.cut` does
to them what a broker restart does: every connection is closed and new
ones are refused (nothing listens on the port), until :meth:`restore`
listens again. The machine's broker itself, which others use, is never
touched.
"""

from __future__ import annotations

import contextlib
import socket
import threading

#: Seconds to reach the target when a client connects.
CONNECT_TIMEOUT = 10.0


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self.connections = 0

    def start(self) -> int:
        """Listen on a loopback port (the same one after a cut)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(('127.0.0.1', self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,),
                         name='tcp-proxy-%d' % self.port,
                         daemon=True).start()
        return self.port

    restore = start

    def cut(self) -> int:
        """Close every connection and stop listening; how many closed."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        if listener is not None:
            # shutdown() first: close() alone leaves the socket listening
            # while the accepting thread is blocked in it.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        return len(sockets) // 2

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return              # cut
            try:
                upstream = socket.create_connection(self.target,
                                                    CONNECT_TIMEOUT)
            except OSError:
                client.close()
                continue
            # The timeout was for the connect only: a connection a broker
            # leaves silent for longer (between heartbeats) stays open.
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, EOFError):
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()
