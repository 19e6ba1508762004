"""`make run`'s terminal: what a person sees of each process (scripts/run.py)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from agents.observability import logs

ROOT = Path(__file__).resolve().parents[2]


def _run_module():
    spec = importlib.util.spec_from_file_location("agentdesk_run", ROOT / "scripts" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_terminal_shows_what_matters_and_every_traceback():
    run = _run_module()
    worker = run.Terminal("worker", verbose=False)
    shown = [
        line
        for line in [
            " -------------- celery@vm v5.7.0 (collider)",  # the banner: to the file
            "09:01:15 celery.apps.worker: celery@vm ready.",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "django.core.exceptions.ImproperlyConfigured: DJANGO_SECRET_KEY is not set",
            "User information: uid=0 euid=0 gid=0 egid=0",
        ]
        if worker.wants(line)
    ]
    assert shown == [
        "09:01:15 celery.apps.worker: celery@vm ready.",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "django.core.exceptions.ImproperlyConfigured: DJANGO_SECRET_KEY is not set",
    ]
    postgres = run.Terminal("postgres", verbose=False)
    assert not postgres.wants("2026-12-01 LOG:  database system is ready to accept connections")
    assert postgres.wants('2026-12-01 FATAL:  database "x" does not exist')
    assert run.Terminal("postgres", verbose=True).wants("2026-12-01 LOG:  checkpoint starting")


def _record(name: str, level: int, msg: str, args=()) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_housekeeping_is_debug_on_the_console_and_kept_in_the_file():
    console = logs.Housekeeping("INFO")
    file = logs.Housekeeping()
    due = _record("celery.beat", logging.INFO, "Scheduler: Sending due task sweep-sessions")
    done = _record(
        "celery.app.trace",
        logging.INFO,
        "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s",
        ({"name": "agents.sweep_sessions", "id": "1", "runtime": 0.1, "return_value": None},),
    )
    failed = _record("celery.app.trace", logging.ERROR, "Task agents.advance_session raised")
    ours = _record("agents.runtime.sweeper", logging.INFO, "sweeper re-enqueued 1 session(s)")
    assert [console.filter(r) for r in (due, done, failed, ours)] == [False, False, True, True]
    assert due.levelname == "DEBUG" and failed.levelname == "ERROR"
    assert [file.filter(r) for r in (due, done, failed, ours)] == [True, True, True, True]


def test_the_console_line_is_for_a_person():
    formatter = logs.ConsoleFormatter()
    token = logs.bind("ticket:7", 2, 5)
    try:
        line = formatter.format(
            _record("agents.features.jobs", logging.WARNING, "job %s is dead", (3,))
        )
    finally:
        logs.unbind(token)
    assert line.split(" ", 1)[1] == "WARNING job 3 is dead [ticket:7 turn 2 step 5]"
    other = formatter.format(_record("celery.apps.worker", logging.INFO, "celery@vm ready."))
    assert other.split(" ", 1)[1] == "celery.apps.worker: celery@vm ready."
