"""The sandbox with TCP_NODELAY on its connections, for the "real nodelay" row.

sandbox/__main__.py binds its listening socket with proto 0, and asyncio
only sets TCP_NODELAY on accepted sockets whose proto is IPPROTO_TCP
(asyncio.base_events._set_nodelay). Without it, a response written in two
parts on a kept-alive connection waits for the client's delayed ACK: every
request after the first on a connection takes ~40 ms, which the "real client"
row then measures instead of HTTP and SSE. This runs the same sandbox with
the socket created as IPPROTO_TCP; nothing else differs.
"""

from __future__ import annotations

import socket
import sys

import sandbox.__main__ as sandbox_main


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    sandbox_main._bind = _bind
    sys.exit(sandbox_main.main())
