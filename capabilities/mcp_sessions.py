"""MCP client sessions kept open per process (capabilities/mcp.py uses them).

A session per call cost a server process start per call over stdio (1.7-3 s
under load) and a handshake per call over HTTP (bench/mcp_calls.py). Here a
process keeps one initialized ClientSession per configured server:

- One daemon thread per process runs an asyncio loop. The synchronous tool
  step hands it coroutines (asyncio.run_coroutine_threadsafe) and waits with
  a deadline, so a hung server, or a wedged loop, costs a step its timeout
  and never the worker.
- One _Held per server: a task on the loop that enters the transport and the
  ClientSession and stays inside them until told to leave (anyio's context
  managers must be left by the task that entered them). Its tools are listed
  once when it opens: the SDK checks structured output against those schemas.
- A session is dropped (closed in the background, reopened by the next call)
  when its transport ended (the server exited, the connection dropped), when
  a call on it got no answer in time or lost its connection, when the server
  wrote something that is not JSON-RPC, or when the server's configuration
  changed.
- A session idle for longer than the server's `idle_probe_s` is pinged
  before a call is written on it: a server that died or forgot the session
  in the meantime is found while the call is still certainly not sent (safe
  to retry anywhere) instead of after it went out (outcome unknown).
- Many slots per process: every slot's call is a coroutine on the one loop
  (run_coroutine_threadsafe is thread-safe); calls to one server share its
  session concurrently (JSON-RPC ids keep them apart), and only opening a
  session is serialized, per server, by an asyncio.Lock on the loop.
- Fork: threads do not survive it, so a child (Celery prefork) sees another
  pid and starts its own loop without sessions. It still holds copies of any
  pipes to the parent's stdio servers; a prefork parent runs no tools, so it
  has none.
- Exit: atexit closes every session within EXIT_TIMEOUT_S; the thread is a
  daemon, so a server that will not stop cannot hold the process (a stdio
  server then reads end-of-file when our pipes close with the process).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from agents.per_process import PerProcess
from capabilities.mcp_config import ServerConfig, expand

log = logging.getLogger(__name__)
T = TypeVar("T")

EXIT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 5.0


class Attempt:
    """What one call got to: `sent` turns True just before the request is
    written on a live session. Written on the loop thread, read by the caller
    after the call ended or its deadline passed."""

    sent = False


# --- One connection ---------------------------------------------------------------------


class _Dispatcher(JSONRPCDispatcher):
    """The SDK's dispatcher, telling us when its receive loop ends: the
    server closed the connection (a stdio server exited, say)."""

    def __init__(self, *args: Any, on_end: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    async def run(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().run(*args, **kwargs)
        finally:
            self._on_end()


class _Transport(httpx2.AsyncBaseTransport):
    """httpx's own, telling us when a POST found nothing listening: that
    request never left (an HTTP server stopped, or restarting)."""

    def __init__(self, on_refused: Callable[[], None]) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._on_refused = on_refused

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            if request.method == "POST":
                self._on_refused()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def connect(
    config: ServerConfig,
    *,
    on_end: Callable[[], None] = lambda: None,
    on_message: Callable[[Any], Awaitable[None]] | None = None,
    on_refused: Callable[[], None] = lambda: None,
) -> AsyncIterator[ClientSession]:
    """One initialized session with the server, closed on leaving."""
    async with contextlib.AsyncExitStack() as stack:
        if config.transport == "stdio":
            params = StdioServerParameters(
                command=expand(config.command[0]),
                args=[expand(a) for a in config.command[1:]],
                env={k: expand(v) for k, v in config.env},
                cwd=config.cwd,
            )
            # The real stderr: Celery swaps sys.stderr for a proxy without a file descriptor.
            streams = await stack.enter_async_context(stdio_client(params, errlog=sys.__stderr__))
        else:
            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers={k: expand(v) for k, v in config.headers},
                    # No read timeout: every request has its own deadline, and
                    # the server's event stream may rightly stay quiet for long.
                    timeout=httpx2.Timeout(config.timeout_s, read=None),
                    transport=_Transport(on_refused),
                )
            )
            transport = streamable_http_client(expand(config.url), http_client=client)
            streams = await stack.enter_async_context(transport)
        dispatcher = _Dispatcher(streams[0], streams[1], on_end=on_end)
        session = _Session(dispatcher=dispatcher, message_handler=on_message)
        await stack.enter_async_context(session)
        await session.initialize()
        yield session


class BadOutput(Exception):
    """The server answered, with output that breaks the tool's outputSchema
    (or a schema that cannot be checked): a definite answer, not a lost one."""


class _Session(ClientSession):
    """The SDK's session, with its output check raising a type of its own
    (the SDK raises a bare RuntimeError, which says nothing by its type)."""

    async def validate_tool_result(self, name: str, result: Any) -> None:
        try:
            await super().validate_tool_result(name, result)
        except RuntimeError as exc:  # documented: missing or non-conforming structured content
            raise BadOutput(str(exc)) from exc


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Held:
    """One server's open session, owned by the loop thread."""

    def __init__(self, config: ServerConfig, alive: set[_Held]) -> None:
        self.config = config
        self._alive = alive  # the loop's holders whose task has not ended
        self.session: ClientSession | None = None
        self.broken = ""  # why it must not take another call
        self.closing = False
        self.users = 0  # calls on it now: it is left only when they are over
        self.entered = 0  # calls ever started on it
        self.refused = 0  # POSTs that found nothing listening (http)
        self.last_used = time.monotonic()
        self._leave = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def usable(self) -> bool:
        return (
            self.session is not None
            and not self.broken
            and not self.closing
            and not self._leave.is_set()
        )

    async def open(self) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._alive.add(self)
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-{self.config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.timeout_s)
        except BaseException:
            self._task.cancel()  # the SDK's shutdown of what was opened is bounded
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        try:
            hooks = {"on_end": self._ended, "on_message": self._message}
            async with connect(self.config, **hooks, on_refused=self._refused) as s:
                await s.list_tools()
                self.session = s
                ready.set_result(None)
                await self._leave.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 (handed to the opener, or logged)
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(exc))
            elif not self._leave.is_set():
                log.warning("MCP server %r: session failed: %s", self.config.name, leaf(exc))
        finally:
            self.session = None
            self._leave.set()
            self._alive.discard(self)

    def _refused(self) -> None:
        self.refused += 1

    def mark(self) -> tuple[int, int, int]:
        """Taken when a call starts; see never_connected()."""
        return self.users, self.entered, self.refused

    def never_connected(self, mark: tuple[int, int, int]) -> bool:
        """Whether a POST was refused while this call was the only one on the
        session: then it was this call's, and the call never left. (Any
        doubt, another call alongside, and the answer is no.)"""
        users, entered, refused = mark
        return users == 1 and self.entered == entered and self.refused > refused

    def _ended(self) -> None:
        if not self._leave.is_set():  # not our own close
            self.fail("the server closed the connection")

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line that is not JSON-RPC, a transport fault
            self.fail(f"the server sent garbage: {message!r}"[:300])

    def fail(self, reason: str) -> None:
        """No more calls on this session; the next call opens another."""
        if not self.broken:
            self.broken = reason
            log.info("MCP server %r: dropping its session: %s", self.config.name, reason)
        self.settle()

    def close(self, *, now: bool = False) -> None:
        self.closing = True
        if now:
            self._leave.set()
        self.settle()

    def settle(self) -> None:
        # Leaving the session ends the calls still on it (outcome unknown for
        # them), so one failed call on a shared session waits for the others.
        if self.users == 0 and (self.closing or self.broken):
            self._leave.set()  # the holding task leaves the session and the transport

    async def closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await self._task


