"""The invariants of issues 4 and 26, checked over the whole system after a run.

Our side is read from the campaign's database; the outside world's side
from the sandbox (/_refunds, and each ticket's replies, notes and
escalations). Effects are counted THERE, never in our own tables.

Each violation is a line naming its invariant (1-10) and what broke;
duplicate and lost effects are also counted on their own for the summary.
Invariants 8-10 (issue 26) judge what the campaign measured while it ran:
pure functions over those figures (settle_problems, self_exit_problems,
steady_problems), so a test can hand them a bad history and see them fail.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import requests
from django.db import connection

from agents.models import Event, Message, Session, SessionRuntime, ToolCall, Turn
from agents.runtime.ownership import LIVE_PROCESSES_SQL
from agents.tools.base import ticket_id_of
from approvals.models import Approval

C = ToolCall.Status
NOT_IDEMPOTENT = "not_idempotent"
# Keyed side effects in the helpdesk: (tool, what the ticket lists).
KEYED_HELPDESK = {"send_reply": "replies", "add_internal_note": "notes"}


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    duplicate_effects: int = 0
    lost_effects: int = 0
    in_doubt: list[str] = field(default_factory=list)  # need a human: listed, not failures
    stats: dict[str, Any] = field(default_factory=dict)

    def fail(self, invariant: int, text: str) -> None:
        self.violations.append(f"[{invariant}] {text}")


class World:
    """Everything the checks read, loaded once after the system settled."""

    def __init__(self, sandbox_url: str) -> None:
        self.sessions = {s.id: s for s in Session.objects.all()}
        self.runtimes = {r.session_id: r for r in SessionRuntime.objects.all()}
        self.turns = list(Turn.objects.all())
        self.calls = list(ToolCall.objects.all().order_by("id"))
        self.approvals = list(Approval.objects.all())
        self.events: dict[int, list[Event]] = defaultdict(list)
        for event in Event.objects.all().order_by("session_id", "seq"):
            self.events[event.session_id].append(event)
        self.messages: dict[int, list[Message]] = defaultdict(list)
        for row in Message.objects.all().order_by("session_id", "position"):
            self.messages[row.session_id].append(row)
        self.calls_by_session: dict[int, list[ToolCall]] = defaultdict(list)
        for call in self.calls:
            self.calls_by_session[call.session_id].append(call)
        self.sandbox_url = sandbox_url
        self.refunds = _get(sandbox_url, "/_refunds")["refunds"]
        self.tickets = {
            key: _get(sandbox_url, f"/helpdesk/tickets/{ticket_id_of(s.key)}")
            for key, s in ((s.key, s) for s in self.sessions.values())
            if ticket_id_of(s.key)
        }


def _get(base: str, path: str) -> dict[str, Any]:
    response = requests.get(f"{base}{path}", timeout=30)
    response.raise_for_status()
    return response.json()


def check_all(world: World) -> Findings:
    found = Findings()
    for session_id, session in world.sessions.items():
        _seqs(found, session, world.events[session_id], world.runtimes[session_id])
        _transcript(found, session, world)
    _refunds(found, world)
    _helpdesk_effects(found, world)
    _settled(found, world)
    _no_open_transactions_or_dead_claims(found, world)
    _approvals(found, world)
    _unknown_outcomes(found, world)
    found.stats = _stats(world)
    return found


# --- 1. gap-free seqs -----------------------------------------------------------------


def seq_problems(seqs: list[int]) -> list[str]:
    """What is wrong with one session's event seqs (in the order stored):
    each must appear once, and together they are 1..n."""
    problems = []
    counts = Counter(seqs)
    twice = sorted(seq for seq, n in counts.items() if n > 1)
    if twice:
        problems.append(f"seqs recorded more than once: {_short(twice)}")
    top = max(seqs, default=0)
    missing = sorted(set(range(1, top + 1)) - set(counts))
    if missing:
        problems.append(f"gaps: seqs {_short(missing)} missing below {top}")
    if not problems and seqs != sorted(seqs):
        problems.append(f"seqs out of order: {_short(seqs)}")
    return problems


def _seqs(found: Findings, session: Session, events: list[Event], runtime) -> None:
    seqs = [e.seq for e in events]
    for problem in seq_problems(seqs):
        found.fail(1, f"{session.key}: {problem}")
    if runtime.last_seq != len(seqs):
        found.fail(1, f"{session.key}: last_seq {runtime.last_seq} but {len(seqs)} events")


# --- 2. no step recorded twice; tool_use/tool_result pairing ----------------------------


def _transcript(found: Findings, session: Session, world: World) -> None:
    rows = world.messages[session.id]
    key = session.key
    if [r.position for r in rows] != list(range(len(rows))):
        found.fail(2, f"{key}: transcript positions have gaps or repeats")
    uses: list[str] = []
    results: Counter[str] = Counter()
    open_uses: list[str] = []
    for row in rows:
        blocks = row.content if isinstance(row.content, list) else []
        if row.role == "assistant":
            if open_uses:
                found.fail(2, f"{key}@{row.position}: a model reply before results of {open_uses}")
            open_uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            uses += open_uses
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                use_id = block.get("tool_use_id")
                results[use_id] += 1
                if use_id not in open_uses:
                    found.fail(2, f"{key}@{row.position}: result for {use_id} out of place")
                else:
                    open_uses.remove(use_id)
            elif block.get("type") == "text" and open_uses:
                found.fail(2, f"{key}@{row.position}: new input before results of {open_uses}")
    if len(uses) != len(set(uses)):
        found.fail(2, f"{key}: a tool_use recorded twice")
    missing = [u for u in uses if results[u] != 1 and u not in open_uses]
    extra = [u for u in results if u not in uses or results[u] > 1]
    if missing or extra:
        found.fail(2, f"{key}: tool_use/tool_result mismatch: missing={missing} extra={extra}")
    calls = world.calls_by_session[session.id]
    if sorted(c.tool_use_id for c in calls) != sorted(uses):
        found.fail(2, f"{key}: tool call rows do not match the transcript's tool_use blocks")
    if open_uses and not any(
        c.tool_use_id in open_uses and c.status in (C.WAITING, C.IN_DOUBT) for c in calls
    ):
        found.fail(2, f"{key}: tool_use {open_uses} without a result and not waiting on a human")
    _step_events(found, session, world)


def _step_events(found: Findings, session: Session, world: World) -> None:
    events = world.events[session.id]
    kinds = Counter(e.kind for e in events)
    replies = sum(1 for r in world.messages[session.id] if r.role == "assistant")
    if kinds["model.replied"] != replies:
        found.fail(2, f"{session.key}: {kinds['model.replied']} model.replied, {replies} replies")
    finished = Counter(e.data.get("tool_use_id") for e in events if e.kind == "tool.finished")
    twice = [u for u, n in finished.items() if n > 1]
    if twice:
        found.fail(2, f"{session.key}: tool results recorded twice: {twice}")
    started = Counter(e.turn_id for e in events if e.kind == "turn.started")
    if any(n > 1 for n in started.values()):
        found.fail(2, f"{session.key}: a turn started twice")
    ends = Counter(
        e.turn_id for e in events if e.kind in ("turn.succeeded", "turn.failed", "turn.canceled")
    )
    for turn in (t for t in world.turns if t.session_id == session.id):
        want = 1 if turn.is_terminal else 0
        if ends[turn.id] != want:
            found.fail(2, f"{session.key}#{turn.number}: {ends[turn.id]} end events, {turn.status}")


# --- 3. refunds: one per allowed call that succeeded, none lost --------------------------


def _refunds(found: Findings, world: World) -> None:
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for refund in world.refunds:
        by_key[refund["key"]].append(refund)
    calls = {c.idempotency_key: c for c in world.calls if c.name == "issue_refund"}
    approvals = {a.tool_call_id: a for a in world.approvals}
    for key, refunds in by_key.items():
        if len(refunds) > 1:
            found.duplicate_effects += len(refunds) - 1
            found.fail(3, f"{len(refunds)} refunds with one idempotency key {key}")
        call = calls.get(key)
        if call is None:
            found.duplicate_effects += 1
            found.fail(3, f"refund {refunds[0]['id']} ({key}) matches no refund call of ours")
        elif call.status == C.IN_DOUBT:
            found.in_doubt.append(
                f"refund call {key} in_doubt; the provider HAS refund {refunds[0]['id']} for it"
            )
        elif call.status != C.SUCCEEDED:
            found.duplicate_effects += 1
            approval = approvals.get(call.id)
            found.fail(
                3,
                f"refund {refunds[0]['id']} exists for call {key} in status {call.status}"
                f" (approval {approval.status if approval else 'none'})",
            )
        elif call.external_id != refunds[0]["id"]:
            found.fail(
                3, f"call {key} recorded refund {call.external_id}, provider has {refunds[0]['id']}"
            )
    for key, call in calls.items():
        if call.status == C.SUCCEEDED and key not in by_key:
            found.lost_effects += 1
            found.fail(3, f"refund call {key} succeeded but the provider has no refund for it")
        elif call.status == C.IN_DOUBT and key not in by_key:
            found.in_doubt.append(f"refund call {key} in_doubt; the provider has no refund for it")
        approval = approvals.get(call.id)
        if approval is None and _needs_approval(call.input):
            found.fail(3, f"refund call {key} above the limit ran without an approval")


def _needs_approval(arguments: dict[str, Any]) -> bool:
    from approvals.policies import requirement_for

    return requirement_for("issue_refund", arguments) is not None


def _helpdesk_effects(found: Findings, world: World) -> None:
    """Keyed helpdesk writes (replies, notes): one per call that ran."""
    for session in world.sessions.values():
        ticket = world.tickets.get(session.key)
        if ticket is None:
            continue
        calls = world.calls_by_session[session.id]
        for tool, listed in KEYED_HELPDESK.items():
            ok = sum(1 for c in calls if c.name == tool and c.status == C.SUCCEEDED)
            doubt = sum(1 for c in calls if c.name == tool and c.status == C.IN_DOUBT)
            have = len(ticket.get(listed, []))
            if have > ok + doubt:
                found.duplicate_effects += have - ok - doubt
                found.fail(3, f"{session.key}: {have} {listed} in the helpdesk, {ok} {tool} ran")
            elif have < ok:
                found.lost_effects += ok - have
                found.fail(3, f"{session.key}: {ok} {tool} succeeded, {have} {listed} exist")


# --- 4. every turn terminal or waiting on a human --------------------------------------------


def blocked_sessions() -> set[int]:
    """Sessions whose current turn waits on a human (a pending approval or an
    in_doubt call): their queued turns wait behind it, which is correct."""
    return set(
        ToolCall.objects.filter(
            status__in=[C.WAITING, C.IN_DOUBT], turn__status=Turn.Status.WAITING
        ).values_list("session_id", flat=True)
    )


def _settled(found: Findings, world: World) -> None:
    blocked = {
        c.session_id
        for c in world.calls
        if c.status in (C.WAITING, C.IN_DOUBT)
        and next(t for t in world.turns if t.id == c.turn_id).status == Turn.Status.WAITING
    }
    for turn in world.turns:
        if turn.is_terminal:
            continue
        key = world.sessions[turn.session_id].key
        if turn.session_id in blocked and turn.status in (
            Turn.Status.WAITING,
            Turn.Status.ACCEPTED,
        ):
            continue
        runtime = world.runtimes[turn.session_id]
        found.fail(
            4,
            f"{key}#{turn.number} is {turn.status} (owner={runtime.owner!r} "
            f"wake_at={runtime.wake_at} updated_at={runtime.updated_at:%H:%M:%S.%f})",
        )
    for session in world.sessions.values():
        if session.status == Session.Status.RUNNING:
            found.fail(4, f"{session.key}: session still 'running' after healing")
    for approval in world.approvals:
        if approval.status == Approval.Status.PENDING:
            found.fail(4, f"approval {approval.id} still pending after healing")


# --- 5. no open transaction, no claim held by a dead worker --------------------------------


# A transaction idle between two of its statements for a moment is work in
# progress (beat's periodic tasks go on after healing); one still open after
# this long is left open (or held across I/O).
OPEN_TRANSACTION_GRACE_S = 5.0

IDLE_IN_TRANSACTION_SQL = (
    "SELECT pid, xact_start, application_name, now() - xact_start, left(query, 200) "
    "FROM pg_stat_activity WHERE datname = current_database() "
    "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
)


def _open_transactions() -> dict[tuple[int, Any], tuple[str, Any, str]]:
    with connection.cursor() as cursor:
        cursor.execute(IDLE_IN_TRANSACTION_SQL)
        return {(pid, start): (app, age, query) for pid, start, app, age, query in cursor}


def _no_open_transactions_or_dead_claims(found: Findings, world: World) -> None:
    no_open_transactions(found)
    _no_dead_claims(found, world)


def no_open_transactions(found: Findings) -> None:
    """A transaction (backend and start) idle in it at the first look and
    still after OPEN_TRANSACTION_GRACE_S fails invariant 5. One caught between
    two of its statements has ended by then: a webhook delivery's, 6 ms old,
    failed a CI run when it counted at first sight."""
    still = _open_transactions()
    deadline = time.monotonic() + OPEN_TRANSACTION_GRACE_S
    while still and time.monotonic() < deadline:
        time.sleep(0.1)
        now = _open_transactions()
        still = {key: now[key] for key in still if key in now}
    for (pid, _), (app, age, query) in still.items():
        found.fail(5, f"backend {pid} ({app}) idle in transaction for {age}: {query}")


def _no_dead_claims(found: Findings, world: World) -> None:
    with connection.cursor() as cursor:
        # Claims name their worker process; a live one holds its liveness lock
        # (agents/runtime/ownership.py).
        cursor.execute(LIVE_PROCESSES_SQL)
        live = {row[0] for row in cursor.fetchall()}
    for runtime in world.runtimes.values():
        if runtime.owner and runtime.owner_process not in live:
            key = world.sessions[runtime.session_id].key
            found.fail(5, f"{key}: claimed by {runtime.owner}, whose process is dead")


# --- 6. approvals decided at most once; expired never executed --------------------------------


def _approvals(found: Findings, world: World) -> None:
    decided = Counter()
    for events in world.events.values():
        for event in events:
            if event.kind in ("approval.decided", "approval.expired"):
                decided[event.data.get("approval_id")] += 1
    refunded = {r["key"] for r in world.refunds}
    calls = {c.id: c for c in world.calls}
    for approval in world.approvals:
        if decided[approval.id] > 1:
            found.fail(6, f"approval {approval.id} decided {decided[approval.id]} times")
        call = calls[approval.tool_call_id]
        if approval.status == Approval.Status.PENDING:
            continue
        if approval.status != Approval.Status.CANCELED and decided[approval.id] != 1:
            found.fail(6, f"approval {approval.id} is {approval.status} with no decision event")
        if approval.status in (Approval.Status.EXPIRED, Approval.Status.DENIED):
            ran = call.status not in (C.DENIED,) or call.idempotency_key in refunded
            if ran:
                found.fail(
                    6,
                    f"approval {approval.id} {approval.status} but its call {call.status}"
                    f"{' and a refund exists' if call.idempotency_key in refunded else ''}",
                )
        if approval.status == Approval.Status.APPROVED and approval.edited_arguments:
            if call.input != approval.edited_arguments:
                found.fail(6, f"approval {approval.id}: the call ran with unedited arguments")
            refund = next((r for r in world.refunds if r["key"] == call.idempotency_key), None)
            wanted = approval.edited_arguments.get("amount_cents")
            if refund is not None and refund["amount"] != wanted:
                found.fail(
                    6, f"approval {approval.id}: refunded {refund['amount']}, edited {wanted}"
                )


# --- 7. unknown outcomes: in_doubt, visible, never resent when not idempotent -----------------


def _unknown_outcomes(found: Findings, world: World) -> None:
    for call in world.calls:
        events = world.events[call.session_id]
        mine = [e for e in events if e.data.get("tool_use_id") == call.tool_use_id]
        key = f"{world.sessions[call.session_id].key} {call.name} {call.tool_use_id}"
        if call.kind == NOT_IDEMPOTENT:
            sent = attempts_sent(call.attempts, mine)
            if sent > 1 or any(e.kind == "tool.reissued" for e in mine):
                found.fail(7, f"{key}: not idempotent, yet sent {sent} times")
        if call.status == C.IN_DOUBT:
            if not any(e.kind == "tool.in_doubt" for e in mine):
                found.fail(7, f"{key}: in_doubt without a tool.in_doubt event (invisible)")
            if call.name != "issue_refund":
                found.in_doubt.append(
                    f"{key}: in_doubt ({call.output[:100]!r}){_effect(call, world)}"
                )
    for session in world.sessions.values():
        ticket = world.tickets.get(session.key)
        if ticket is None:
            continue
        calls = [c for c in world.calls_by_session[session.id] if c.name == "escalate_to_human"]
        ok = sum(1 for c in calls if c.status == C.SUCCEEDED)
        doubt = sum(1 for c in calls if c.status == C.IN_DOUBT)
        have = len(ticket.get("escalations", []))
        if have > ok + doubt:
            found.duplicate_effects += have - ok - doubt
            found.fail(7, f"{session.key}: {have} escalations for {ok + doubt} calls (resent)")
        elif have < ok:
            found.lost_effects += ok - have
            found.fail(7, f"{session.key}: {ok} escalations succeeded, {have} exist")


# Events that put an attempt back because it certainly never left: its
# provider refused every try (tool.unavailable), or the slot that lost its
# claim meanwhile said so (tool.never_sent, when it sent the call back to run).
NEVER_LEFT = {"tool.unavailable": None, "tool.never_sent": {"to_run", "resumed", "closed"}}


def attempts_sent(attempts: int, events: list[Event]) -> int:
    """A call's attempts that may have left the process: all of them, less
    those its events say were put back before they could."""
    back = 0
    for event in events:
        if event.kind in NEVER_LEFT:
            thens = NEVER_LEFT[event.kind]
            back += thens is None or event.data.get("then") in thens
    return attempts - back


def _effect(call: ToolCall, world: World) -> str:
    """Whether an in_doubt escalation happened, as far as the helpdesk shows."""
    ticket = world.tickets.get(world.sessions[call.session_id].key)
    if call.name != "escalate_to_human" or ticket is None:
        return ""
    calls = world.calls_by_session[call.session_id]
    ok = sum(1 for c in calls if c.name == call.name and c.status == C.SUCCEEDED)
    have = len(ticket.get("escalations", []))
    return "; it DID happen" if have > ok else "; it never reached the helpdesk"


# --- 8. settled soon after the faults stop ---------------------------------------------------


def settle_problems(settled_after_s: float | None, limit_s: float) -> list[str]:
    """Every accepted turn ends or waits on a person within `limit_s` of the
    last fault's end (the campaign measures when that first held)."""
    if settled_after_s is None:
        return ["not every session settled after the faults stopped (the deadline passed)"]
    if settled_after_s > limit_s:
        return [
            f"every session settled {settled_after_s:.1f}s after the faults stopped (> {limit_s:.0f}s)"
        ]
    return []


