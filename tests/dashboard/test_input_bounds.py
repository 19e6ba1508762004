"""No input a person or a client can send produces a 500: numbers are
range-checked before SQL, NUL is refused with a message, typed JSON has a
size and depth limit checked before parsing; and a Hypothesis run throws
generated values at every query parameter and form field of the desk."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import Approval
from dashboard.roles import ADMIN, assign_role
from dashboard.urls import POST_ROUTES
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


@pytest.fixture
def admin(carol) -> Client:
    assign_role(carol, ADMIN)
    client = Client()
    client.force_login(carol)
    return client


def test_a_page_number_past_bigint_shows_the_last_page(admin):
    factories.pending_approval()
    response = admin.get("/?page=99999999999999999999999")
    assert response.status_code == 200
    assert admin.get("/?page=-5").status_code == 200
    assert admin.get("/?page=" + "9" * 5000).status_code == 200


def test_an_id_past_bigint_in_the_path_is_a_404(admin):
    assert admin.get("/sessions/99999999999999999999/").status_code == 404
    assert admin.get("/approvals/99999999999999999999/").status_code == 404


def test_a_nul_in_the_search_box_is_a_400_that_says_why(admin):
    response = admin.get("/?q=%00")
    assert response.status_code == 400
    assert b"NUL character" in response.content
    assert admin.post("/sessions/1/messages", {"text": "hi\x00"}).status_code == 400


@pytest.mark.parametrize("route", ["approval_check", "approval_decide"])
@pytest.mark.parametrize(
    ("edited", "why"),
    [
        ("[" * 100_000, b"nest more than"),
        ('{"a": ' * 10_000 + "1" + "}" * 10_000, b"nest more than"),
        ('{"amount_cents": NaN}', b"not valid JSON"),
        ('{"order_id": "ORD-1\\u0000"}', b"NUL character"),
        ("x" * 200_000, b"too long"),
    ],
)
def test_hostile_edited_arguments_are_refused_with_a_message_before_parsing(
    admin, route, edited, why
):
    approval = factories.pending_approval()
    body = {
        "decision": "approve",
        "edited": edited,
        "expected_hash": approval.arguments_hash,
    }
    response = admin.post(reverse(f"dashboard:{route}", args=[approval.id]), body, headers=HX)
    assert response.status_code in (200, 400), response.status_code
    assert why in response.content
    assert Approval.objects.get(pk=approval.pk).status == "pending"


# --- Property: every field of the desk, any value, never a 5xx -----------------------

GET_PARAMS = ["status", "q", "page", "turns", "after", "hours", "kind"]
POST_FIELDS = [
    "decision",
    "edited",
    "expected_hash",
    "followup_id",
    "next",
    "note",
    "reason",
    "resolution",
    "upto",
    "text",
    "max_total_tokens",
    "max_total_cost_usd",
    "expected_version",
    "action",
    "to",
    "item",
    "confirm",
]
hostile_text = st.one_of(
    st.text(max_size=60),  # any code point, NUL and lone surrogates included
    st.integers().map(str),
    st.integers(min_value=10**18, max_value=10**40).map(str),
    st.sampled_from(["NaN", "-inf", "1e309", "[" * 200, '{"a":' * 40, "%00", "\x00", "0x10"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


def _get_pages(approval: Approval) -> list[str]:
    sid = approval.session_id
    return [
        "/",
        f"/sessions/{sid}/",
        f"/sessions/{sid}/history",
        f"/sessions/{sid}/history.json",
        "/approvals/",
        f"/approvals/{approval.id}/",
        "/jobs/",
        "/ops/",
    ]


def _post_url(name: str, approval: Approval) -> str:
    if name.startswith("approval_"):
        return reverse(f"dashboard:{name}", args=[approval.id])
    if name == "approvals_bulk":
        return reverse(f"dashboard:{name}")
    if name == "job_retry":
        return reverse(f"dashboard:{name}", args=[987654])
    if name == "toolcall_resolve":
        return reverse(f"dashboard:{name}", args=[approval.session_id, approval.tool_call_id])
    return reverse(f"dashboard:{name}", args=[approval.session_id])


@pytest.fixture
def world(admin, settings):
    settings.AGENTDESK_DECISION_RATE = settings.AGENTDESK_POST_RATE = "100000/m"
    return admin, factories.pending_approval()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    page=st.integers(min_value=0, max_value=7),
    params=st.dictionaries(st.sampled_from(GET_PARAMS), hostile_text, max_size=4),
    htmx=st.booleans(),
)
def test_property_no_query_parameter_makes_a_page_fail(world, page, params, htmx):
    client, approval = world
    url = _get_pages(approval)[page]
    response = client.get(url, params, headers=HX if htmx else {})
    assert response.status_code < 500, (url, params, response.status_code)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(sorted(POST_ROUTES)),
    fields=st.dictionaries(st.sampled_from(POST_FIELDS), hostile_text, max_size=5),
    htmx=st.booleans(),
)
def test_property_no_form_field_makes_a_post_fail(world, name, fields, htmx):
    client, approval = world
    url = _post_url(name, approval)
    response = client.post(url, fields, headers=HX if htmx else {})
    assert response.status_code < 500, (url, fields, response.status_code)
