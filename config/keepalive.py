"""How long a database link may stay silent before either end gives up on it
(and, with the same figures, the broker's: socket_options).

A host cut off by the network says nothing: no reset, no close. Left to the
kernel's defaults, neither end notices. The client waits on a query for the
next TCP retransmission after the link heals (minutes once the backoff has
grown, about 15 minutes if it never heals), and on a new connection for as
long; the server keeps the host's backends, their open transactions and
row locks, and the liveness locks of its worker processes
(agents/runtime/ownership.py), which are session advisory locks freed only
when the server notices the client is gone: with the kernel's keepalive
starting after 2 hours, no other host takes those sessions over for hours.

So both ends are told (the figures are settings.py's defaults):

- the client, through libpq: `connect_timeout` (a new connection gives up
  after 5 s), `keepalives_*` (an idle link is probed after 5 s, every 2 s,
  and given up after 3 unanswered probes: about 11 s), `tcp_user_timeout`
  (data sent and not acknowledged for 10 s: the link is gone);
- the server, by the same connection: `options='-c tcp_keepalives_idle=5
  ...'` asks the backend for the same probes on its side (these GUCs are
  user-settable), so the liveness lock of a host gone silent is freed in
  about 11 s whatever the server's own configuration says. A pooler that
  refuses startup options (PgBouncer, unless `ignore_startup_parameters`
  lists `options`, and then it drops them) needs
  AGENTDESK_DB_SERVER_KEEPALIVE=0 and the values in its own configuration.

The servers we configure ourselves (docker-compose.yml's postgres, the
embedded one of `make run`: config/embedded.py) carry the same values in
their configuration, for every client that does not ask.
"""

from __future__ import annotations

import socket

CONNECT_TIMEOUT_S = 5
IDLE_S = 5
INTERVAL_S = 2
COUNT = 3
USER_TIMEOUT_MS = 10_000


def server_gucs(
    idle_s: int = IDLE_S,
    interval_s: int = INTERVAL_S,
    count: int = COUNT,
    user_timeout_ms: int = USER_TIMEOUT_MS,
) -> dict[str, int]:
    """The server's side of the same bound (PostgreSQL's GUC names)."""
    return {
        "tcp_keepalives_idle": idle_s,
        "tcp_keepalives_interval": interval_s,
        "tcp_keepalives_count": count,
        "tcp_user_timeout": user_timeout_ms,
    }


def client_options(
    connect_timeout_s: int = CONNECT_TIMEOUT_S,
    idle_s: int = IDLE_S,
    interval_s: int = INTERVAL_S,
    count: int = COUNT,
    user_timeout_ms: int = USER_TIMEOUT_MS,
) -> dict[str, int]:
    """libpq's connection parameters for the client's side."""
    return {
        "connect_timeout": connect_timeout_s,
        "keepalives": 1,
        "keepalives_idle": idle_s,
        "keepalives_interval": interval_s,
        "keepalives_count": count,
        "tcp_user_timeout": user_timeout_ms,
    }


def startup_options(gucs: dict[str, int], given: str = "") -> str:
    """libpq's `options`: ours first, so that any the URL gave (`given`) win."""
    ours = " ".join(f"-c {name}={value}" for name, value in gucs.items())
    return f"{ours} {given}".strip()


def socket_options(
    idle_s: int = IDLE_S,
    interval_s: int = INTERVAL_S,
    count: int = COUNT,
    user_timeout_ms: int = USER_TIMEOUT_MS,
) -> dict[int, int]:
    """The same bound for a plain TCP client (redis-py's
    socket_keepalive_options: the broker's connections, settings.py);
    options this platform lacks are left out."""
    wanted = {
        "TCP_KEEPIDLE": idle_s,
        "TCP_KEEPINTVL": interval_s,
        "TCP_KEEPCNT": count,
        "TCP_USER_TIMEOUT": user_timeout_ms,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}
