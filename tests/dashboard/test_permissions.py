"""Who may do what: every POST route and every WebSocket route, for an
anonymous visitor, a user without the role, the right role, and another
object's id. Refusals change nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from agents.models import Event, Job, Session
from approvals.models import Approval
from config.asgi import application
from dashboard.urls import POST_ROUTES
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers

HX = {"HX-Request": "true"}


@pytest.fixture
def world(db):
    """A parked approval, an in-doubt call in another session, a dead job."""
    approval = factories.pending_approval()
    doubtful = factories.parked_call(
        name="escalate_to_human", arguments={"reason": "angry"}, call_status="in_doubt"
    )
    Job.objects.create(kind="retriage_customer", status="dead", attempts=3)
    return approval, doubtful


def _url(name: str, approval: Approval, doubtful, *, other: bool = False) -> str:
    """The route for real objects, or (other=True) for an id that is not the
    user's to use: one that does not exist, or a call through another session."""
    missing = 987654
    if name.startswith("approval_"):
        return reverse(f"dashboard:{name}", args=[missing if other else approval.id])
    if name == "approvals_bulk":
        return reverse(f"dashboard:{name}")
    if name == "job_retry":
        from agents.models import Job

        dead = Job.objects.get(kind="retriage_customer", status="dead")  # made by `world`
        return reverse(f"dashboard:{name}", args=[missing if other else dead.id])
    if name == "toolcall_resolve":
        session_id = approval.session_id if other else doubtful.session_id
        return reverse(f"dashboard:{name}", args=[session_id, doubtful.id])
    return reverse(f"dashboard:{name}", args=[missing if other else approval.session_id])


def _body(name: str, approval: Approval) -> dict:
    return {
        "decision": "deny",
        "reason": "no",
        "expected_hash": approval.arguments_hash,
        "text": "hello",
        "resolution": "failed",
        "edited": "{}",
        "action": "take",
        "item": f"{approval.id}:{approval.version}",
        "confirm": "yes",
    }


def _state() -> tuple:
    return (
        Event.objects.count(),
        tuple(Approval.objects.order_by("id").values_list("status", flat=True)),
        tuple(Job.objects.order_by("id").values_list("status", flat=True)),
        Session.objects.count(),  # a fork adds one
    )


def test_every_post_route_is_in_the_matrix():
    from dashboard.urls import urlpatterns

    # A new POST view must be added to POST_ROUTES (and so to this matrix).
    names = {p.name for p in urlpatterns}
    assert set(POST_ROUTES) <= names
    gets = {
        *("sessions", "session", "history", "history_export"),
        *("approvals", "approval", "jobs", "operations"),
    }
    assert names - set(POST_ROUTES) == gets


@pytest.mark.parametrize("name", sorted(POST_ROUTES))
def test_anonymous_is_sent_to_log_in_and_nothing_changes(client, world, name):
    approval, doubtful = world
    before = _state()
    response = client.post(_url(name, approval, doubtful), _body(name, approval), headers=HX)
    # htmx: the whole tab goes to the login page (HX-Redirect), not the XHR
    assert response.status_code == 401 and response["HX-Redirect"].startswith("/login/")
    plain = client.post(_url(name, approval, doubtful), _body(name, approval))
    assert plain.status_code == 302 and plain["Location"].startswith("/login/")
    assert _state() == before


@pytest.mark.parametrize("name", sorted(POST_ROUTES))
def test_a_user_without_the_permission_gets_403_and_nothing_changes(
    client, world, dave, alice, name
):
    approval, doubtful = world
    # dave has no desk role at all; alice (support) may not decide approvals.
    wrong = alice if POST_ROUTES[name] == "approvals.decide_approval" else dave
    assert not wrong.has_perm(POST_ROUTES[name])
    client.force_login(wrong)
    before = _state()
    response = client.post(_url(name, approval, doubtful), _body(name, approval), headers=HX)
    assert response.status_code == 403
    assert _state() == before