# --- 9. no process exited by itself -------------------------------------------------------------


def self_exit_problems(exits: list[str]) -> list[str]:
    """A worker, beat, Redis, PostgreSQL or the sandbox that exited without the
    nemesis stopping it (the supervisor restarted it, and says so here)."""
    return [f"process died by itself: {line}" for line in exits]


# --- 10. connections and memory steady ----------------------------------------------------------


def steady_problems(
    samples: list[tuple[str, int, dict[str, float]]],
    conn_bound: int,
    rss_factor: float = 2.0,
    rss_slack_mb: float = 100.0,
) -> list[str]:
    """`samples` are (phase, worker connections, RSS MB by worker) taken once
    a second: phase "warmup" before the first fault, "run" and "settling"
    under and after the faults, "after" once everything settled.

    Connections grow with processes, never with faults: no sample above
    `conn_bound` (processes x per-process pool). After the faults, each
    worker's memory is back within `rss_factor` x its warm-up level (plus
    `rss_slack_mb`): a fault that leaks (threads, connections, buffers
    kept for sessions it lost) shows here."""
    problems = []
    over = [(phase, conns) for phase, conns, _ in samples if conns > conn_bound]
    if over:
        worst = max(over, key=lambda pc: pc[1])
        problems.append(
            f"{len(over)} samples with more worker connections than the bound {conn_bound} "
            f"(worst {worst[1]} while {worst[0]})"
        )
    after = [s for s in samples if s[0] == "after"]
    warm = [s for s in samples if s[0] == "warmup"]
    if not after:
        problems.append("no sample after the faults: the steady level was not measured")
        return problems
    level = max(conns for _, conns, _ in after)
    if level > conn_bound:
        problems.append(f"{level} worker connections after the faults (bound {conn_bound})")
    base: dict[str, float] = {}
    for _, _, rss in warm:
        for name, mb in rss.items():
            base[name] = max(base.get(name, 0.0), mb)
    for name, mb in sorted(after[-1][2].items()):
        if name in base and mb > base[name] * rss_factor + rss_slack_mb:
            problems.append(
                f"{name}: {mb:.0f} MB after the faults, {base[name]:.0f} MB in the warm-up"
            )
    return problems


