"""Refused attempts are audit rows (agents.AuditEntry, append-only): a 403 on
a decision or an operation, a forged request, a login lockout; and /static/
responses carry the same security headers as pages."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from agents.models import AuditEntry
from approvals.models import Approval
from config.asgi import application
from dashboard.middleware import HEADERS
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _client(user, **kwargs) -> Client:
    client = Client(REMOTE_ADDR="10.9.8.7", **kwargs)
    client.force_login(user)
    return client


def test_a_decision_without_the_role_is_refused_and_audited(alice):
    approval = factories.pending_approval()
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    response = _client(alice).post(f"/approvals/{approval.id}/decide", body)

    assert response.status_code == 403
    entry = AuditEntry.objects.get(kind="permission.refused")
    assert (entry.actor, entry.client_address, entry.method) == ("alice", "10.9.8.7", "POST")
    assert entry.path == f"/approvals/{approval.id}/decide"
    assert entry.detail["view"] == "approval_decide" and entry.detail["approval_id"] == approval.id
    assert "approvals.decide_approval" in entry.detail["reason"]
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_an_operation_without_the_role_is_audited_with_its_session(dave):
    session = factories.session()
    response = _client(dave).post(f"/sessions/{session.id}/cancel")
    assert response.status_code == 403
    entry = AuditEntry.objects.get(kind="permission.refused")
    assert entry.session_id == session.id and entry.actor == "dave"


def test_a_service_refusal_of_a_decision_is_audited(bob):
    approval = factories.pending_approval(started_by=bob)  # bob may not approve his own turn
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    response = _client(bob).post(f"/approvals/{approval.id}/decide", body)

    assert response.status_code == 403
    entry = AuditEntry.objects.get(kind="decision.refused")
    assert entry.actor == "bob" and "someone else must approve" in entry.detail["reason"]


def test_a_forged_request_is_refused_with_a_page_and_audited(bob):
    approval = factories.pending_approval()
    client = _client(bob, enforce_csrf_checks=True)
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    response = client.post(f"/approvals/{approval.id}/decide", body)  # no CSRF token

    assert response.status_code == 403 and b"security token" in response.content
    entry = AuditEntry.objects.get(kind="csrf.refused")
    assert entry.actor == "bob" and entry.client_address == "10.9.8.7"
    assert "CSRF" in entry.detail["reason"]
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_a_lockout_is_audited(bob, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        Client(REMOTE_ADDR="10.5.5.5").post("/login/", {"username": "bob", "password": "no"})
    entry = AuditEntry.objects.get(kind="login.locked_out")
    assert entry.actor == "bob" and entry.client_address == "10.5.5.5"


def _headers(path: str) -> dict[str, str]:
    """The response headers the ASGI app sends for GET `path` (its start message)."""

    async def get():
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 80),
        }
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(timeout=10)
        while (await communicator.receive_output(timeout=10)).get("more_body"):
            pass
        return start

    start = async_to_sync(get)()
    assert start["status"] == 200, (path, start["status"])
    return {k.decode().lower(): v.decode() for k, v in start["headers"]}


def test_static_files_carry_the_same_security_headers_as_pages():
    page = _headers("/login/")
    for path in ("/static/css/desk.css", "/static/js/desk.js"):
        static = _headers(path)
        for name, value in HEADERS.items():
            assert static.get(name.lower()) == value, (path, name)
            assert page.get(name.lower()) == value, ("/login/", name)
