"""The server error page, and the one case that is not an error of ours:
the database is away (restarting, failing over, every connection cut).

Then the desk answers 503 with a page that says so and when to try again,
not a 500 (issue 26): nothing was lost, and nothing on the page may need the
database (no user, no session, no base template with the user's menu).
"""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.views import defaults

RETRY_AFTER_S = 5


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: Django calls it inside its `except`, so the exception is
    at hand."""
    error = sys.exc_info()[1]
    if isinstance(error, OperationalError | InterfaceError):
        return database_away(request)
    return defaults.server_error(request)


def database_away(request: HttpRequest) -> HttpResponse:
    body = loader.get_template("503.html").render({"retry": RETRY_AFTER_S})
    response = HttpResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
