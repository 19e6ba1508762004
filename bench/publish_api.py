"""`python bench/publish_api.py [N]`: what publishing an event costs, today's
way against the channel layer's public API (issue 16).

- wire: agents/events.py's publisher, which writes RedisPubSubChannelLayer's
  wire format itself (PUBLISH of the layer's msgpack body on the group's
  channel, pipelined, replies off), on its own thread;
- group_send (loop): the layer's public `group_send`, awaited on one
  long-lived event loop in a thread of its own, as a publisher built on the
  public API would run it;
- group_send (async_to_sync): the same called from sync code the usual way.

For each: N single-event publishes shaped like the engine's `tool.finished`
(a 300-character result), back to back; prints publishes per second and
process CPU per publish (µs). Redis: REDIS_URL (default db 10 on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import threading
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")

import django  # noqa: E402

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402

from agents import events  # noqa: E402

BLOCK = {"type": "tool_result", "tool_use_id": "toolu_0001", "content": "x" * 300}
DATA = {"tool_use_id": "toolu_0001", "name": "lookup_order", "status": "succeeded", "ms": 0}
EVENT = {"seq": 1, "kind": "tool.finished", "turn_id": 7, "data": DATA, "actor": "host:123"}
PAYLOAD = [{**EVENT, "at": "2026-11-29T14:00:00+00:00", "block": BLOCK}]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def message(i: int) -> dict:
    return {"type": "session.events", "session_id": i % 200, "events": PAYLOAD}


def measure(name: str, n: int, publish_all) -> None:
    wall, cpu = time.perf_counter(), cpu_s()
    publish_all(n)
    wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
    print(f"{name:28s} {n / wall:9.0f} publishes/s  {cpu / n * 1e6:7.1f} µs CPU per publish")


def wire(n: int) -> None:
    for i in range(n):
        events.publish(i % 200, PAYLOAD)
        if i % 50 == 49:  # as the engine does: commits arrive, they are not queued by thousands
            events.flush_published(10)
    events.flush_published(10)


def group_send_loop(n: int) -> None:
    layer = get_channel_layer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    pending = []
    for i in range(n):
        coro = layer.group_send(events.session_group(i % 200), message(i))
        pending.append(asyncio.run_coroutine_threadsafe(coro, loop))
        if i % 50 == 49:
            for future in pending:
                future.result(10)
            pending.clear()
    for future in pending:
        future.result(10)
    loop.call_soon_threadsafe(loop.stop)


def group_send_sync(n: int) -> None:
    layer = get_channel_layer()
    send = async_to_sync(layer.group_send)
    for i in range(n):
        send(events.session_group(i % 200), message(i))


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    events.publish(0, PAYLOAD)  # start the publisher thread and its connection
    events.flush_published(10)
    for _ in range(2):  # the second round is the one to read (warm)
        measure("wire (today)", n, wire)
        measure("group_send (loop)", n, group_send_loop)
        measure("group_send (async_to_sync)", n, group_send_sync)
