"""Login throttling: failures counted per user name and client address
together, and per address alone with a higher limit (issue 27: one person
could lock out everyone behind one address),
a lockout with a clear page and Retry-After, the right password refused while
locked, the cool-off lifting it, admins seeing and clearing it, /metrics
counting it; Django's standard password validators on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db.models import F
from django.test import Client

from agents.observability import metrics
from dashboard.management.commands.seed_demo import DEFAULT_PASSWORD
from dashboard.roles import ADMIN, assign_role

pytestmark = pytest.mark.django_db

LIMIT = 3


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def _login(password: str, *, username: str = "bob", ip: str = "10.0.0.1"):
    return Client(REMOTE_ADDR=ip).post("/login/", {"username": username, "password": password})


def _ok(response) -> bool:
    return response.status_code == 302 and response.url.rstrip("/") in ("", "/sessions")


def _pass_time(delta: timedelta) -> None:
    """The clock moves on for django-axes: its cool-off counts from the
    failures' attempt_time."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - delta)


def test_lockout_after_n_failures_refuses_the_right_password_until_the_cool_off(bob):
    for _ in range(LIMIT - 1):
        response = _login("wrong")
        assert response.status_code == 200 and b"Please enter a correct" in response.content
    locked = _login("wrong")  # the Nth failure locks

    assert locked.status_code == 429
    assert b"Too many failed log-ins" in locked.content and b"15 minutes" in locked.content
    assert int(locked["Retry-After"]) == 15 * 60
    right = _login("bob-pw")
    assert right.status_code == 429 and "sessionid" not in right.cookies  # refused while locked

    _pass_time(timedelta(minutes=16))
    assert _ok(_login("bob-pw"))  # the cool-off lifted it
    assert AccessAttempt.objects.count() == 0  # and a success resets the count


def test_a_lockout_holds_for_that_user_at_that_address_only(bob, alice):
    for _ in range(LIMIT):
        _login("wrong", ip="10.0.1.1")
    assert _login("bob-pw", ip="10.0.1.1").status_code == 429
    assert _ok(_login("bob-pw", ip="10.0.1.2"))  # bob elsewhere: not locked out by the guesser
    assert _ok(_login("alice-pw", username="alice", ip="10.0.1.1"))  # nor others behind it


def test_one_address_trying_many_names_is_locked_after_a_higher_count(alice, settings):
    settings.AGENTDESK_LOGIN_ADDRESS_LIMIT = 2 * LIMIT
    for n in range(2 * LIMIT):  # never LIMIT failures for one name
        assert _login("wrong", username=f"nobody{n}", ip="10.0.2.1").status_code == 200
    locked = _login("alice-pw", username="alice", ip="10.0.2.1")
    assert locked.status_code == 429 and 0 < int(locked["Retry-After"]) <= 3600
    assert _ok(_login("alice-pw", username="alice", ip="10.0.2.2"))  # another address is free


def test_an_admin_sees_the_lockout_and_lifting_it_lets_the_user_in(bob, carol):
    for _ in range(LIMIT):
        _login("wrong")
    assign_role(carol, ADMIN)  # staff, and the role carries django-axes' permissions
    admin = Client()
    admin.force_login(carol)

    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and b"bob" in listing.content
    ids = [str(pk) for pk in AccessAttempt.objects.values_list("pk", flat=True)]
    confirm = {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    assert admin.post("/admin/axes/accessattempt/", confirm).status_code == 302

    assert _ok(_login("bob-pw"))


def test_lockouts_and_failures_are_counted_in_metrics(bob):
    lockouts, failures = metrics.LOGIN_LOCKOUTS._value.get(), metrics.LOGIN_FAILURES._value.get()
    for _ in range(LIMIT):
        _login("wrong")

    assert metrics.LOGIN_LOCKOUTS._value.get() == lockouts + 1
    assert metrics.LOGIN_FAILURES._value.get() == failures + LIMIT
    assert b"agentdesk_login_lockouts_total" in Client().get("/metrics").content


def test_the_standard_password_validators_are_on(bob):
    bob.first_name = "Bartholomew"
    # common, all digits, too short, the user's own name
    for weak in ("password123", "48152342108", "sh0rt!", "Bartholomew1"):
        with pytest.raises(ValidationError):
            validate_password(weak, bob)
    for username in ("support", "approver", "admin"):
        bob.username = username
        validate_password(DEFAULT_PASSWORD, bob)  # the demo password passes for every demo user
