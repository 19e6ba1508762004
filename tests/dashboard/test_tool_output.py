"""Tool outputs on the session page: readable fields, the raw JSON one
click away, hostile text inert, big outputs cut with a note, text that is
not JSON shown as it is."""

from __future__ import annotations

import json

import pytest

from dashboard.fields import MAX_ITEMS, output_fields, parse_output
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

ORDER = {
    "id": "ORD-1002",
    "status": "shipped",
    "total_cents": 18900,
    "refunded_cents": 0,
    "gift": False,
    "note": None,
    "items": [
        {"sku": "GRND-PRO", "name": "Burr grinder Pro", "quantity": 1, "unit_price_cents": 18900},
        {"sku": "BEAN-1K", "name": "Beans", "quantity": 2, "unit_price_cents": 2900},
    ],
    "customer": {"email": "alice.martin@example.com", "plan": "pro"},
    "tags": ["fragile", "priority"],
}


def test_an_order_reads_as_fields_with_money_a_table_and_a_list():
    html = str(output_fields(json.dumps(ORDER, sort_keys=True)))
    assert html.startswith('<div class="fields" hx-disable>')
    assert '<dt>total_cents</dt><dd><span class="money">$189.00</span>' in html
    assert "(18,900 cents)" in html
    assert '<table class="field-table"><thead><tr><th scope="col">name</th>' in html
    assert (
        '<th scope="col">sku</th>' in html and '<td><span class="text">GRND-PRO</span></td>' in html
    )
    assert "<dt>gift</dt><dd>no</dd>" in html
    assert '<dt>note</dt><dd><span class="muted">none</span></dd>' in html
    assert '<ul class="field-list"><li><span class="text">fragile</span></li>' in html
    assert '<dt>plan</dt><dd><span class="text">pro</span></dd>' in html  # nested object


def test_hostile_keys_and_values_are_escaped_and_invisible_characters_shown():
    hostile = {
        "<img src=x onerror=alert(1)>": "<script>alert(2)</script>",
        "amount": "10\u202e00",
        "token": "A" * 9000,
    }
    html = str(output_fields(json.dumps(hostile)))
    assert "<img" not in html and "<script>" not in html and "\u202e" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert '<span class="ctl" title="invisible character">\\u202e</span>' in html
    assert 'details class="fold" data-length="9000"' in html  # long text folds, whole


def test_big_and_deep_outputs_are_cut_with_a_note_and_plain_text_is_left_alone():
    many = {"rows": list(range(MAX_ITEMS + 7))}
    assert "… 7 more in the raw JSON" in str(output_fields(json.dumps(many)))
    deep: dict = {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}
    assert "nested deeper: see the raw JSON" in str(output_fields(json.dumps(deep)))
    for not_fields in ("Error: order not found", "42", '"a string"', "{}", "[]", "{broken"):
        assert output_fields(not_fields) == ""
    noted = 'Note: an approver changed the arguments\n{"refund": "re_1"}'
    assert parse_output(noted) == ("Note: an approver changed the arguments", {"refund": "re_1"})


def test_the_session_page_shows_fields_and_the_raw_json_in_a_details(client, alice):
    call = factories.finished_call(output=json.dumps(ORDER, sort_keys=True))
    client.force_login(alice)

    body = client.get(f"/sessions/{call.session_id}/").content.decode()

    output = body[body.index(f'id="toolcall-{call.id}-output"') :]
    output = output[: output.index("</details>")]
    assert '<div class="fields" hx-disable>' in output
    assert '<details class="raw"><summary>Raw JSON (' in output
    assert "&quot;total_cents&quot;: 18900" in output  # the raw text, as the model read it