def add_run_findings(
    found: Findings,
    *,
    settled_after_s: float | None,
    settle_limit_s: float,
    exits: list[str],
    samples: list[tuple[str, int, dict[str, float]]],
    conn_bound: int,
) -> None:
    for problem in settle_problems(settled_after_s, settle_limit_s):
        found.fail(8, problem)
    for problem in self_exit_problems(exits):
        found.fail(9, problem)
    for problem in steady_problems(samples, conn_bound):
        found.fail(10, problem)


# --- figures for the report ------------------------------------------------------------------


def _stats(world: World) -> dict[str, Any]:
    kinds = Counter(e.kind for events in world.events.values() for e in events)
    return {
        "sessions": len(world.sessions),
        "sessions_by_status": Counter(s.status for s in world.sessions.values()),
        "turns": len(world.turns),
        "turns_by_status": Counter(t.status for t in world.turns),
        "steps": kinds["model.replied"] + kinds["tool.finished"],
        "model_replies": kinds["model.replied"],
        "events": sum(kinds.values()),
        "recoveries": kinds["recovery"],
        "reissues": kinds["tool.reissued"],
        "model_failures": kinds["model.failed"],
        "tool_calls": len(world.calls),
        "tool_calls_by_status": Counter(c.status for c in world.calls),
        "tool_calls_by_name": Counter(c.name for c in world.calls),
        "refunds": len(world.refunds),
        "refunded_cents": sum(r["amount"] for r in world.refunds),
        "approvals_by_status": Counter(a.status for a in world.approvals),
        "failed_turn_errors": Counter(t.error[:60] for t in world.turns if t.status == "failed"),
    }


def _short(values: list[int]) -> str:
    return str(values if len(values) < 20 else values[:10] + ["..."] + values[-5:])
