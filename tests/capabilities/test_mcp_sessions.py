"""Kept MCP sessions (capabilities/mcp_sessions.py): a worker keeps one
stdio server running across calls, and starts another when it died."""

from __future__ import annotations

import os
import signal

import pytest

from agents import services
from agents.models import ToolCall
from tests.agents.helpers import assert_invariants, kinds, wait_turn
from tests.capabilities.conftest import make_profile, start_session
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TWO = (
    '[[call:docs__create_ticket {"title": "Mug"}]] '
    '[[call:docs__create_ticket {"title": "Plate"}]] File both.'
)
NEVER = {"docs.create_ticket": {"approval": "never"}}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie until its parent (the worker's SDK) reaps it: as good as gone.
    # Reaped between the two looks: gone (the open finds no file, or the read
    # of a file opened just before the reaping answers ESRCH).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_killed_stdio_server_is_started_again_for_the_next_call(mcp_servers, caps_workers):
    mcp_servers.stdio("docs")
    make_profile("mcp_agent", "docs.create_ticket", **NEVER)
    caps_workers()
    session = start_session("ticket:respawn", "mcp_agent", TWO)
    assert wait_turn(session, timeout=60).status == "succeeded"
    first = mcp_servers.effects("docs")
    assert len(first) == 2 and first[0]["pid"] == first[1]["pid"]  # one server for both calls

    os.kill(first[0]["pid"], signal.SIGKILL)
    wait_for(lambda: _gone(first[0]["pid"]), timeout=10, what="the server to die")
    services.message_post(key=session.key, text='[[call:docs__create_ticket {"title": "Cup"}]]')
    turn = wait_turn(session, number=2, timeout=60)

    assert turn.status == "succeeded"
    again = ToolCall.objects.get(session=session, turn=turn)
    assert (again.status, again.attempts) == ("succeeded", 1)
    effects = mcp_servers.effects("docs")
    assert len(effects) == 3 and effects[2]["pid"] not in (first[0]["pid"],)
    assert effects[2]["pid"] in mcp_servers.pids("docs")  # a new start of the server
    assert mcp_servers.received("docs") == 3  # each call reached a server once
    assert "tool.reissued" not in kinds(session)
    assert_invariants(session)
