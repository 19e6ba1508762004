"""Sessions end everywhere at once: a logout (anywhere), a password change, a
lost role or a deactivation closes every open WebSocket of the user within a
couple of seconds and nothing more is pushed to it; a decision from a stale
tab goes to the login page and changes nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.test import Client

from approvals.models import Approval
from config.asgi import application
from dashboard.models import UserLogin
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)

CLOSE_WITHIN_S = 2.0


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _headers(client: Client) -> list[tuple[bytes, bytes]]:
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    return [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie.encode())]


async def _inbox(headers, shown: list[int]) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
    assert (await ws.connect(timeout=5))[0]
    await ws.send_json_to({"type": "hello", "shown": shown})
    assert await ws.receive_nothing(timeout=0.3)
    return ws


def _closed_then_silent(headers, shown: list[int], revoke) -> tuple[dict, bool]:
    """Open an inbox socket, `revoke()`, and return what it gets first (its
    close) and whether a new approval afterwards reached it."""

    async def scenario():
        ws = await _inbox(headers, shown)
        await database_sync_to_async(revoke)()
        first = await ws.receive_output(timeout=CLOSE_WITHIN_S)
        await database_sync_to_async(factories.pending_approval)()
        silent = await ws.receive_nothing(timeout=1.0)
        return first, silent

    return async_to_sync(scenario)()


def test_logout_in_another_browser_closes_the_socket_and_ends_that_login_too(bob):
    shown = factories.pending_approval()
    tab, elsewhere = _logged_in(bob), _logged_in(bob)  # two browsers, one user
    assert UserLogin.objects.filter(user=bob).count() == 2

    first, silent = _closed_then_silent(
        _headers(tab), [shown.id], lambda: elsewhere.post("/logout/")
    )

    assert first == {"type": "websocket.close", "code": 4401}
    assert silent, "a push reached a socket after logout"
    assert not UserLogin.objects.filter(user=bob).exists()
    # The stale tab's decision: to the login page, nothing decided.
    stale = tab.post(
        f"/approvals/{shown.id}/decide",
        {"decision": "approve", "arguments_hash": shown.arguments_hash},
        headers={"HX-Request": "true", "HX-Current-URL": "http://127.0.0.1/approvals/"},
    )
    assert stale.status_code == 401
    assert stale["HX-Redirect"] == "/login/?next=/approvals/"
    plain = tab.post(f"/approvals/{shown.id}/decide", {"decision": "approve"})
    assert plain.status_code == 302 and plain.url.startswith("/login/")
    assert Approval.objects.get(pk=shown.pk).status == "pending"


def _remove_role(user):
    user.groups.remove(Group.objects.get(name="approver"))


def _deactivate(user):
    user.is_active = False
    user.save()


def _change_password(user):
    user.set_password("a-new-long-passphrase")
    user.save()


@pytest.mark.parametrize("revoke", [_remove_role, _deactivate, _change_password])
def test_losing_the_role_deactivation_or_a_new_password_closes_the_socket(bob, revoke):
    shown = factories.pending_approval()
    tab = _logged_in(bob)

    first, silent = _closed_then_silent(_headers(tab), [shown.id], lambda: revoke(bob))

    assert first == {"type": "websocket.close", "code": 4401}
    assert silent
    assert not _reconnects(_headers(tab))


def _reconnects(headers) -> bool:
    async def scenario():
        ws = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
        connected, _ = await ws.connect(timeout=5)
        await ws.disconnect()
        return connected

    return async_to_sync(scenario)()


def test_a_lost_revocation_push_still_closes_the_socket_before_the_next_push(bob, settings):
    """The layer is at-most-once: with the session gone but no push (rows
    deleted behind Django's back), the consumer's re-check refuses the push."""
    settings.AGENTDESK_WS_RECHECK_S = 0
    shown = factories.pending_approval()
    tab = _logged_in(bob)

    def behind_the_back():
        Session.objects.all().delete()  # a queryset delete: no signal, no push

    async def scenario():
        ws = await _inbox(_headers(tab), [shown.id])
        await database_sync_to_async(behind_the_back)()
        await database_sync_to_async(factories.pending_approval)()
        return await ws.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}


def test_another_users_logout_leaves_the_socket_open(bob, carol):
    shown = factories.pending_approval()
    tab, other = _logged_in(bob), _logged_in(carol)

    async def scenario():
        ws = await _inbox(_headers(tab), [shown.id])
        await database_sync_to_async(other.post)("/logout/")
        fresh = await database_sync_to_async(factories.pending_approval)()
        added = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return fresh, added

    fresh, added = async_to_sync(scenario)()
    assert [c["id"] for c in added["add"]] == [fresh.id]
