"""The broker's connections give up on a silent Redis within seconds
(settings: CELERY_BROKER_TRANSPORT_OPTIONS), with kombu's Redis transport as
installed: a send (a slot's, beat's) is not held for the kernel's minutes,
and a consumer whose link went silent while it waited in BRPOP is dropped
and reconnected. tests/agents/runtime/test_broker_outage.py shows workers
living through an outage with these options."""

from __future__ import annotations

import socket
import threading
import time

from celery import current_app
from django.conf import settings
from kombu.transport import redis as kombu_redis

from config import keepalive


def test_the_brpop_poll_stays_below_the_socket_timeout():
    """kombu's consumer blocks in BRPOP for up to its poll; a socket timeout
    under that would drop a healthy connection at every idle poll."""
    with current_app.connection_for_read() as conn:
        transport = conn.transport
        assert isinstance(transport, kombu_redis.Transport)
        poll = transport.brpop_timeout
    assert poll + 1 < settings.CELERY_BROKER_TRANSPORT_OPTIONS["socket_timeout"] <= 10


def test_a_connection_to_a_redis_that_never_answers_gives_up_at_the_socket_timeout():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts; nobody ever answers the PING
    url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
    outcome: dict[str, object] = {}

    def channel() -> None:
        started = time.monotonic()
        try:
            with current_app.connection_for_write(url) as conn:
                conn.default_channel  # noqa: B018 (kombu PINGs the server here)
        except Exception as exc:  # noqa: BLE001 (what a sender meets)
            outcome["error"] = exc
        outcome["s"] = time.monotonic() - started

    thread = threading.Thread(target=channel, daemon=True)
    thread.start()
    thread.join(30)
    silent.close()
    assert not thread.is_alive(), "still waiting on a silent broker after 30s"
    assert "error" in outcome and outcome["s"] < 15, outcome


def test_the_broker_connection_probes_a_silent_link(broker):
    with current_app.connection_for_write() as conn:
        pool = conn.default_channel.client.connection_pool
        redis_conn = pool.get_connection()  # connected, as kombu's commands use it
        try:
            sock = redis_conn._sock
            options = keepalive.socket_options()
            got = {name: sock.getsockopt(socket.IPPROTO_TCP, name) for name in options}
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.gettimeout() == settings.CELERY_BROKER_TRANSPORT_OPTIONS["socket_timeout"]
        finally:
            pool.release(redis_conn)
    assert got == options
    assert got[socket.TCP_KEEPIDLE] == keepalive.IDLE_S