@pytest.mark.parametrize("name", sorted(POST_ROUTES))
def test_the_right_role_gets_through(client, world, alice, bob, carol, name):
    approval, doubtful = world
    right = bob if POST_ROUTES[name] == "approvals.decide_approval" else alice
    if POST_ROUTES[name] in ("agents.fork_session", "agents.raise_budget"):
        right = carol  # an admin's action
    client.force_login(right)
    response = client.post(_url(name, approval, doubtful), _body(name, approval), headers=HX)
    # Through to the service, whose answer depends on the state: resume
    # while a turn is parked is a 409, the schema refuses the edit "{}" (400).
    assert response.status_code in (200, 400, 409), response.content[:500]
    if name == "approval_check":
        assert b"would refuse" in response.content


@pytest.mark.parametrize("name", sorted(POST_ROUTES))
def test_another_objects_id_is_a_404_and_nothing_changes(client, world, carol, name):
    approval, doubtful = world
    client.force_login(carol)  # admin: every permission, so only the id is wrong
    before = _state()
    body = _body(name, approval)
    if name == "approvals_bulk":  # the ids are in the form: an unknown one is refused (400)
        body["item"] = "987654:1"
    response = client.post(_url(name, approval, doubtful, other=True), body, headers=HX)
    assert response.status_code == (400 if name == "approvals_bulk" else 404)
    assert _state() == before


@pytest.mark.parametrize(
    "path", ["/", "/approvals/", "/sessions/{sid}/", "/sessions/{sid}/history"]
)
def test_pages_refuse_users_without_the_permission(client, world, dave, alice, bob, path):
    approval, _ = world
    url = path.format(sid=approval.session_id)
    assert client.get(url).status_code == 302  # anonymous: log in first
    client.force_login(dave)
    assert client.get(url).status_code == 403
    if "approvals" in url or "history" in url:
        client.force_login(alice)
        assert client.get(url).status_code == 403
    client.force_login(bob)
    expected = 403 if "history" in url else 200
    assert client.get(url).status_code == expected


def test_history_is_for_admins_only(client, world, bob, carol):
    approval, _ = world
    client.force_login(bob)
    assert client.get(f"/sessions/{approval.session_id}/history.json").status_code == 403
    client.force_login(carol)
    assert client.get(f"/sessions/{approval.session_id}/history.json").status_code == 200
    assert client.get("/sessions/987654/history").status_code == 404


# --- WebSocket routes -----------------------------------------------------------------

WS_ROUTES = {
    "/ws/sessions/{sid}/": "agents.view_session",
    "/ws/desk/": "agents.view_session",
    "/ws/approvals/": "approvals.decide_approval",
}


async def _connects(path: str, headers) -> bool:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    await communicator.disconnect()
    return connected


def _try(path: str, headers) -> bool:
    return async_to_sync(_connects)(path, headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route", sorted(WS_ROUTES))
def test_websocket_routes_check_login_permission_origin_and_id(route, dave, alice, bob):
    call = factories.parked_call()
    path = route.format(sid=call.session_id)
    wrong = alice if WS_ROUTES[route] == "approvals.decide_approval" else dave

    assert not _try(path, ws_headers(None)), "anonymous"
    assert not _try(path, ws_headers(wrong)), "without the permission"
    assert not _try(path, ws_headers(bob, origin="http://evil.example")), "foreign origin"
    assert _try(path, ws_headers(bob)), "the right role"
    if "{sid}" in route:
        assert not _try(route.format(sid=987654), ws_headers(bob)), "another session's id"


def test_the_admin_role_includes_the_django_admin(client, django_user_model):
    from dashboard.roles import ADMIN, SUPPORT, assign_role

    erin = django_user_model.objects.create_user(username="erin", password="erin-pw")
    assign_role(erin, SUPPORT)
    client.force_login(erin)
    assert client.get("/admin/").status_code == 302  # not staff: the admin's login
    assign_role(erin, ADMIN)
    client.force_login(django_user_model.objects.get(pk=erin.pk))
    assert client.get("/admin/").status_code == 200
