"""Errors as RFC 9457 problem details, in one shape everywhere under /api/.

`type` is `about:blank` (the status says it all) or `urn:agentdesk:problem:<slug>`
for a refusal a client may want to tell apart; `current` carries the
current state of what a 409 refused, as the desk shows it.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"


def problem_body(status: int, detail: str = "", *, slug: str = "", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"urn:agentdesk:problem:{slug}" if slug else "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
    }
    if detail:
        body["detail"] = detail
    body.update({k: v for k, v in extra.items() if v not in (None, "")})
    return body


def problem(
    status: int,
    detail: str = "",
    *,
    slug: str = "",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> HttpResponse:
    body = problem_body(status, detail, slug=slug, **extra)
    response = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def is_problem(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith(CONTENT_TYPE)
