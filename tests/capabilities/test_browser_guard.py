"""Which URLs a browser context may reach (capabilities/browser/guard.py).
The refusals in a real Chromium are in test_browser_sessions.py; these are
the rules themselves, without a browser."""

from __future__ import annotations

from capabilities.browser import guard

PORTAL = "http://127.0.0.1:8100/carrier/"


def _allowed(url: str) -> str | None:
    return guard.allowed(url, [guard.Prefix.parse(PORTAL), guard.Prefix.parse(DESK + "/")])


DESK = "http://127.0.0.1:8000"


def test_only_the_listed_prefix_is_reached_and_never_the_desk(settings):
    settings.AGENTDESK_BASE_URL = DESK
    assert _allowed("http://127.0.0.1:8100/carrier/login") is None
    assert _allowed("http://127.0.0.1:8100/carrier/claims?x=1") is None
    assert _allowed("ws://127.0.0.1:8100/carrier/live") is None
    # Listed, but the desk's own origin: refused all the same.
    assert _allowed(f"{DESK}/approvals/") == "the desk's own origin"
    for url in (
        "http://127.0.0.1:8100/_carrier",  # same host, unlisted path
        "http://127.0.0.1:8100/carrierx/",
        "http://127.0.0.1:8101/carrier/",  # another loopback port
        "https://127.0.0.1:8100/carrier/",
        "http://localhost:8100/carrier/",
    ):
        assert _allowed(url) == "not in the profile's allowed URLs", url
    assert _allowed("file:///etc/passwd") == "scheme not allowed"


def test_dot_segments_cannot_climb_out_of_an_allowed_prefix(settings):
    """A redirect's Location is checked as written but fetched as resolved
    (a sub-resource's hops are fetched by Playwright, whose URL parser
    removes dot segments): "/carrier/../_carrier" is "/_carrier"."""
    settings.AGENTDESK_BASE_URL = DESK
    for path in (
        "/carrier/../_carrier",
        "/carrier/%2e%2e/_carrier",
        "/carrier/.%2E/_carrier",
        "/carrier/..\\_carrier",
        "/carrier/./../_carrier",
    ):
        url = f"http://127.0.0.1:8100{path}"
        assert _allowed(url) == "not in the profile's allowed URLs", url
    assert _allowed("http://127.0.0.1:8100/carrier/./claims/../login") is None
