"""Daphne's HTTP requests skip Twisted's parsing of POST form bodies.

Twisted's Request parses every POST's Content-Type (with the email
package's header parser) and, for a form or multipart body, the whole body
into `request.args`, in the reactor's thread, before the ASGI application
sees anything. Daphne never reads `request.args`: it hands the raw body to
Django, which parses forms itself within DATA_UPLOAD_MAX_MEMORY_SIZE. So
that work was wasted on every POST (8.6% of a web process's CPU under a
burst of webhooks, py-spy), and a large multipart body made the reactor
parse all of it while every other connection of the process waited.
Twisted's `parsePOSTFormSubmission=False` (a Request argument since
Twisted 24.7) turns it off; Daphne does not pass it, so this does.
"""

from __future__ import annotations

from typing import Any

from daphne.http_protocol import WebRequest


def skip_form_parsing() -> None:
    """Make every Daphne request of this process skip it (idempotent)."""
    if getattr(WebRequest, "_agentdesk_skips_form_parsing", False):
        return
    init = WebRequest.__init__

    def __init__(self: WebRequest, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parsePOSTFormSubmission", False)
        init(self, *args, **kwargs)

    WebRequest.__init__ = __init__
    WebRequest._agentdesk_skips_form_parsing = True
