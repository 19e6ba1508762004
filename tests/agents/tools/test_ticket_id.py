"""Which helpdesk ticket a session acts on, read from its key: one parser
(agents/tools/base.py::ticket_id_of). A sub-agent of a ticket's session acts on
the same ticket; the key of its own session (`ticket:4812/research-ab12`) is
not a ticket id (the copy on Session returned "4812/research-ab12")."""

from __future__ import annotations

import pytest

from agents.tools.base import ToolContext, ticket_id_of


@pytest.mark.parametrize(
    "key, ticket",
    [
        ("ticket:4812", "4812"),
        ("ticket:4812/research-ab12", "4812"),
        ("ticket:4812/research-ab12/docs-cd34", "4812"),
        ("customer:77", None),
        ("incident:9/ticket:3", None),
        ("ticket:", None),
        ("ticket:/research-ab12", None),
        ("ticket", None),
    ],
)
def test_the_ticket_of_a_session_key(key, ticket):
    assert ticket_id_of(key) == ticket
    assert ToolContext(key, f"{key}:toolu_1", 1).ticket_id == ticket
