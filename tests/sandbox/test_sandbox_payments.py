"""Stripe-compatible refunds, exercised with the official stripe SDK."""

from __future__ import annotations

import threading

import pytest
import stripe

REFUND = {
    "payment_intent": "pi_ORD1002",  # ORD-1002: $189.00
    "amount": 5000,
    "reason": "requested_by_customer",
    "metadata": {"order_id": "ORD-1002", "ticket": "ticket:7"},
}


def test_refund_create_retrieve_and_list(sandbox, stripe_client):
    refund = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-basic"})
    assert refund.id.startswith("re_") and refund.object == "refund"
    assert (refund.amount, refund.currency, refund.status) == (5000, "usd", "succeeded")
    assert refund.payment_intent == "pi_ORD1002"
    assert refund.metadata.to_dict() == {"order_id": "ORD-1002", "ticket": "ticket:7"}
    assert stripe_client.v1.refunds.retrieve(refund.id).amount == 5000
    listed = stripe_client.v1.refunds.list(params={"payment_intent": "pi_ORD1002"})
    assert [r.id for r in listed.data] == [refund.id]
    assert sandbox.get("/helpdesk/orders/ORD-1002").json()["refunded_cents"] == 5000


def test_same_key_returns_the_first_refund_and_creates_one(sandbox, stripe_client):
    first = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-same"})
    again = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-same"})
    assert again.id == first.id
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    stats = sandbox.stats()["refunds"]
    assert stats["total"] == 1 and stats["by_idempotency_key"] == {"k-same": 1}


def test_same_key_with_other_parameters_is_an_idempotency_error(sandbox, stripe_client):
    stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-diff"})
    with pytest.raises(stripe.IdempotencyError) as raised:
        stripe_client.v1.refunds.create(
            params={**REFUND, "amount": 5001}, options={"idempotency_key": "k-diff"}
        )
    assert raised.value.http_status == 400
    assert sandbox.stats()["refunds"]["total"] == 1


def test_concurrent_requests_with_one_key_never_refund_twice(sandbox):
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        client = stripe.StripeClient(
            "sk_test_sandbox", base_addresses={"api": sandbox.url}, max_network_retries=0
        )
        barrier.wait()
        try:
            refund = client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-race"})
            outcomes.append(
                "replay" if refund.last_response.headers.get("Idempotent-Replayed") else "created"
            )
        except stripe.StripeError as exc:
            outcomes.append(f"error {exc.http_status} {(exc.json_body or {})['error'].get('code')}")

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("created") == 1
    assert set(outcomes) <= {"created", "replay", "error 409 idempotency_key_in_use"}
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {"k-race": 1}


def test_a_key_still_in_flight_answers_409(sandbox, stripe_client, wait):
    # Hold the key for a second inside the first request, then race it.
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="in_flight",
        latency_ms=1000,
        match={"path_prefix": "/v1/refunds"},
    )
    first: list[object] = []
    thread = threading.Thread(
        target=lambda: first.append(
            stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-flight"})
        )
    )
    thread.start()
    wait(
        lambda: "payments:k-flight" in sandbox.stats()["idempotency"]["in_flight"],
        what="the key to be in flight",
    )
    # The SDK maps a 409 to a plain APIError; the code is in the body.
    with pytest.raises(stripe.APIError) as raised:
        stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-flight"})
    assert raised.value.http_status == 409
    assert raised.value.json_body["error"]["code"] == "idempotency_key_in_use"
    thread.join()
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {"k-flight": 1}


def test_sdk_retry_after_409_gets_the_replay(sandbox):
    sandbox.fault(target="payments", kind="latency", phase="in_flight", latency_ms=600)
    client = stripe.StripeClient(
        "sk_test_sandbox", base_addresses={"api": sandbox.url}, max_network_retries=3
    )
    results: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-retry"}).id
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1]
    assert sandbox.stats()["refunds"]["total"] == 1


@pytest.mark.parametrize(
    ("amount", "code"),
    [
        (0, "parameter_invalid_integer"),
        (-5, "parameter_invalid_integer"),
        (18901, "amount_too_large"),
    ],
)
def test_amount_must_be_positive_and_within_the_order(stripe_client, amount, code):
    with pytest.raises(stripe.InvalidRequestError) as raised:
        stripe_client.v1.refunds.create(params={**REFUND, "amount": amount})
    assert raised.value.http_status == 400 and raised.value.code == code


def test_refunds_add_up_to_at_most_the_order_total(sandbox, stripe_client):
    stripe_client.v1.refunds.create(params={**REFUND, "amount": 18000})
    with pytest.raises(stripe.InvalidRequestError) as raised:
        stripe_client.v1.refunds.create(params={**REFUND, "amount": 901})
    assert raised.value.code == "amount_too_large"
    rest = stripe_client.v1.refunds.create(params={"payment_intent": "pi_ORD1002"})
    assert rest.amount == 900
    assert sandbox.get("/helpdesk/orders/ORD-1002").json()["refunded_cents"] == 18900


def test_a_refused_request_does_not_burn_its_key(stripe_client):
    with pytest.raises(stripe.InvalidRequestError):
        stripe_client.v1.refunds.create(
            params={**REFUND, "amount": 999999}, options={"idempotency_key": "k-edit"}
        )
    refund = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-edit"})
    assert refund.amount == 5000


def test_unknown_payment_intent_is_resource_missing(stripe_client):
    with pytest.raises(stripe.InvalidRequestError) as raised:
        stripe_client.v1.refunds.create(params={**REFUND, "payment_intent": "pi_NOPE"})
    assert raised.value.http_status == 404 and raised.value.code == "resource_missing"
    with pytest.raises(stripe.InvalidRequestError) as raised:
        stripe_client.v1.refunds.retrieve("re_missing")
    assert raised.value.http_status == 404


@pytest.mark.parametrize("key", ["sk_live_abc", "rk_test_abc"])
def test_only_test_secret_keys_are_accepted(sandbox, key):
    client = stripe.StripeClient(key, base_addresses={"api": sandbox.url}, max_network_retries=0)
    with pytest.raises(stripe.AuthenticationError):
        client.v1.refunds.list()


def test_missing_auth_is_a_stripe_shaped_401(sandbox):
    reply = sandbox.get("/v1/refunds")
    assert reply.status == 401
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_refund_listing_endpoint_for_tests(sandbox, stripe_client):
    refund = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-list"})
    rows = sandbox.get("/_refunds").json()["refunds"]
    assert [(r["id"], r["key"], r["payment_intent"], r["amount"]) for r in rows] == [
        (refund.id, "k-list", "pi_ORD1002", 5000)
    ]
