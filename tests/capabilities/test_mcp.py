"""MCP servers as providers: a real server (tests/capabilities/mcp_server.py)
over stdio and over streamable HTTP, driven by real workers."""

from __future__ import annotations

import signal

import pytest

from agents.models import Event, ToolCall
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, kinds, wait_turn
from tests.capabilities.conftest import make_profile, start_session
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = (
    '[[call:docs__search {"query": "broken mugs"}]] '
    '[[call:docs__create_ticket {"title": "Broken mug"}]] Please file this.'
)
GATED = {"docs.create_ticket": {"approval": "always"}}


def _serve(mcp_servers, transport: str) -> None:
    if transport == "stdio":
        mcp_servers.stdio("docs")
    else:
        mcp_servers.http("docs")


def _approve(session, bob) -> Approval:
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=60,
        what="the create_ticket approval",
    )
    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    return approval


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mcp_tools_run_through_policy_and_approval(transport, mcp_servers, caps_workers, bob):
    _serve(mcp_servers, transport)
    make_profile("mcp_agent", "docs.search", "docs.create_ticket", **GATED)
    caps_workers()
    session = start_session(f"ticket:mcp-{transport}", "mcp_agent", SCRIPT)

    approval = _approve(session, bob)
    assert mcp_servers.effects("docs") == []  # nothing before the approver said so
    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded"
    search = ToolCall.objects.get(session=session, name="docs__search")
    create = ToolCall.objects.get(session=session, name="docs__create_ticket")
    assert (search.status, search.kind) == ("succeeded", "read_only")
    assert (create.status, create.kind) == ("succeeded", "idempotent_by_key")
    assert approval.policy == "profile_policy"
    effects = mcp_servers.effects("docs")
    assert [e["key"] for e in effects] == [create.idempotency_key]  # our key, in _meta
    assert create.external_id == effects[0]["result"]["ticket"]
    finished = Event.objects.filter(session=session, kind="tool.finished").order_by("seq")
    audit = {e.data["name"]: e.data for e in finished}
    # The profile a call ran under is its turn's, said once when the turn starts.
    started = Event.objects.get(session=session, kind="turn.started", turn_id=create.turn_id)
    assert started.data["profile"] == "mcp_agent"
    assert audit["docs__create_ticket"]["external_id"] == create.external_id
    assert audit["docs__search"]["ms"] > 0
    assert_invariants(session)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_side_effect_runs_once_when_worker_dies_mid_call(
    transport, mcp_servers, caps_workers, workers, bob
):
    _serve(mcp_servers, transport)
    mcp_servers.slow("docs", 4)  # the call waits at the server: time to kill its worker
    make_profile("mcp_agent", "docs.search", "docs.create_ticket", **GATED)
    victim = caps_workers("victim")
    workers.beat()  # the sweeper notices the dead owner
    session = start_session(f"ticket:kill-{transport}", "mcp_agent", SCRIPT)
    _approve(session, bob)
    wait_for(lambda: mcp_servers.received("docs"), timeout=60, what="the call at the server")

    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)
    caps_workers("rescuer")
    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded", workers.logs()
    create = ToolCall.objects.get(session=session, name="docs__create_ticket")
    assert create.attempts == 2 and "tool.reissued" in kinds(session)
    assert [e["key"] for e in mcp_servers.effects("docs")] == [create.idempotency_key]
    assert_invariants(session)


def test_a_dead_server_gives_a_clean_error(mcp_servers, caps_workers, workers):
    mcp_servers.dead("ghost")  # never answered: its tool is offered, and says why it cannot run
    proc = mcp_servers.http("docs")  # answers once, then dies
    make_profile("mcp_agent", "docs.search", "ghost.search")
    caps_workers()
    session = start_session(
        "ticket:dead",
        "mcp_agent",
        '[[call:ghost__search {"q": 1}]] [[call:docs__search {"query": "x"}]]',
    )
    first = wait_turn(session, timeout=60)
    proc.stop()
    from agents import services

    services.message_post(key=session.key, text='[[call:docs__search {"query": "again"}]]')
    second = wait_turn(session, number=2, timeout=60)

    # No crash, no hang. A call whose server stayed unreachable through every
    # retry leaves its turn failed, on the desk's list for a person, and says
    # which (issue 26): the ghost's call, whose outcome would change something.
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == "failed", (first.status, first.error)
    assert "ghost__search" in first.error and "A person must follow up" in first.error
    assert second.status in ("succeeded", "failed"), second.status
    assert second.status == "succeeded" or "A person must follow up" in second.error
    calls = {c.name + str(c.turn_id): c for c in ToolCall.objects.filter(session=session)}
    ghost = calls[f"ghost__search{first.id}"]
    assert ghost.status == "failed" and ghost.is_error
    assert calls[f"docs__search{first.id}"].status == "succeeded"
    again = calls[f"docs__search{second.id}"]
    assert again.status == "failed"
    errors = [
        e.data["error"]
        for e in Event.objects.filter(session=session, kind="tool.finished")
        if e.data.get("error")
    ]
    assert any("MCP server 'ghost' is unavailable" in e for e in errors), errors
    assert any("MCP server 'docs' unreachable" in e for e in errors), errors
    assert_invariants(session)


def test_a_slow_server_times_out_cleanly_and_the_worker_goes_on(mcp_servers, caps_workers):
    mcp_servers.http("docs")
    mcp_servers.slow("docs", 30, tool="search")  # far past the admin's 1 s timeout
    make_profile("mcp_agent", "docs.search", **{"docs.search": {"timeout_s": 1}})
    caps_workers()
    stuck = start_session("ticket:slow-1", "mcp_agent", '[[call:docs__search {"query": "x"}]]')

    turn = wait_turn(stuck, timeout=60)  # 4 attempts of 1 s, and backoff: not 30 s

    assert turn.status == "succeeded"  # the model read the error and answered
    search = ToolCall.objects.get(session=stuck)
    assert search.status == "failed" and search.is_error
    finished = Event.objects.get(session=stuck, kind="tool.finished")  # the audit says why
    assert "stopped answering search: no answer within 1s" in finished.data["error"]
    assert_invariants(stuck)

    mcp_servers.slow("docs", 0, tool="search")  # quick again: the same worker goes on
    after = start_session("ticket:slow-2", "mcp_agent", '[[call:docs__search {"query": "y"}]]')
    assert wait_turn(after, timeout=60).status == "succeeded"
    assert ToolCall.objects.get(session=after).status == "succeeded"


def test_output_that_breaks_its_schema_is_an_error(mcp_servers, caps_workers):
    mcp_servers.lowlevel("partner")  # `status` declares an outputSchema and breaks it
    make_profile("mcp_agent", "partner.status")
    caps_workers()
    session = start_session("ticket:schema", "mcp_agent", "[[call:partner__status {}]]")

    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded"
    status = ToolCall.objects.get(session=session)
    assert status.status == "failed" and status.is_error and status.attempts == 1
    error = Event.objects.get(session=session, kind="tool.finished").data["error"]
    assert "answered status with invalid output" in error
    assert "'not a number' is not of type 'integer'" in error
    assert_invariants(session)
