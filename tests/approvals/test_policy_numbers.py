"""The refund approval gate fails closed on every way of spelling a number.

The gate is what the engine runs before a call (agents/runtime/engine.py
_triage_calls): normalise the arguments to the schema's types, validate them,
then ask the profile's policy. A call runs without a person only when all
three let it; these tests drive that same path with the real support profile.
"""

from __future__ import annotations

import math

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agents.gate import Action
from approvals.gate import gate_decide
from approvals.policies import requirement_for
from capabilities.registry import code_profile

ORDER = "ORD-1011"


def gate(amount) -> tuple[str, dict | None]:
    """What the engine would do with an issue_refund call for `amount`:
    ("refused", None), ("parked", normalised) or ("runs", normalised)."""
    profile = code_profile("support_triage")  # the code profile: no database
    tool = profile.tool("issue_refund")
    arguments = tool.normalize({"order_id": ORDER, "amount_cents": amount})
    if tool.validate(arguments):
        return "refused", None
    action = Action(
        kind="tool_call",
        session_key="ticket:1",
        session_context={},
        profile=profile,
        name="issue_refund",
        arguments=arguments,
        tool_kind=tool.kind,
    )
    if gate_decide(action).waits:
        return "parked", arguments
    return "runs", arguments


@pytest.mark.parametrize(
    ("amount", "outcome"),
    [
        (10100.0, "parked"),  # the reported bypass: a whole float above the limit
        (1.01e4, "parked"),
        (1e5, "parked"),
        ("10100", "refused"),  # digits in a string are not a number
        (math.nan, "refused"),
        (math.inf, "refused"),
        (-math.inf, "refused"),
        (True, "refused"),
        (False, "refused"),
        (2**63, "refused"),  # a bigint: past the schema's maximum and ±2**53
        (10**30, "refused"),
        (1e300, "refused"),  # a whole float no int of JSON can carry
        (10100.5, "refused"),  # not a whole number of cents
        (None, "refused"),
        ([10100], "refused"),
        ({"value": 10100}, "refused"),
        (10100, "parked"),  # the plain integer, as before
    ],
)
def test_no_spelling_of_an_amount_above_the_limit_runs(amount, outcome):
    assert gate(amount)[0] == outcome


def test_a_whole_float_reaches_policy_and_tool_as_the_integer_it_spells():
    outcome, arguments = gate(10100.0)
    assert outcome == "parked"
    assert arguments["amount_cents"] == 10100 and type(arguments["amount_cents"]) is int


def test_1e4_is_ten_thousand_cents_and_treated_exactly_like_the_integer(settings):
    # 1e4 cents is $100, the default limit itself: it runs exactly as 10000
    # would (an int at the limit), and parks as soon as the limit is lower.
    assert settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS == 10_000
    assert gate(1e4) == gate(10_000) == ("runs", {"order_id": ORDER, "amount_cents": 10_000})
    settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS = 5_000
    assert gate(1e4)[0] == "parked"


@pytest.mark.parametrize("amount", [10100.0, 500.0, "10100", math.nan, True, None, -5, "lots"])
def test_the_policy_alone_asks_a_person_for_what_it_cannot_read(amount):
    # Fail closed even without the normaliser and the schema in front of it.
    requirement = requirement_for("issue_refund", {"order_id": ORDER, "amount_cents": amount})
    assert requirement is not None
    assert requirement.policy == "refund_amount_unreadable"


def test_the_policy_alone_asks_a_person_for_a_bigint():
    requirement = requirement_for("issue_refund", {"order_id": ORDER, "amount_cents": 2**63})
    assert requirement is not None and requirement.policy == "refund_over_limit"


def test_the_policy_alone_asks_a_person_when_the_amount_is_missing():
    assert requirement_for("issue_refund", {"order_id": ORDER}) is not None
    assert requirement_for("issue_refund", "not a dict") is not None


# Everything a JSON decoder (Python's, which also reads NaN and Infinity) can
# hand over as a value, plus the Python-only spellings a bug might produce.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.integers(min_value=-(10**40), max_value=10**40).map(str)
    | st.floats(min_value=0, max_value=2e7).map(lambda f: float(round(f)))  # whole floats
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


@hsettings(max_examples=600, deadline=None)
@given(json_values)
def test_property_the_policy_lets_through_only_plain_ints_within_the_limit(amount):
    limit = settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS
    requirement = requirement_for("issue_refund", {"order_id": ORDER, "amount_cents": amount})
    if requirement is None:
        assert type(amount) is int and 0 <= amount <= limit


@hsettings(max_examples=600, deadline=None)
@given(json_values)
def test_property_a_call_runs_unapproved_only_with_an_int_within_the_limit(amount):
    limit = settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS
    outcome, arguments = gate(amount)
    if outcome == "runs":
        ran = arguments["amount_cents"]
        assert type(ran) is int and 1 <= ran <= limit
        assert ran == amount and not isinstance(amount, bool | str)
    if outcome == "parked":  # the approver sees the normalised amount
        assert not isinstance(arguments["amount_cents"], float)


@pytest.mark.django_db(transaction=True)
def test_a_float_refund_above_the_limit_waits_for_a_person_end_to_end(sandbox, workers, bob):
    """The reported case through a real worker and the sandbox's scripted
    model: `amount_cents: 10100.0` parks for approval, nothing reaches the
    payment provider before the decision, and the approved refund is sent as
    the integer 10100."""
    from agents.models import ToolCall
    from approvals.models import Approval
    from approvals.services import approval_decide
    from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
    from tests.processes import wait_for

    workers.start()
    body = f'Refund please [[call:issue_refund {{"order_id": "{ORDER}", "amount_cents": 10100.0}}]]'
    ticket = sandbox.ticket(
        email="farid.haddad@example.org", subject="Refund", body=body, order_id=ORDER
    )
    session = deliver_ticket(ticket)

    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval for the float amount",
    )
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert call.status == "waiting_for_approval" and call.attempts == 0
    assert approval.policy == "refund_over_limit"
    assert approval.arguments["amount_cents"] == 10100
    assert type(approval.arguments["amount_cents"]) is int
    assert sandbox.refunds() == []  # nothing at the provider without a person

    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded", workers.logs()
    refunds = sandbox.refunds()
    assert [r["amount"] for r in refunds] == [10100]
    assert_invariants(session)
