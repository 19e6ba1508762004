"""HTTP endpoints for machines: the helpdesk webhook and the messages API.

The messages API here is the first one (`POST /api/sessions/<key>/messages`),
kept for the callers that use it; /api/v1/ (api/) is the documented API.
It takes the service token (AGENTDESK_API_TOKEN, which may only post
messages) or a person's API token, with the same rate limit and
Idempotency-Key handling as /api/v1/.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.errors import Invalid, ServiceError
from agents.models import Session, Turn
from agents.services import message_post
from api import idempotency, ratelimit, tokens
from api.inbound import helpdesk_webhook, verified_event_id
from api.writes import audit


def _error(exc: ServiceError) -> JsonResponse:
    return JsonResponse({"error": exc.message, "current": exc.current}, status=exc.status)


def _accepted(turn: Turn) -> JsonResponse:
    body = {"session": turn.session.key, "session_id": turn.session_id, "turn": turn.number}
    body["status"] = turn.status
    return JsonResponse(body, status=202)


@csrf_exempt  # authenticated by its HMAC signature, not a browser session
@require_POST
def inbound_helpdesk(request: HttpRequest) -> JsonResponse:
    """A replayed event id gets the first answer: its id is the delivery's
    Idempotency-Key (api/idempotency.py), checked after the signature."""
    signature = request.headers.get("Agentdesk-Signature", "")
    try:
        event_id = verified_event_id(body=request.body, signature=signature)
    except ServiceError as exc:
        return _error(exc)
    response, _ = idempotency.run(
        owner="inbound:helpdesk",
        key=event_id,
        request=request,
        call=lambda: _webhook(request.body, signature),
    )
    return response


def _webhook(body: bytes, signature: str) -> JsonResponse:
    try:
        turn = helpdesk_webhook(body=body, signature=signature)
    except ServiceError as exc:
        return _error(exc)
    if turn is None:  # accepted before this answer was kept: done, nothing more to do
        return JsonResponse({"duplicate": True}, status=200)
    return _accepted(turn)


@csrf_exempt  # bearer-token API; browsers use the desk's CSRF-protected forms
@require_POST
def post_message(request: HttpRequest, key: str) -> JsonResponse:
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    principal = tokens.authenticate(given) if given else None
    if principal is None:
        return JsonResponse({"error": "a valid bearer token is required"}, status=401)
    if not principal.has_perm("agents.post_message"):
        return JsonResponse({"error": "this token may not post messages"}, status=403)
    if len(key) > Session._meta.get_field("key").max_length:
        return JsonResponse({"error": "the session key is longer than 200 characters"}, status=400)
    wait = ratelimit.retry_after(principal.rate_key)
    if wait:
        response = JsonResponse({"error": "too many requests with this token"}, status=429)
        response["Retry-After"] = str(wait)
        return response
    idem_key = request.headers.get(idempotency.HEADER)
    response, replayed = idempotency.run(
        owner=principal.owner,
        key=idem_key,
        request=request,
        call=lambda: _post(request, key, principal.user),
    )
    audit(request, principal, response.status_code, idem_key or "", replayed, "legacy")
    return response


def _post(request: HttpRequest, key: str, user) -> JsonResponse:
    try:
        payload = json.loads(request.body)
        text = payload["text"]
        if not isinstance(text, str) or not text.strip() or "\x00" in text:
            raise Invalid("text must be a non-empty string without NUL characters")
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": "body must be JSON with a 'text' string"}, status=400)
    except ServiceError as exc:
        return _error(exc)
    try:
        turn = message_post(key=key, text=text, trigger=Turn.Trigger.API, user=user)
    except ServiceError as exc:
        return _error(exc)
    return _accepted(turn)
