"""The inbox says how many cards it does not show, and pages through them
(issue 27, case 4): a new card past the first page is never silently out
of view."""

from __future__ import annotations

import re

import pytest

from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _cards(body: str) -> list[int]:
    return [int(n) for n in re.findall(r'<article[^>]*id="approval-(\d+)"', body)]


def test_the_inbox_counts_what_it_does_not_show_and_pages_through_it(client, bob, settings):
    settings.AGENTDESK_INBOX_PAGE = 3
    made = [factories.pending_approval().id for _ in range(7)]
    client.force_login(bob)

    first = client.get("/approvals/").content.decode()
    assert 'id="inbox-not-shown">4</strong>' in first and "Showing 1–3 of 7" in first
    seen = []
    page, body = 1, first
    while True:
        seen += _cards(body)
        found = re.search(r'rel="next" href="\?([^"]+)"', body)
        if not found:
            break
        page += 1
        body = client.get("/approvals/?" + found.group(1).replace("&amp;", "&")).content.decode()
    assert page == 3 and "Showing 7–7 of 7" in body and 'rel="prev"' in body
    assert seen == made  # oldest first, every card once
    assert client.get("/approvals/?page=99999999999999999999").status_code == 200


def test_a_page_that_shows_everything_says_nothing_more(client, bob):
    factories.pending_approval()
    client.force_login(bob)
    assert 'id="inbox-pages"' not in client.get("/approvals/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_big_card_is_pushed_by_reference_and_the_page_fetches_it(client, bob):
    import json

    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator

    from config.asgi import application
    from dashboard import pushes
    from tests.dashboard.conftest import ws_headers

    big = factories.pending_approval(
        arguments={"order_id": "ORD-1002", "amount_cents": 18900, "notes": "x" * 90_000}
    )
    small = factories.pending_approval()
    headers = ws_headers(bob)

    async def scenario():
        ws = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
        assert (await ws.connect(timeout=5))[0]
        await ws.send_json_to({"type": "hello", "shown": []})
        frame = await ws.receive_from(timeout=10)
        await ws.disconnect()
        return frame

    frame = async_to_sync(scenario)()
    assert len(frame) < pushes.PUSH_FRAME_CHARS + 10_000  # far below Daphne's 1 MiB
    cards = {card["id"]: card for card in json.loads(frame)["add"]}
    assert "html" not in cards[big.id] and cards[big.id]["ref"] == f"/approvals/{big.id}/"
    assert f'id="approval-{small.id}"' in cards[small.id]["html"]
    client.force_login(bob)
    fetched = client.get(cards[big.id]["ref"], headers={"HX-Request": "true"})
    body = fetched.content.decode()
    assert fetched.status_code == 200 and body.startswith("{% load") is False
    assert f'id="approval-{big.id}"' in body and "<html" not in body
