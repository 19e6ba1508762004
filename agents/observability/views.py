"""`/metrics`: the Prometheus exposition, open unless a token is configured."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agents.observability import metrics as m


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.AGENTDESK_METRICS_TOKEN
    if token and not _bearer_matches(request, token):
        response = HttpResponse("a bearer token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type, _ = m.render()
    return HttpResponse(body, content_type=content_type)


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # Constant time: the comparison does not tell how much of a guess was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
