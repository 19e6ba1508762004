"""Taking a card is a short transaction: two approvers taking the same card
at once, one wins and the other gets a 409 that names who has it."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from approvals.models import Approval, SessionAssignment
from tests.approvals.helpers import approver
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)
HX = {"HX-Request": "true"}


def test_two_approvers_take_the_same_card_at_once_one_wins(bob, django_user_model):
    dora = approver(django_user_model, "dora")
    approval = factories.pending_approval()
    clients = {}
    for user in (bob, dora):
        clients[user.username] = Client()
        clients[user.username].force_login(user)
    start = threading.Barrier(2)
    answers: dict[str, tuple[int, str]] = {}

    def take(name: str) -> None:
        try:
            start.wait(10)
            response = clients[name].post(
                f"/approvals/{approval.id}/assign", {"action": "take"}, headers=HX
            )
            answers[name] = (response.status_code, response.content.decode())
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(n,)) for n in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert sorted(code for code, _ in answers.values()) == [200, 409], answers
    winner = next(n for n, (code, _) in answers.items() if code == 200)
    loser = next(n for n in answers if n != winner)
    assert f"{winner} took it at" in answers[loser][1]
    assert Approval.objects.get(pk=approval.pk).assignee.username == winner
    assert Approval.objects.get(pk=approval.pk).version == approval.version + 1


def test_mine_unassigned_all_give_back_and_an_admin_reassigns(client, bob, carol):
    mine, other = factories.pending_approval(), factories.pending_approval()
    client.force_login(bob)
    client.post(f"/approvals/{mine.id}/assign", {"action": "take"}, headers=HX)

    page = client.get("/approvals/?view=mine").content.decode()
    assert f'id="approval-{mine.id}"' in page and f'id="approval-{other.id}"' not in page
    assert 'data-count="mine">1<' in page and 'data-count="unassigned">1<' in page
    assert 'data-count="all">2<' in page
    unassigned = client.get("/approvals/?view=unassigned").content.decode()
    assert (
        f'id="approval-{other.id}"' in unassigned and f'id="approval-{mine.id}"' not in unassigned
    )

    # Bob may not reassign; carol (admin) gives bob's card to herself.
    refused = client.post(
        f"/approvals/{mine.id}/assign", {"action": "reassign", "to": "carol"}, headers=HX
    )
    assert refused.status_code == 403 and "only an admin can reassign" in refused.content.decode()
    admin = Client()
    admin.force_login(carol)
    moved = admin.post(
        f"/approvals/{mine.id}/assign", {"action": "reassign", "to": "carol"}, headers=HX
    )
    assert moved.status_code == 200
    assert Approval.objects.get(pk=mine.pk).assignee == carol
    back = admin.post(f"/approvals/{mine.id}/assign", {"action": "give_back"}, headers=HX)
    assert back.status_code == 200 and Approval.objects.get(pk=mine.pk).assignee is None


def test_taking_a_whole_session(client, bob, carol):
    approval = factories.pending_approval()
    client.force_login(bob)
    response = client.post(
        f"/approvals/sessions/{approval.session_id}/assign", {"action": "take"}, headers=HX
    )
    assert response.status_code == 200
    assert SessionAssignment.objects.get(session_id=approval.session_id).user == bob
    assert Approval.objects.get(pk=approval.pk).assignee == bob
    # A later card of that session is bob's too (mine), and carol is told who has it.
    later = factories.pending_approval(owner=approval.session)
    page = client.get("/approvals/?view=mine").content.decode()
    assert f'id="approval-{later.id}"' in page
    admin = Client()
    admin.force_login(carol)
    second = admin.post(
        f"/approvals/sessions/{approval.session_id}/assign", {"action": "take"}, headers=HX
    )
    assert second.status_code == 409 and "bob took it at" in second.content.decode()
