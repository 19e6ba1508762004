"""`python -m sandbox --host 127.0.0.1 --port 8100 --data PATH [...]`.

Prints `sandbox: listening on http://HOST:PORT` once uvicorn accepts
connections; with `--port 0` the port printed is the one the OS picked.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys

import uvicorn

from sandbox.app import create_app

# How long shutdown waits for open connections; a stalled stream may hold
# one for a minute, and tests stop the sandbox between runs.
GRACEFUL_SHUTDOWN_SECONDS = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox", description="Agentdesk's stand-in outside world."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0 picks a free port")
    parser.add_argument("--data", required=True, help="SQLite file (created if missing)")
    parser.add_argument("--rate", type=float, default=None, help="generate N tickets per minute")
    parser.add_argument("--seed", type=int, default=0, help="seed for the ticket generator")
    parser.add_argument("--webhook-url", default=None)
    parser.add_argument("--webhook-secret", default=None)
    parser.add_argument(
        "--seed-demo", action="store_true", help="load the demo customers and orders"
    )
    parser.add_argument(
        "--model-chunk-delay-ms", type=int, default=0, help="sleep between streamed chunks"
    )
    parser.add_argument(
        "--model-ttft-ms",
        type=int,
        default=0,
        help="a real model's pace: time to the first token of each reply",
    )
    parser.add_argument(
        "--model-tokens-per-s",
        type=float,
        default=0.0,
        help="a real model's pace: output tokens streamed per second (0: at once)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    return parser.parse_args(argv)


class _QuietDroppedConnections(logging.Filter):
    """uvicorn logs the deliberate drop (a non-None ASGI return) as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "ASGI callable should return None" not in record.getMessage()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets
    # whose proto says TCP. Without it a response written in two parts waits
    # for the client's delayed ACK, ~40 ms per request on a kept-alive socket.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


async def _serve(server: uvicorn.Server, sock: socket.socket, host: str) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        shown = f"[{host}]" if ":" in host else host
        print(f"sandbox: listening on http://{shown}:{sock.getsockname()[1]}", flush=True)
    await task


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("uvicorn.error").addFilter(_QuietDroppedConnections())
    app = create_app(
        args.data,
        rate=args.rate,
        seed=args.seed,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        seed_demo=args.seed_demo,
        model_chunk_delay_ms=args.model_chunk_delay_ms,
        model_ttft_ms=args.model_ttft_ms,
        model_tokens_per_s=args.model_tokens_per_s,
    )
    config = uvicorn.Config(
        app,
        http="httptools",  # C parser: the sandbox shares the workers' cores
        log_level="info",
        access_log=args.access_log,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        log_config=None,
    )
    server = uvicorn.Server(config)
    sock = _bind(args.host, args.port)
    asyncio.run(_serve(server, sock, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
