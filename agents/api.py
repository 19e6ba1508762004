"""HTTP endpoints for machines: the helpdesk webhook and the messages API."""

from __future__ import annotations

import hmac
import json

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.errors import Invalid, ServiceError
from agents.inbound import helpdesk_webhook
from agents.models import Turn
from agents.services import message_post


def _error(exc: ServiceError) -> JsonResponse:
    return JsonResponse({"error": exc.message, "current": exc.current}, status=exc.status)


def _accepted(turn: Turn) -> JsonResponse:
    body = {"session": turn.session.key, "session_id": turn.session_id, "turn": turn.number}
    body["status"] = turn.status
    return JsonResponse(body, status=202)


@csrf_exempt  # authenticated by its HMAC signature, not a browser session
@require_POST
def inbound_helpdesk(request: HttpRequest) -> JsonResponse:
    try:
        turn = helpdesk_webhook(
            body=request.body, signature=request.headers.get("Agentdesk-Signature", "")
        )
    except ServiceError as exc:
        return _error(exc)
    return _accepted(turn)


def _token_ok(request: HttpRequest) -> bool:
    token = settings.AGENTDESK_API_TOKEN
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(token, given)


@csrf_exempt  # bearer-token API; browsers use the desk's CSRF-protected forms
@require_POST
def post_message(request: HttpRequest, key: str) -> JsonResponse:
    if not _token_ok(request):
        return JsonResponse({"error": "a valid bearer token is required"}, status=401)
    try:
        payload = json.loads(request.body)
        text = payload["text"]
        if not isinstance(text, str) or not text.strip():
            raise Invalid("text must be a non-empty string")
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": "body must be JSON with a 'text' string"}, status=400)
    except ServiceError as exc:
        return _error(exc)
    try:
        turn = message_post(key=key, text=text, trigger=Turn.Trigger.API)
    except ServiceError as exc:
        return _error(exc)
    return _accepted(turn)
