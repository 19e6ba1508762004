"""No secrets or internals in stored text: a session runs through a real
worker against a sandbox that fails in several ways, with credentials in the
helpdesk URL; then every stored row (events, transcript, tool calls, turns,
approvals, audit) is scanned for the configured secrets and URL credentials."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from tests.agents.helpers import deliver_ticket, wait_turn

pytestmark = pytest.mark.django_db(transaction=True)

STRIPE_KEY = "sk_test_scanSecretKey7781"
SECRET_KEY = "django-scan-secret-key-5521-do-not-store"
WEBHOOK_SECRET = "whsec_scanWebhookSecret4410"
URL_PASSWORD = "hunter2urlpass"
URL_CREDENTIALS = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s\"'@]+:[^/\s\"'@]+@")
TABLES = [
    "agents_event",
    "agents_toolcall",
    "agents_turn",
    "agents_session",
    "agents_sessionruntime",
    "approvals_approval",
    "agents_auditentry",
]


def _stored_text() -> list[tuple[str, str]]:
    rows = []
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT row_to_json(t)::text FROM {table} t")  # noqa: S608 (fixed names)
            rows += [(table, text) for (text,) in cursor.fetchall()]
    return rows


def test_a_session_with_faults_stores_no_secret_and_no_url_credentials(sandbox, workers):
    port = sandbox.url.rsplit(":", 1)[1]
    workers.start(
        STRIPE_API_KEY=STRIPE_KEY,
        DJANGO_SECRET_KEY=SECRET_KEY,
        AGENTDESK_WEBHOOK_SECRET=WEBHOOK_SECRET,
        HELPDESK_URL=f"http://agent:{URL_PASSWORD}@127.0.0.1:{port}",
        AGENTDESK_TOOL_RETRIES="1",
    )
    ticket = sandbox.ticket(
        email="bob.okafor@example.net",
        subject="Mug broken",
        body="My mug from order ORD-1003 arrived broken. Please refund $20.",
        order_id="ORD-1003",
    )
    # The helpdesk fails twice (500s), the payment provider answers 500
    # until the refund is given up on.
    sandbox.fault(target="helpdesk", kind="status", status=500, count=2)
    sandbox.fault(target="payments", kind="status", status=500, count=20)
    session = deliver_ticket(ticket)
    # Ends, or waits on a person for the refund whose outcome stayed unknown.
    settled = {"succeeded", "failed", "canceled", "waiting_for_approval"}
    turn = wait_turn(session, statuses=settled, timeout=90)
    assert turn.status in settled, workers.logs()

    stored = _stored_text()
    errors = [text for table, text in stored if table == "agents_toolcall" and "Error" in text]
    assert errors or "in_doubt" in str(stored), "the faults produced no tool error to scan"
    assert any("127.0.0.1" in text for _, text in stored)  # errors still say where
    for table, text in stored:
        for secret in (STRIPE_KEY, SECRET_KEY, WEBHOOK_SECRET, URL_PASSWORD):
            assert secret not in text, f"{table} stores a secret: {text[:300]}"
        assert not URL_CREDENTIALS.search(text), f"{table} stores URL credentials: {text[:300]}"
        assert "Traceback (most recent call last)" not in text
