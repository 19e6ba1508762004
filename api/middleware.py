"""Every error under /api/ is a problem document, including the ones no API
view wrote: Django's 404 for an unknown path, ninja's 405, a 500."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from api.problems import is_problem, problem

# The helpdesk webhook and the legacy messages API keep their JSON shape
# (and /mcp answers its own 401 as a problem: api/mcp.py).
PREFIX = "/api/v1/"


class ProblemDetailsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not request.path.startswith(PREFIX)
            or getattr(response, "streaming", False)
            or is_problem(response)
        ):
            return response
        replaced = problem(response.status_code, _detail(response.status_code))
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if header in response:
                replaced[header] = response[header]
        return replaced


def _detail(status: int) -> str:
    return {
        404: "no such resource",
        405: "this resource does not take that method",
        500: "the server failed on this request",
    }.get(status, "")
