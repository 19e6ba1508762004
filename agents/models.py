"""Durable state of agent sessions: sessions, turns, transcript, tool calls, events.

Statuses change in exactly one place each: the writers of agents/transitions.py
(and the hot path's statements beside them, which follow its move tables); the
CheckConstraints here are the database's backstop against anything else.

The hot path (one agent step = two commits) writes these tables with a few
hand-written statements in agents/runtime/store/hot.py; everything else uses the
ORM. Column names here are therefore part of that module's contract.

NO_FK_CHECK: the rows written on every step or turn (Event, which carries
the transcript; ToolCall; Turn) and the runtime row reference their session
(and turn) without a database foreign-key constraint. Each checked insert
would run a referential-integrity query that also takes (and WAL-logs) a KEY
SHARE lock on the session row; these rows are only written while holding
that session's lock (the runtime row with the session, in one transaction),
so the reference cannot dangle. Deleting a session still cascades through
the ORM.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Q

from agents.fields import CompactJSONField


def _status_constraint(name: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(status__in=choices.values), name=name)


class SessionStatus(models.TextChoices):
    IDLE = "idle"
    RUNNING = "running"  # has runnable work (what the sweeper looks for)
    WAITING = "waiting_for_approval"
    # On a sub-agent's answer: another session works, no person is needed.
    WAITING_SUBAGENT = "waiting_for_subagent"
    IN_DOUBT = "in_doubt"
    PAUSED = "paused"  # a session budget is spent: waits for an admin to raise it
    FAILED = "failed"
    CANCELED = "canceled"


class TurnStatus(models.TextChoices):
    ACCEPTED = "accepted"
    RUNNING = "running"
    WAITING = "waiting_for_approval"
    WAITING_SUBAGENT = "waiting_for_subagent"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class ToolCallStatus(models.TextChoices):
    PENDING = "pending"
    WAITING = "waiting_for_approval"
    WAITING_SUBAGENT = (
        "waiting_for_subagent"  # handed to a child session (capabilities/subagents.py)
    )
    APPROVED = "approved"
    DENIED = "denied"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    IN_DOUBT = "in_doubt"
    CANCELED = "canceled"


# A tool call in one of these keeps its turn parked: for a person (an approval,
# an unknown outcome) or for a sub-agent's answer.
PARKED_CALLS = (ToolCallStatus.WAITING, ToolCallStatus.WAITING_SUBAGENT, ToolCallStatus.IN_DOUBT)


# Budget defaults come from settings when a session is created (callables, so
# that a migration does not freeze today's value). None is no limit.
def default_max_turn_steps() -> int:
    return settings.AGENTDESK_MAX_TURN_STEPS


def default_max_turn_tokens() -> int | None:
    return settings.AGENTDESK_MAX_TURN_TOKENS or None


def default_max_turn_cost_micros() -> int | None:
    return round(settings.AGENTDESK_MAX_TURN_COST_USD * 1_000_000) or None


def default_max_turn_seconds() -> int | None:
    return settings.AGENTDESK_MAX_TURN_SECONDS or None


def default_max_total_tokens() -> int | None:
    return settings.AGENTDESK_MAX_SESSION_TOKENS or None


def default_max_total_cost_micros() -> int | None:
    return round(settings.AGENTDESK_MAX_SESSION_COST_USD * 1_000_000) or None


class Session(models.Model):
    """One durable agent instance, addressed by its domain key (`ticket:4812`).

    The session is the unit of serialization: every write to its turns,
    transcript, tool calls, approvals and events first takes the lock of its
    SessionRuntime row (lock order: that row, then anything below it), which
    is also what makes the event `seq` gap-free.
    """

    Status = SessionStatus

    class MessagePolicy(models.TextChoices):
        QUEUE = "queue"
        INTERRUPT = "interrupt"
        REJECT = "reject"

    key = models.CharField(max_length=200)  # unique: see Meta
    profile = models.CharField(max_length=64, default="support_triage")
    status = models.CharField(
        max_length=24, choices=SessionStatus.choices, default=SessionStatus.IDLE
    )
    message_policy = models.CharField(
        max_length=12, choices=MessagePolicy.choices, default=MessagePolicy.QUEUE
    )
    title = models.CharField(max_length=300, blank=True)
    # Not indexed: read by equality only when an admin starts a bulk job for
    # a customer (agents/features/jobs.py), while an index would be written on every
    # session status change (twice per turn, non-HOT).
    customer = models.CharField(max_length=200, blank=True)
    context = models.JSONField(default=dict, blank=True)  # ticket / customer facts
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # Budgets (agents/budgets.py), checked before every model call. Crossing a
    # turn limit fails the turn; crossing a session limit (all turns) pauses
    # the session until an admin raises it. Money in micro-dollars; None: no limit.
    max_turn_steps = models.PositiveIntegerField(default=default_max_turn_steps)
    max_turn_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, default=default_max_turn_tokens
    )
    max_turn_cost_micros = models.PositiveBigIntegerField(
        null=True, blank=True, default=default_max_turn_cost_micros
    )
    max_turn_seconds = models.PositiveIntegerField(
        null=True, blank=True, default=default_max_turn_seconds
    )
    max_total_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, default=default_max_total_tokens
    )
    max_total_cost_micros = models.PositiveBigIntegerField(
        null=True, blank=True, default=default_max_total_cost_micros
    )

    class Meta:
        constraints = [
            _status_constraint("session_status_valid", SessionStatus),
            # A constraint rather than unique=True: no LIKE twin, which every
            # status change would write too (key prefixes are only searched by
            # forks, rarely, in agents/features/forks.py).
            models.UniqueConstraint(fields=["key"], name="session_key_unique"),
        ]
        indexes = [
            # The desk lists sessions per status, most recently active first.
            models.Index(fields=["status", "-updated_at"], name="session_status_idx"),
        ]
        permissions = [
            ("operate_session", "Can post to, cancel and resume agent sessions"),
            ("view_history", "Can read and export a session's full history"),
            ("fork_session", "Can fork a session from a recorded step"),
            ("raise_budget", "Can raise a session's spend limits (resumes a paused session)"),
        ]

    def __str__(self) -> str:
        return self.key


class SessionRuntime(models.Model):
    """The hot half of a session: what the step engine updates on every step.

    Kept apart from Session so that the row rewritten twice per step is narrow
    (about 100 bytes instead of the session's descriptive columns), which is
    most of the write-ahead log a step costs. This row's lock is THE session
    lock: the engine and every human action take it before touching the
    session's turns, transcript, tool calls, approvals or events.
    """

    session = models.OneToOneField(  # no database constraint: see NO_FK_CHECK
        Session,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="runtime",
        db_constraint=False,
    )
    # Fencing token: bumped by every claim. A record statement applies only
    # while the fence it carries is still current, so a worker that lost its
    # claim (its connection was killed, another worker took over) can never
    # record a stale step.
    fence = models.BigIntegerField(default=0)
    # The worker slot holding the claim (`host:pid/slot`), '' when released.
    owner = models.CharField(max_length=100, blank=True)
    # The liveness lock key of the worker process that holds the claim
    # (agents/runtime/ownership.py). A claim that finds `owner` set and this
    # process's lock free found a dead owner: that is a recovery.
    owner_process = models.BigIntegerField(default=0, db_default=0)
    last_seq = models.BigIntegerField(default=0)  # the last event seq handed out
    transcript_len = models.IntegerField(default=0)  # the next transcript position
    current_turn_id = models.BigIntegerField(null=True)
    # Set by a human under this row's lock; every record statement returns it,
    # so the worker notices a cancel at the next step boundary for free.
    cancel_requested = models.BooleanField(default=False)
    step_attempts = models.IntegerField(default=0)  # claims of the current step
    wake_at = models.DateTimeField(null=True)  # not before (a step's retry backoff)
    turn_steps = models.IntegerField(default=0)
    turn_input_tokens = models.BigIntegerField(default=0)
    turn_output_tokens = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # Spend in micro-dollars (agents/budgets.py::cost_micros), this turn and in all.
    # (db_default too: rows inserted by hand-written SQL get 0 as well.)
    turn_cost_micros = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The few sessions with a cancel pending: what the cancel watcher
            # polls while this process streams (agents/runtime/cancel.py).
            models.Index(
                fields=["session"],
                name="runtime_cancel_pending",
                condition=models.Q(cancel_requested=True),
            )
        ]

    def __str__(self) -> str:
        return f"runtime of session {self.session_id} (fence {self.fence})"


class Turn(models.Model):
    """One unit of agent work started by one input."""

    Status = TurnStatus

    TERMINAL = frozenset({TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELED})

    class Trigger(models.TextChoices):
        CUSTOMER = "customer_message"
        STAFF = "staff_message"
        SCHEDULED = "scheduled"
        API = "api"

    session = models.ForeignKey(  # no database constraint: see NO_FK_CHECK
        Session, on_delete=models.CASCADE, related_name="turns", db_constraint=False
    )
    number = models.PositiveIntegerField()
    status = models.CharField(
        max_length=24, choices=TurnStatus.choices, default=TurnStatus.ACCEPTED
    )
    trigger = models.CharField(max_length=24, choices=Trigger.choices, default=Trigger.API)
    input = models.TextField()
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error = models.TextField(blank=True)
    steps = models.IntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            _status_constraint("turn_status_valid", TurnStatus),
            models.UniqueConstraint(fields=["session", "number"], name="turn_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.number} {self.status}"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL


class Message(models.Model):
    """One entry of a session's transcript, in Anthropic content-block form.

    A read-only view (`agents_message`) over the events that carry a
    transcript row (`Event.position` set): the step that produced a row and
    the row are one durable record, written once (see Event). Append-only:
    a step adds rows, nothing rewrites them. Each tool result is its own row
    (role "user", one tool_result block); consecutive user rows are merged
    into one message when a request is built, which is what the Messages API
    wants, while each result is stored exactly once. Write rows as events
    (agents.events.EventSpec with a `row`), never through this model.
    """

    pk = models.CompositePrimaryKey("session", "position")
    session = models.ForeignKey(  # no database constraint: see NO_FK_CHECK
        Session, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    position = models.IntegerField()
    turn_id = models.BigIntegerField()
    role = models.CharField(max_length=10)
    content = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        managed = False  # a view: migration 0008
        ordering = ["session_id", "position"]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.position} {self.role}"


class ToolCall(models.Model):
    """One `tool_use` block from the model and what became of it."""

    Status = ToolCallStatus

    # A call in one of these has its tool_result in the transcript.

    # Indexed once, by (session, tool_use_id): see Meta.
    session = models.ForeignKey(  # no database constraint: see NO_FK_CHECK
        Session,
        on_delete=models.CASCADE,
        related_name="tool_calls",
        db_index=False,
        db_constraint=False,
    )
    turn = models.ForeignKey(  # no index: a turn's calls are found by session
        Turn,
        on_delete=models.CASCADE,
        related_name="tool_calls",
        db_constraint=False,
        db_index=False,
    )
    tool_use_id = models.CharField(max_length=100)
    # `<session key>:<tool_use_id>`: derived from durable data (the recorded
    # model reply), so it is the same on every replay. Unique because
    # (session, tool_use_id) is (the session key is unique and never changes).
    idempotency_key = models.CharField(max_length=320)
    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=24)  # see agents/tools/base.py::Kind
    status = models.CharField(max_length=24, choices=ToolCallStatus.choices)
    input = models.JSONField()
    # The result lives once, in the transcript row at result_position; only a
    # note that has no transcript row yet (a denial, an in-doubt outcome) or
    # a refusal is kept here.
    output = models.TextField(blank=True)
    result_position = models.IntegerField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    external_id = models.CharField(max_length=200, blank=True)
    attempts = models.IntegerField(default=0)
    message_position = models.IntegerField()  # the assistant message it came from
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # An inner step of a running call (a Code Mode host call, a browser
    # action; agents/gate.py, runtime/steps.py): `parent` is the outer call,
    # `step` its number n, tool_use_id `<outer tool_use_id>:<n>` (so the key
    # is `<session key>:<tool_use_id>:<n>`). It has no transcript row of its
    # own: the outer call's result is the model's. `snapshot` is the tool's
    # state after the step (a program's, a browser's), recorded with it.
    parent = models.ForeignKey(  # no database constraint: see NO_FK_CHECK
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",  # the desk sets `call.inner_steps` itself (agents.selectors)
        db_constraint=False,
        db_index=False,  # found by (session, tool_use_id) prefix or by parent in a turn
    )
    step = models.PositiveIntegerField(null=True, blank=True)
    snapshot = models.BinaryField(null=True, blank=True)

    class Meta:
        constraints = [
            _status_constraint("toolcall_status_valid", ToolCallStatus),
            # The one index of the table besides its primary key, written on
            # every step: the idempotency key's uniqueness, and the way to a
            # session's (and, filtered, a turn's) calls.
            models.UniqueConstraint(
                fields=["session", "tool_use_id"], name="toolcall_session_use_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.status} ({self.idempotency_key})"


class Event(models.Model):
    """Append-only log with a gap-free per-session sequence number.

    Written in the same transaction as the state it describes; the one source
    for live pushes, replay after a reconnect, the timeline and the audit.

    An event that adds a transcript row carries it (`position`, `role`,
    `content`): a model reply is its `model.replied` event, a tool result its
    `tool.finished`, a turn's input its `turn.started`. One row per fact, not
    an event naming a transcript row written beside it: every step writes one
    heap tuple and one index entry less. `Message` reads these rows.
    """

    pk = models.CompositePrimaryKey("session", "seq")
    session = models.ForeignKey(  # no database constraint: see NO_FK_CHECK
        Session, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    seq = models.BigIntegerField()
    turn_id = models.BigIntegerField(null=True)
    kind = models.CharField(max_length=40)
    data = CompactJSONField(default=dict)  # `json`, not `jsonb`: see the field
    actor = models.CharField(max_length=150, blank=True)  # username or worker id
    created_at = models.DateTimeField()
    # The transcript row this event adds, if any (see Message).
    position = models.IntegerField(null=True, blank=True)
    role = models.CharField(max_length=10, blank=True, default="", db_default="")
    content = models.JSONField(null=True, blank=True)
    # sha256(previous event's hash || this row's canonical text), set by the
    # database (trigger agentdesk_event_chain, migration 0014) on insert; the
    # session's chain is what `manage.py audit verify` checks (agents/audit.py).
    # Last column: added after the hot path's columns, which it never writes.
    hash = models.BinaryField(null=True, editable=False)

    class Meta:
        ordering = ["session_id", "seq"]
        # The operations page aggregates the last hours of events. BRIN: 32 kB
        # for 2,000,000 rows (a btree is 43 MB), and inserts in time order
        # leave the newest range unsummarized, so the hot path pays nothing.
        indexes = [BrinIndex(fields=["created_at"], name="event_created_brin")]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.seq} {self.kind}"


class MemorySnapshot(models.Model):
    """A compact summary of a session's transcript up to a position.

    Model calls read the latest summary plus the rows from `upto_position`
    on (agents/runtime/memory.py); the rows stay for the desk and history.
    At most one per position: a step re-done after a crash finds the row.
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="memories")
    upto_position = models.IntegerField()  # summarizes the rows with position < this
    summary = models.TextField()
    model = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also the index a claim reads the latest snapshot through.
            models.UniqueConstraint(fields=["session", "upto_position"], name="memory_upto_unique")
        ]

    def __str__(self) -> str:
        return f"memory of session {self.session_id} up to {self.upto_position}"


