"""A TCP forwarder on loopback that a test can cut, black-hole, slow and
heal: the database or the broker "away" for the processes that reach it
through the proxy, while it keeps running for everyone else (the machine's
PostgreSQL is shared). The campaign puts one pair of these (database,
broker) in front of each worker "host", so a fault on one host's link is a
partition between that host and the others (nemesis.py).

    proxy = Proxy(("127.0.0.1", 5432)); proxy.start()
    ... DATABASE_URL=postgres://...@127.0.0.1:{proxy.port}/db ...
    proxy.cut()        # every open connection reset, new ones refused
    proxy.blackhole()  # nothing delivered either way, no error either
    proxy.delay(0.3)   # every chunk held 300 ms in each direction
    proxy.heal()       # connections accepted and forwarded again
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from bench.chaos.stack import free_port

OPEN, CUT, BLACKHOLE, DELAY = "open", "cut", "blackhole", "delay"


class Proxy:
    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.mode = OPEN
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._pairs: set[socket.socket] = set()
        self._upstreams: set[socket.socket] = set()
        # Clients held silent in a black hole: the far side forgot them, the
        # near side does not know yet (no FIN, no RST ever reached it).
        self._held: set[socket.socket] = set()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self.refused = 0  # connections turned away while cut

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
        self.mode = CUT
        self._reset_all()

    def blackhole(self, server_notices_s: float = 2.0) -> None:
        """Deliver nothing, either way, and say nothing: a link that is down.
        After `server_notices_s` the far side drops its ends (as PostgreSQL
        does when its TCP keepalive gives up: the liveness locks held on
        those connections are released, so another host can take over),
        while the near side's clients hang until the link heals."""
        self.mode = BLACKHOLE
        with self._lock:
            upstreams = set(self._upstreams)

        def server_notices() -> None:
            if self.mode == BLACKHOLE:
                for sock in upstreams:
                    _reset(sock)

        timer = threading.Timer(server_notices_s, server_notices)
        timer.daemon = True
        timer.start()

    def delay(self, seconds: float) -> None:
        """Hold every chunk `seconds` before passing it on (a slow link)."""
        self._delay_s = seconds
        self.mode = DELAY

    def heal(self) -> None:
        was, self.mode, self._delay_s = self.mode, OPEN, 0.0
        if was == BLACKHOLE:
            # What was sent into the hole is lost, so no connection of that
            # time can go on: the far side answers the near side's next
            # segment with a reset, as a real peer that forgot it does.
            self._reset_all()

    def stop(self) -> None:
        self._stop.set()
        self.cut()
        if self._listener is not None:
            self._listener.close()

    def _reset_all(self) -> None:
        with self._lock:
            socks = self._pairs | self._held
            self._pairs, self._held, self._upstreams = set(), set(), set()
        for sock in socks:
            _reset(sock)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.mode == CUT:
                _reset(client)  # as good as refused: a reset before any byte
                self.refused += 1
                continue
            if self.mode == BLACKHOLE:
                with self._lock:
                    self._held.add(client)  # accepted, then silence
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.update((client, upstream))
                self._upstreams.add(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, client: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if self.mode == BLACKHOLE:
                    continue  # into the hole
                if self.mode == DELAY and self._delay_s:
                    time.sleep(self._delay_s)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            upstream = sink if source is client else source
            with self._lock:
                self._pairs.discard(source)
                self._pairs.discard(sink)
                self._upstreams.discard(upstream)
                if self.mode == BLACKHOLE:
                    self._held.add(client)
            _reset(upstream)
            if self.mode != BLACKHOLE:
                _reset(client)


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