# --- The loop thread -------------------------------------------------------------------


class Sessions:
    """This process's loop thread and the sessions it holds."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.held: dict[str, _Held] = {}  # by server name; only touched on the loop
        self.alive: set[_Held] = set()  # held or dropped, until closed
        self._locks: dict[str, asyncio.Lock] = {}
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-sessions")
        self.thread.daemon = True
        self.thread.start()

    def run(self, coro: Awaitable[T], timeout_s: float) -> T:
        """Run `coro` on the loop; give up (and cancel it) after `timeout_s`."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():
                raise  # the coroutine's own timeout
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None

    @contextlib.asynccontextmanager
    async def session(self, config: ServerConfig) -> AsyncIterator[_Held]:
        """A live session with the server, opened or checked as needed. If
        entering raises, nothing was written; the body is the call."""
        held = await self._ready(config)
        held.users += 1
        held.entered += 1
        try:
            yield held
        finally:
            held.users -= 1
            held.last_used = time.monotonic()
            held.settle()

    async def _ready(self, config: ServerConfig) -> _Held:
        lock = self._locks.setdefault(config.name, asyncio.Lock())
        async with lock:  # one opener per server; calls then share the session
            held = self.held.get(config.name)
            if held is not None and (held.config != config or not held.usable):
                self._drop(held)
                held = None
            if held is not None and time.monotonic() - held.last_used > config.idle_probe_s:
                try:
                    assert held.session is not None
                    await asyncio.wait_for(held.session.send_ping(), PROBE_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 (any failure: start over)
                    held.fail(f"no answer to a ping: {leaf(exc)!r}"[:300])
                    self._drop(held)
                    held = None
            if held is None:
                held = _Held(config, self.alive)
                await held.open()
                self.held[config.name] = held
            return held

    def _drop(self, held: _Held, *, now: bool = False) -> None:
        held.close(now=now)
        if self.held.get(held.config.name) is held:
            del self.held[held.config.name]

    async def close_all(self) -> None:
        for held in list(self.alive):
            self._drop(held, now=True)
        # Dropped sessions may still be closing too; each teardown is bounded
        # by the SDK (stdio: close stdin, wait, then kill the server).
        await asyncio.gather(*(h.closed() for h in list(self.alive)))

    def shutdown(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        with contextlib.suppress(Exception):
            self.run(self.close_all(), timeout_s)
        self.loop.call_soon_threadsafe(self.loop.stop)


_SESSIONS = PerProcess(Sessions)


def sessions() -> Sessions:
    return _SESSIONS.get()


@atexit.register
def _close_at_exit() -> None:
    held = _SESSIONS.current()
    if held is not None:
        held.shutdown()
