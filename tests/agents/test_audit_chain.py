"""An audit trail nobody can rewrite: event, decision and audit rows refuse
UPDATE and DELETE in the database; each session's events carry a hash chain
that `manage.py audit verify` checks, archived events included, naming the
first bad seq after a row is changed with the triggers bypassed."""

from __future__ import annotations

import gzip
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.utils import timezone

from agents.audit import audit_record, session_verify
from agents.features.retention import sessions_prune
from agents.models import Event, Session, SessionArchive
from approvals.models import Approval, Decision
from approvals.services import approval_decide
from tests.agents.helpers import deliver_ticket, triggers_bypassed, wait_turn
from tests.dashboard import factories
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _refused(sql: str, params=()) -> str:
    with pytest.raises(DatabaseError) as raised, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return str(raised.value)


def _verify(key: str) -> str:
    out = io.StringIO()
    call_command("audit", "verify", "--session", key, stdout=out)
    return out.getvalue()


def _verify_fails(key: str) -> str:
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit", "verify", "--session", key, stdout=out)
    return out.getvalue()


def test_update_and_delete_of_an_event_row_fail_at_the_database():
    call = factories.parked_call()
    sid = call.session_id
    update = _refused("UPDATE agents_event SET kind = 'x' WHERE session_id = %s", [sid])
    delete = _refused("DELETE FROM agents_event WHERE session_id = %s AND seq = 1", [sid])
    assert "UPDATE on agents_event refused: the audit trail is append-only" in update
    assert "DELETE on agents_event refused" in delete
    with pytest.raises(DatabaseError):
        with transaction.atomic():
            Event.objects.filter(session_id=sid).update(actor="mallory")
    assert not Event.objects.filter(session_id=sid, actor="mallory").exists()


def test_decision_and_audit_rows_are_append_only_too(bob):
    approval = factories.pending_approval()
    approval_decide(approval_id=approval.id, user=bob, decision="deny", reason="no")
    audit_record(kind="decision.refused", actor="alice")
    assert "append-only" in _refused("UPDATE approvals_decision SET actor = 'mallory'")
    assert "append-only" in _refused("DELETE FROM approvals_decision")
    assert "append-only" in _refused("UPDATE agents_auditentry SET actor = 'mallory'")
    assert "append-only" in _refused("DELETE FROM agents_auditentry")
    # allow_prune opens events only, and only for deletes
    assert "append-only" in _refused(
        "SET LOCAL agentdesk.allow_prune = on; DELETE FROM approvals_decision"
    )


def test_verify_passes_untouched_and_names_the_first_altered_seq(bob):
    call = factories.parked_call()
    key = Session.objects.get(pk=call.session_id).key
    approval_decide(approval_id=call.approval.id, user=bob, decision="deny", reason="no")
    last = Event.objects.filter(session_id=call.session_id).count()
    assert last >= 5

    assert f"ok: {key}: events 1..{last} complete and untouched (0 archived)" in _verify(key)

    with triggers_bypassed():  # a superuser rewrites history
        Event.objects.filter(session_id=call.session_id, seq=3).update(actor="mallory")
    assert f"FAILED: {key}: seq 3 altered: its hash does not match its content" in _verify_fails(
        key
    )


def test_verify_names_a_deleted_row_and_a_deleted_tail():
    call = factories.parked_call()
    sid = call.session_id
    last = Event.objects.filter(session_id=sid).count()
    with triggers_bypassed():
        Event.objects.filter(session_id=sid, seq=last).delete()
    verdict = session_verify(session_id=sid)
    assert not verdict.ok and verdict.bad_seq == last and "missing" in verdict.reason
    with triggers_bypassed():
        Event.objects.filter(session_id=sid, seq=2).delete()
    assert session_verify(session_id=sid).bad_seq == 2


def test_a_row_inserted_with_the_chain_trigger_off_is_named():
    call = factories.parked_call()
    sid = call.session_id
    with triggers_bypassed(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agents_event (session_id, seq, kind, data, actor, created_at, role)"
            " SELECT %s, last_seq + 1, 'forged', '{}', 'mallory', now(), '' FROM"
            " agents_sessionruntime WHERE session_id = %s",
            [sid, sid],
        )
        cursor.execute(
            "UPDATE agents_sessionruntime SET last_seq = last_seq + 1 WHERE session_id = %s", [sid]
        )
    verdict = session_verify(session_id=sid)
    assert not verdict.ok and "no hash" in verdict.reason


def _old_closed(session_id: int) -> None:
    from agents.models import Turn

    Turn.objects.filter(session_id=session_id).update(status="succeeded")
    Session.objects.filter(pk=session_id).update(
        status=Session.Status.IDLE, updated_at=timezone.now() - timedelta(days=40)
    )


def test_verify_proves_history_archived_by_retention_and_the_live_rows_after_it(broker):
    session = factories.session()
    for _ in range(3):
        factories.turn(session)
    _old_closed(session.id)
    archived = Event.objects.filter(session=session).count()

    report = sessions_prune(days=30, batch_size=4)  # several batches through allow_prune

    assert report.events == archived and not Event.objects.filter(session=session).exists()
    verdict = session_verify(session_id=session.id)
    assert verdict.ok and verdict.archived == archived == verdict.events
    factories.turn(session)  # new live rows chain from the archive's last hash
    later = session_verify(session_id=session.id)
    assert later.ok and later.archived == archived and later.events > archived
    assert f"({archived} archived)" in _verify(session.key)


def test_an_altered_archive_is_named(broker):
    session = factories.session()
    factories.turn(session)
    _old_closed(session.id)
    sessions_prune(days=30, batch_size=100)
    archive = SessionArchive.objects.get(session=session)
    body = json.loads(gzip.decompress(bytes(archive.data)))
    body["events"][1]["actor"] = "mallory"
    with triggers_bypassed():
        SessionArchive.objects.filter(pk=archive.pk).update(
            data=gzip.compress(json.dumps(body).encode())
        )
    verdict = session_verify(session_id=session.id)
    assert not verdict.ok and verdict.bad_seq == 2 and "archived row differs" in verdict.reason


def test_the_chain_holds_on_the_engines_own_sql_through_a_real_worker(sandbox, workers, bob):
    """The engine's hot path inserts several events in one statement (a CTE):
    the trigger chains each to the one before it in the same statement."""
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()

    verdict = session_verify(session_id=session.id)
    assert verdict.ok, verdict
    assert verdict.events == Event.objects.filter(session=session).count() > 8
    assert _verify(session.key).startswith(f"ok: {session.key}")


def test_a_decision_row_keeps_actor_role_address_arguments_and_reason(bob):
    approval = factories.pending_approval()
    client = Client(REMOTE_ADDR="10.1.2.3")
    client.force_login(bob)
    edited = {**approval.arguments, "amount_cents": 5000}
    response = client.post(
        f"/approvals/{approval.id}/decide",
        {
            "decision": "approve",
            "edited": json.dumps(edited),
            "expected_hash": approval.arguments_hash,
            "reason": "half is fair",
        },
    )
    assert response.status_code < 400
    decision = Decision.objects.get(approval_id=approval.id)
    assert (decision.actor, decision.actor_id, decision.role) == ("bob", bob.pk, "approver")
    assert decision.client_address == "10.1.2.3" and decision.decision == "approved"
    assert decision.arguments_before == approval.arguments
    assert decision.arguments_after == edited and decision.reason == "half is fair"
