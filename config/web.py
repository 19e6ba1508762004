"""`python -m config.web`: several Daphne processes on one listening socket.

    python -m config.web --host 0.0.0.0 --port 8000 [--processes N] [daphne options]

One Daphne process runs Django on one interpreter: its requests take turns
on one GIL, so a burst of webhooks, the messages API and the desk's own
writes all queue behind each other there, however many threads serve them.
This binds the port once and starts N Daphne processes on it (`daphne --fd`,
the socket inherited), and the kernel hands each new connection to one of
them, as gunicorn's master does. N is --processes, else
config.sizing.web_processes(): README "Sizing".

A Daphne process that dies is started again (they are stateless; the socket
stays open in this process meanwhile, so no connection is refused); one that
dies within seconds of starting, repeatedly, is a broken setup: then
everything stops and we exit 1. SIGTERM / SIGINT stop the processes and exit 0.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time

from config.sizing import web_processes

APP = "config.asgi:application"
FAST_DEATHS = 5  # processes dead within FAST_S of their start, in a row: give up
FAST_S = 10.0


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)  # a burst of webhooks waits here, not refused
    sock.set_inheritable(True)
    return sock


def start(fd: int, daphne_args: list[str]) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "daphne", "--fd", str(fd), *daphne_args, APP]
    return subprocess.Popen(args, pass_fds=(fd,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--processes", type=int, default=0)
    args, daphne_args = parser.parse_known_args(argv)
    count = args.processes or web_processes()
    sock = listen(args.host, args.port)
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = sock.getsockname()[:2]  # the port bound, when asked for 0
    print(f"web: {count} Daphne process(es) on {host}:{port}", flush=True)
    children = {i: (start(sock.fileno(), daphne_args), time.monotonic()) for i in range(count)}
    fast_deaths = 0
    while not stopping:
        time.sleep(0.2)
        for i, (child, started) in list(children.items()):
            code = child.poll()
            if code is None or stopping:
                continue
            fast_deaths = fast_deaths + 1 if time.monotonic() - started < FAST_S else 0
            print(f"web: process {child.pid} exited with code {code}", flush=True)
            if fast_deaths >= FAST_DEATHS:
                _stop_all([c for c, _ in children.values()])
                return 1
            children[i] = (start(sock.fileno(), daphne_args), time.monotonic())
    _stop_all([c for c, _ in children.values()])
    return 0


def _stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 8
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


if __name__ == "__main__":
    sys.exit(main())
