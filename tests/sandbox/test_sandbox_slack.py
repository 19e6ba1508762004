"""The Slack Web API stand-in, through the official slack_sdk."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError


def _client(sandbox, token: str = "xoxb-test") -> WebClient:
    return WebClient(token=token, base_url=f"{sandbox.url}/slack/api/", timeout=10)


def test_a_posted_message_is_recorded_and_readable(sandbox):
    answer = _client(sandbox).chat_postMessage(channel="#approvals", text="Approval needed")
    assert answer["ok"] is True and answer["channel"] == "#approvals" and answer["ts"]
    messages = sandbox.get("/_slack").json()["messages"]
    assert [(m["channel"], m["text"]) for m in messages] == [("#approvals", "Approval needed")]


def test_a_call_without_a_bot_token_is_refused_as_slack_does(sandbox):
    with pytest.raises(SlackApiError) as refused:
        _client(sandbox, token="nope").chat_postMessage(channel="#x", text="hi")
    assert refused.value.response["error"] == "not_authed"
    assert sandbox.get("/_slack").json()["messages"] == []


def test_reset_forgets_the_messages(sandbox):
    _client(sandbox).chat_postMessage(channel="#approvals", text="one")
    sandbox.post("/_reset")
    assert sandbox.get("/_slack").json()["messages"] == []
