from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.django_db


def test_send_then_show_prints_state_and_events(capsys, broker):
    call_command("agent", "send", "ticket:42", "Where is my parcel?")
    out = capsys.readouterr().out
    assert "ticket:42: turn 1 accepted" in out
    call_command("agent", "show", "ticket:42")
    out = capsys.readouterr().out
    assert "status=running" in out and "turn.accepted" in out


def test_show_of_an_unknown_session_is_a_clear_error():
    with pytest.raises(CommandError, match="no session ticket:0"):
        call_command("agent", "show", "ticket:0")
