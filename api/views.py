"""HTTP endpoints for machines: the helpdesk webhook and the messages API.

The messages API here is the first one (`POST /api/sessions/<key>/messages`),
kept for the callers that use it; /api/v1/ (api/) is the documented API.
It takes the service token (AGENTDESK_API_TOKEN, which may only post
messages) or a person's API token, with the same rate limit and
Idempotency-Key handling as /api/v1/.
"""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.errors import Invalid, ServiceError
from agents.models import Session, Turn
from agents.services import message_post
from api import idempotency, inbound_checks, ratelimit, tokens
from api.inbound import delivery_verified, helpdesk_accept
from api.writes import audit


def _error(exc: ServiceError) -> JsonResponse:
    return JsonResponse({"error": exc.message, "current": exc.current}, status=exc.status)


def _accepted(turn: Turn, key: str) -> JsonResponse:
    body = {"session": key, "session_id": turn.session_id, "turn": turn.number}
    body["status"] = turn.status
    return JsonResponse(body, status=202)


WEBHOOK_OWNER = "inbound:helpdesk"


@csrf_exempt  # authenticated by its HMAC signature, not a browser session
@require_POST
def inbound_helpdesk(request: HttpRequest) -> JsonResponse:
    """One verification, one parse, one transaction: the delivery row, the
    session on first contact, the turn and this answer, kept as the answer
    to the event id (its Idempotency-Key, api/idempotency.py) for a sender
    that retries. A replay finds the delivery row taken and gets the first
    answer (a concurrent one waits for the first to commit, then does)."""
    signature = request.headers.get("Agentdesk-Signature", "")
    try:
        delivery = delivery_verified(body=request.body, signature=signature)
        fingerprint = idempotency.fingerprint_of(request.method, request.path, delivery.payload)
        with transaction.atomic():
            turn = helpdesk_accept(delivery)
            if turn is not None:
                response = _accepted(turn, f"ticket:{delivery.ticket['id']}")
                idempotency.keep(
                    owner=WEBHOOK_OWNER,
                    key=delivery.event_id,
                    fingerprint=fingerprint,
                    response=response,
                )
                return response
    except Invalid as exc:  # signed, but not a delivery we can take: an admin sees it
        inbound_checks.record_refusal(body=request.body, reason=exc.message, request=request)
        return _error(exc)
    except ServiceError as exc:
        return _error(exc)
    first = idempotency.replay(owner=WEBHOOK_OWNER, key=delivery.event_id, fingerprint=fingerprint)
    # No answer kept: accepted before answers were kept; done, nothing more to do.
    return first or JsonResponse({"duplicate": True}, status=200)


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
    return _accepted(turn, key)
