"""A TCP forwarder on loopback that a test can cut and heal: the database or
the broker "away" for the processes that reach it through the proxy, while it
keeps running for everyone else (the machine's PostgreSQL is shared).

    proxy = Proxy(("127.0.0.1", 5432)); proxy.start()
    ... DATABASE_URL=postgres://...@127.0.0.1:{proxy.port}/db ...
    proxy.cut()    # every open connection reset, new ones refused
    proxy.heal()   # connections accepted and forwarded again
"""

from __future__ import annotations

import socket
import struct
import threading

from bench.chaos.stack import free_port


class Proxy:
    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._pairs: set[socket.socket] = set()
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None

    def start(self) -> Proxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()
        return self

    def cut(self) -> None:
        """Reset every forwarded connection; refuse new ones until healed."""
        self._cut.set()
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for sock in pairs:
            _reset(sock)

    def heal(self) -> None:
        self._cut.clear()

    def stop(self) -> None:
        self._stop.set()
        self.cut()
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self._cut.is_set():
                _reset(client)  # as good as refused: a reset before any byte
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with self._lock:
                    self._pairs.discard(sock)
                _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Close with RST (linger 0), as a peer that vanished does. shutdown()
    first: a bare close() from another thread does not wake a pump blocked
    in recv() on the socket, which then stays open, silently forwarding
    nothing (a black hole, not a reset)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
