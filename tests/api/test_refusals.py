"""Inputs that gave a 500 answer with the status that says what is wrong
(issue 27, cases 5 and 7)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db


def test_a_write_body_over_the_upload_limit_is_a_413_problem(alice, api_as, settings):
    body = json.dumps({"session": "ticket:big", "text": "x" * 100}) + " " * (
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    )
    response = api_as(alice).post("/api/v1/messages", raw=body)
    assert response.status_code == 413
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == "urn:agentdesk:problem:too-large"
