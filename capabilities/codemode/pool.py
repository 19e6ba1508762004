"""The Monty interpreter, run in a pool of worker subprocesses.

Monty runs every program in a `monty` subprocess of its own pool: an
interpreter that crashes (a stack overflow, an allocator abort) or runs away
loses that subprocess, never the Celery worker. Each worker process of ours
has one pool (made on first use, made again after a fork) of at most
AGENTDESK_CODEMODE_PROCESSES subprocesses; a program checks one out for its
run and gives it back.

Limits are enforced twice: inside the interpreter (interpreter time per
feed, memory, recursion depth, suspensions, printed bytes), and from the host
side, where the pool kills a subprocess that does not answer within
`request_timeout` (a runaway the interpreter's own clock missed) or past a
feed's time limit plus a grace. A killed subprocess is a program error to the
model; the pool replaces it.

A paused program is a `Pause`: the host call it waits on (name, args,
kwargs), answered with a value or an exception, and dumped as bytes that
`Program.load` resumes in any other process. The dump is an envelope: a
header line (what the program printed so far, its interpreter time) and
Monty's own snapshot.
"""

from __future__ import annotations

import atexit
import json
import time
from dataclasses import dataclass
from typing import Any

import pydantic_monty as pm
from django.conf import settings

from agents.per_process import PerProcess
from agents.tools.base import NotSent

MAGIC = b"agentdesk-codemode/1\n"


@dataclass(frozen=True)
class Limits:
    """A program's limits (a profile's Code Mode settings)."""

    interpreter_s: float = 5.0  # interpreter time (not host calls) per run
    wall_s: float = 120.0  # the whole program, host calls included
    memory_mb: int = 64
    host_calls: int = 50
    recursion: int = 200
    output_bytes: int = 64_000  # printed output kept; more is an error


class TypeCheckFailed(Exception):
    """The program does not type-check against the stubs; nothing ran."""


class ProgramError(Exception):
    """The program stopped with an error (raised, a limit, a crash)."""


def _make_pool() -> pm.Monty:
    pool = pm.Monty(
        min_processes=1,
        max_processes=settings.AGENTDESK_CODEMODE_PROCESSES,
        checkout_timeout=settings.AGENTDESK_CODEMODE_CHECKOUT_S,
        # The host side's own deadline per round trip: a subprocess that does
        # not answer in time is killed (MontyCrashedError, timed_out).
        request_timeout=settings.AGENTDESK_CODEMODE_REQUEST_TIMEOUT_S,
        max_checkouts_per_worker=500,
    )
    pool.__enter__()
    atexit.register(pool.__exit__, None, None, None)
    return pool


_pool: PerProcess[pm.Monty] = PerProcess(_make_pool)


@dataclass
class Pause:
    """A program paused at a host call."""

    program: Program
    snapshot: Any  # pm.FunctionSnapshot
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def answer(self, value: Any) -> Pause | Done:
        return self.program._step(lambda: self.snapshot.resume({"return_value": value}))

    def fail(self, exc_type: str, message: str) -> Pause | Done:
        error = {"exc_type": exc_type, "message": message}
        return self.program._step(lambda: self.snapshot.resume(error))

    def dump(self) -> bytes:
        header = {"stdout": self.program.stdout(), "interpreter_ms": self.program.interpreter_ms}
        return MAGIC + json.dumps(header).encode() + b"\n" + self.snapshot.dump()


@dataclass
class Done:
    value: Any


class Program:
    """One run of a program on one checked-out subprocess (a context manager)."""

    def __init__(self, limits: Limits, stubs: str) -> None:
        self.limits = limits
        self._printed_before = ""
        self._interpreter_s = 0.0
        self._collector = pm.CollectString(max_bytes=limits.output_bytes)
        self._session = _pool.get().checkout(
            script_name="program.py",
            limits={
                "max_feed_duration_secs": limits.interpreter_s,
                "max_memory": limits.memory_mb * 2**20,
                "max_recursion_depth": limits.recursion,
                # Ours counts host calls; this is Monty's backstop for any
                # suspension (a host call, an OS call refused).
                "max_suspensions": limits.host_calls * 2 + 20,
            },
            type_check=True,
            type_check_stubs=stubs,
            type_check_format="concise",
            os_policy={"sleep": "zero"},
        )

    def __enter__(self) -> Program:
        try:
            self._session.__enter__()
        except TimeoutError as exc:  # every subprocess busy: nothing ran, try again
            raise NotSent(f"no Code Mode interpreter free: {exc}") from exc
        return self

    def __exit__(self, *exc: Any) -> None:
        self._session.__exit__(*exc)

    @property
    def interpreter_ms(self) -> int:
        return round(self._interpreter_s * 1000)

    def stdout(self) -> str:
        return self._printed_before + self._collector.output

    def start(self, source: str) -> Pause | Done:
        def feed():
            try:
                return self._session.feed_start(source, print_callback=self._collector)
            except pm.MontyTypingError as exc:
                raise TypeCheckFailed(exc.display()) from None

        return self._step(feed)

    def load(self, blob: bytes) -> Pause:
        if not blob.startswith(MAGIC):
            raise ProgramError("the stored program state is not a Code Mode snapshot")
        header_line, _, dump = blob[len(MAGIC) :].partition(b"\n")
        header = json.loads(header_line)
        self._printed_before = header.get("stdout", "")
        self._interpreter_s = header.get("interpreter_ms", 0) / 1000
        paused = self._step(
            lambda: self._session.load_snapshot(dump, print_callback=self._collector)
        )
        if not isinstance(paused, Pause):
            raise ProgramError("the stored program state was not paused at a host call")
        return paused

    def _step(self, call) -> Pause | Done:
        started = time.monotonic()
        try:
            snapshot = call()
            while isinstance(snapshot, pm.FunctionSnapshot) and snapshot.is_os_function:
                # No filesystem, network, clock or environment: refused inside.
                snapshot = snapshot.resume_not_handled()
            while isinstance(snapshot, pm.NameLookupSnapshot):
                snapshot = snapshot.resume()  # an undefined name: NameError inside
        except TypeCheckFailed:
            raise
        except pm.MontyCrashedError as exc:
            why = "ran past its time limit" if exc.timed_out else "crashed"
            raise ProgramError(f"the interpreter {why} and was stopped ({exc})") from None
        except pm.MontyError as exc:
            raise ProgramError(self._explain(exc)) from None
        finally:
            self._interpreter_s += time.monotonic() - started
        if isinstance(snapshot, pm.MontyComplete):
            return Done(snapshot.output)
        if isinstance(snapshot, pm.FunctionSnapshot):
            return Pause(
                self, snapshot, snapshot.function_name, tuple(snapshot.args), dict(snapshot.kwargs)
            )
        raise ProgramError(f"async code is not supported ({type(snapshot).__name__})")

    def _explain(self, exc: pm.MontyError) -> str:
        """`ExcType: message` and where, without a traceback block (the
        model reads it; error text is cleaned of tracebacks on its way)."""
        if isinstance(exc, (pm.MontyRuntimeError, pm.MontySyntaxError)):
            text = exc.display("type-msg")
            frames = exc.traceback()
        else:
            text, frames = str(exc), []
        if "MemoryError" in text and f"> {self.limits.output_bytes} bytes" in text:
            return f"the program printed more than {self.limits.output_bytes} bytes"
        where = [
            f"  line {f.line}: {(f.source_line or '').strip()}"
            for f in frames[-3:]
            if f.filename == "program.py" or f.filename.startswith("<python-input")
        ]
        return "\n".join([text, *where])
