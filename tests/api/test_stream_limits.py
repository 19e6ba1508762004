"""Event streams cannot starve the desk (issue 27, case 1): a stream holds
no pooled database connection while it waits, every borrow goes back on
every path (the client reads and leaves, aborts, resets, the stream runs
out its time, a refused request), and a user or a token may hold only so
many streams at once (429 beyond).

Against a real Daphne on a pool of 2 connections, many more streams than
that."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

import pytest
from django.db import connection

from agents import services
from api.tokens import token_create
from tests.dashboard.conftest import daphne
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

POOL = 2


def _request(web, token: str, path: str, extra: str = "") -> socket.socket:
    """A raw HTTP/1.1 GET, sent; the socket, to read or drop as a test likes."""
    parts = urlsplit(web.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=20)
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n{extra}\r\n"
        ).encode()
    )
    return sock


def _status(sock: socket.socket) -> tuple[int, bytes]:
    """The status code, and what came with the headers."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data


def _read_until(sock: socket.socket, marker: bytes, seen: bytes = b"") -> bytes:
    while marker not in seen:
        chunk = sock.recv(4096)
        if not chunk:
            break
        seen += chunk
    return seen


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): a client that vanishes."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _daphne_connections(pid: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [f"agentdesk pid={pid}"],
        )
        return cursor.fetchone()[0]


def _desk_answers(web, token: str) -> float:
    """Seconds for GET /api/v1/sessions?limit=1 to answer 200."""
    started = time.monotonic()
    sock = _request(web, token, "/api/v1/sessions?limit=1", "Connection: close\r\n")
    status, data = _status(sock)
    sock.close()
    assert status == 200, data
    return time.monotonic() - started


def test_many_more_streams_than_pooled_connections_leave_the_desk_answering(
    stack_env, run_dir, alice, carol
):
    env = {
        **stack_env,
        "AGENTDESK_DB_POOL_SIZE": str(POOL),
        # A borrow that cannot be served fails fast, so a leak fails the test fast.
        "AGENTDESK_DB_POOL_TIMEOUT_S": "3",
        "AGENTDESK_SSE_HEARTBEAT_S": "0.2",  # each heartbeat reads Postgres
        "AGENTDESK_SSE_MAX_S": "1.5",
        "AGENTDESK_SSE_MAX_PER_TOKEN": "1000",
        "AGENTDESK_SSE_MAX_PER_USER": "1000",
    }
    session = services.session_get_or_create(key="ticket:sse-flood", title="flood")
    _, token = token_create(user=alice, name="streams")
    _, admin = token_create(user=carol, name="desk")
    path = f"/api/v1/sessions/{session.id}/events"
    ways = ("read-and-close", "abort", "reset", "run-out", "refused", "hold")
    per_way = 6
    with daphne(env, run_dir) as web:
        statuses: list[int] = []
        held: list[socket.socket] = []
        lock = threading.Lock()

        def one(way: str) -> None:
            extra = {
                "refused": "Last-Event-ID: not-a-number\r\n",
                "run-out": "Connection: close\r\n",
            }.get(way, "")
            sock = _request(web, token, path, extra)
            if way == "abort":  # gone before the answer
                sock.close()
                return
            status, seen = _status(sock)
            with lock:
                statuses.append(status)
            if way == "read-and-close":
                _read_until(sock, b"retry:", seen)
                sock.close()
            elif way == "reset":
                _reset(sock)
            elif way == "run-out":
                _read_until(sock, b"\x00", seen)  # until the server ends it
                sock.close()
            elif way == "hold":
                with lock:
                    held.append(sock)
            else:
                sock.close()

        threads = [
            threading.Thread(target=one, args=(way,)) for way in ways for _ in range(per_way)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        opened = len(threads)
        assert opened >= 10 * POOL
        assert sorted(set(statuses)) == [200, 422], statuses
        assert statuses.count(200) == (len(ways) - 2) * per_way
        # While streams wait, the desk answers at once...
        assert len(held) == per_way
        # (A leak shows as a 500 after the pool's 3 s; the bound below only
        # keeps a loaded machine's slowness from failing the test.)
        while_held = _desk_answers(web, admin)
        assert while_held < 10.0
        for sock in held:
            sock.close()
        # ...and after every client has gone.
        after = _desk_answers(web, admin)
        assert after < 10.0
        assert _daphne_connections(web.proc.pid) <= POOL
        # Every stream ended on the server (none is left following the group).
        wait_for(lambda: _followers(session.id) == 0, timeout=10, what="streams to end")
        log = web.proc.log()
        assert "PoolTimeout" not in log and "Traceback" not in log, log[-3000:]
        print(
            json.dumps(
                {
                    "streams_opened": opened,
                    "pool_size": POOL,
                    "answer_while_held_s": round(while_held, 3),
                    "answer_after_dropped_s": round(after, 3),
                }
            )
        )


def _followers(session_id: int) -> int:
    import redis
    from django.conf import settings

    from agents.events import group_channel, session_group

    channel = group_channel(session_group(session_id))
    client = redis.Redis.from_url(settings.REDIS_URL)
    return dict(client.pubsub_numsub(channel)).get(channel.encode(), 0)


def test_a_token_and_a_user_hold_only_so_many_streams_then_429(stack_env, run_dir, alice):
    env = {**stack_env, "AGENTDESK_SSE_MAX_PER_TOKEN": "2", "AGENTDESK_SSE_MAX_PER_USER": "3"}
    session = services.session_get_or_create(key="ticket:sse-cap", title="cap")
    _, first = token_create(user=alice, name="first")
    _, second = token_create(user=alice, name="second")
    path = f"/api/v1/sessions/{session.id}/events"
    with daphne(env, run_dir) as web:
        held = []
        for token in (first, first):
            sock = _request(web, token, path)
            assert _status(sock)[0] == 200
            held.append(sock)
        status, head, problem = _answer(web, first, path)
        assert status == 429
        assert b"Retry-After: " in head and b"application/problem+json" in head
        assert problem["type"] == "urn:agentdesk:problem:too-many-streams"
        assert "token already holds 2 event streams" in problem["detail"]
        # Another token of the same user: one more, up to the user's 3.
        sock = _request(web, second, path)
        assert _status(sock)[0] == 200
        held.append(sock)
        status, _, problem = _answer(web, second, path)
        assert status == 429 and "user already holds 3" in problem["detail"]
        # A stream that ends gives its place back.
        held.pop(0).close()
        wait_for(
            lambda: _opens(web, first, path),
            timeout=10,
            what="the closed stream's place to come back",
        )
        for sock in held:
            sock.close()


def _answer(web, token: str, path: str) -> tuple[int, bytes, dict]:
    """A whole short answer: status, head, JSON body."""
    sock = _request(web, token, path, "Connection: close\r\n")
    data = _read_until(sock, b"\x00")
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, json.loads(body)


def _opens(web, token: str, path: str) -> bool:
    sock = _request(web, token, path)
    status, _ = _status(sock)
    sock.close()
    return status == 200