class InboundDelivery(models.Model):
    """Webhook deliveries already accepted, so a replayed one changes nothing."""

    event_id = models.CharField(max_length=100, unique=True)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.event_id


# --- Work that outlives a turn (issue 5): follow-ups, jobs, archives ---------------


class FollowUp(models.Model):
    """A durable "wake this session later" (the agent's schedule_followup tool,
    or a person). Fired by beat (agents/features/followups.py): the row is claimed with
    FOR UPDATE SKIP LOCKED and marked fired in the same transaction that posts
    its message into the session, so it fires exactly once, whatever restarts
    or how many beat processes run.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        FIRED = "fired"
        CANCELED = "canceled"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="followups")
    # The scheduling tool call's idempotency key (`<session key>:<tool_use_id>`):
    # the same call sent again finds this row instead of making a second one.
    key = models.CharField(max_length=320, unique=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    due_at = models.DateTimeField()
    note = models.TextField()
    cancel_on_reply = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, blank=True)  # username or "agent"
    created_at = models.DateTimeField(auto_now_add=True)
    fired_at = models.DateTimeField(null=True, blank=True)
    fired_turn_id = models.BigIntegerField(null=True, blank=True)
    canceled_at = models.DateTimeField(null=True, blank=True)
    canceled_by = models.CharField(max_length=150, blank=True)
    cancel_reason = models.CharField(max_length=300, blank=True)
    attempts = models.IntegerField(default=0)  # fire attempts refused (e.g. reject policy)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "fired", "canceled"]),
                name="followup_status_valid",
            )
        ]
        # Beat asks "what is due" every few seconds: only pending rows, by time.
        indexes = [
            models.Index(fields=["due_at"], condition=Q(status="pending"), name="followup_due_idx")
        ]

    def __str__(self) -> str:
        return f"follow-up {self.key} {self.status} at {self.due_at:%Y-%m-%d %H:%M}"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; another is scheduled (next_attempt_at)
    DEAD = "dead"  # out of attempts: waits for a person (retry from the desk)


class Job(models.Model):
    """Long-running or bulk work run as queued Celery work, not inside a turn
    (agents/features/jobs.py). Each item is done idempotently, so a retried attempt
    carries on where the last one stopped."""

    Status = JobStatus

    kind = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=3)
    last_error = models.TextField(blank=True)
    items_done = models.IntegerField(default=0)
    items_total = models.IntegerField(null=True, blank=True)
    done_keys = models.JSONField(default=list, blank=True)  # items already done
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [_status_constraint("job_status_valid", JobStatus)]
        indexes = [models.Index(fields=["status", "-created_at"], name="job_status_idx")]

    def __str__(self) -> str:
        return f"job {self.pk} {self.kind} {self.status}"


class SessionArchive(models.Model):
    """What retention removed from a closed session: its transcript rows and
    events up to a point, as gzip-compressed JSON (agents/features/retention.py)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="archives")
    upto_position = models.IntegerField()  # transcript rows with position < this
    upto_seq = models.BigIntegerField()  # events with seq <= this
    messages = models.IntegerField()
    events = models.IntegerField()
    raw_bytes = models.BigIntegerField()  # the JSON before compression
    data = models.BinaryField()  # gzip(JSON {"session", "messages", "events"})
    created_at = models.DateTimeField(auto_now_add=True)
    # The hash of the event at upto_seq: the next live event chains from it.
    last_hash = models.BinaryField(null=True, editable=False)

    def __str__(self) -> str:
        return f"archive of session {self.session_id} up to seq {self.upto_seq}"


class AuditEntry(models.Model):
    """A refused or security-relevant attempt that concerns no session's log:
    a 403 on a decision or an operation, a forged (CSRF) request, a login
    lockout. Append-only in the database (trigger, migration 0014); written
    by agents/audit.py."""

    kind = models.CharField(max_length=40)  # e.g. decision.refused, csrf.refused
    actor = models.CharField(max_length=150, blank=True)  # username, or "" when anonymous
    client_address = models.GenericIPAddressField(null=True, blank=True)
    method = models.CharField(max_length=10, blank=True)
    path = models.CharField(max_length=300, blank=True)
    session_id = models.BigIntegerField(null=True, blank=True)  # when one is concerned
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["kind", "created_at"], name="auditentry_kind_idx")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.kind} {self.actor}"
