"""Ids and the three error dialects the sandbox speaks (helpdesk, Stripe, Anthropic)."""

from __future__ import annotations

import json
import secrets
import string
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int = 24) -> str:
    """`prefix` + random base62, like the real providers' ids.

    Random on purpose: a client that replays a request must not be able to
    rely on getting the same ids back unless the server says it replayed.
    """
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers=headers)


def raw_json_response(text: str, status: int, headers: dict[str, str] | None = None) -> Response:
    """A stored body sent back byte for byte (idempotent replays)."""
    return Response(text, status_code=status, headers=headers, media_type="application/json")


def helpdesk_error(status: int, type_: str, message: str, **extra: Any) -> Response:
    return json_response({"error": {"type": type_, "message": message, **extra}}, status)


def stripe_error_body(
    type_: str, message: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type_, "message": message}
    if code:
        error["code"] = code
        error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    if param:
        error["param"] = param
    return {"error": error}


def stripe_error(
    status: int, type_: str, message: str, code: str | None = None, param: str | None = None
) -> Response:
    headers = {"Request-Id": random_id("req_", 14)}
    return json_response(stripe_error_body(type_, message, code, param), status, headers)


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "api_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    error_type = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return json_response(body, status, {"request-id": random_id("req_"), **(headers or {})})


async def json_body(request: Request) -> dict[str, Any] | None:
    """The request's JSON object, or None when it is missing or not an object."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
