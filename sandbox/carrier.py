"""A small carrier portal, for agents that must work a web page (issue 25).

Served under /carrier by the sandbox: a login form (the password is the
seed's, CARRIER_USERNAME / CARRIER_PASSWORD), a shipment search, a
lost-parcel claim form carrying a one-time form token and an optional
"your reference" field, and a "my claims" page listing every claim with its
reference and confirmation number. It counts logins and claims (GET
/_carrier) so tests can assert exactly-once. POST /_carrier sets up what a
test needs: {"claim_delay_ms": N} holds the next claim's answer after the
claim is committed, {"claim_lost_ms": N} holds the next claim N ms and then
drops it unrecorded (a client killed meanwhile cannot tell which happened),
{"earlier_claim": {...}} lists a claim filed before (by someone else).

State is in memory on purpose: it is this process's world, reset with the
rest by /_reset. Everything shown is escaped (html.escape): descriptions are
customer text.
"""

from __future__ import annotations

import asyncio
import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from sandbox.seed import CARRIER_PASSWORD, CARRIER_USERNAME, SHIPMENTS
from sandbox.state import sandbox_of

COOKIE = "carrier_session"


@dataclass
class Claim:
    number: str
    tracking: str
    description: str
    created: float
    reference: str = ""


@dataclass
class CarrierPortal:
    logins: int = 0
    failed_logins: int = 0
    refused_claims: int = 0
    received_claims: int = 0  # claim posts that arrived, recorded or not
    claim_delay_ms: int = 0
    claim_lost_ms: int = 0
    # Raw HTML on the news page (POST /_carrier {"news_html": ...}): a page
    # of the allowed site that links, redirects or loads scripts elsewhere.
    news_html: str = ""
    sessions: set[str] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)  # issued, not yet used
    claims: list[Claim] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.logins = self.failed_logins = self.refused_claims = self.claim_delay_ms = 0
            self.received_claims = self.claim_lost_ms = 0
            self.news_html = ""
            self.sessions.clear()
            self.tokens.clear()
            self.claims.clear()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "logins": self.logins,
                "failed_logins": self.failed_logins,
                "refused_claims": self.refused_claims,
                "received_claims": self.received_claims,
                "claims": [c.__dict__ for c in self.claims],
            }


def _portal(request: Request) -> CarrierPortal:
    return sandbox_of(request).carrier


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    doc = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)} · ParcelPost</title>"
        "<style>body{font:15px sans-serif;margin:2em;max-width:40em}"
        "label{display:block;margin:.5em 0}input,textarea{display:block;width:100%}"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:.2em .5em}</style>"
        f"</head><body><header><b>ParcelPost</b> carrier portal</header>"
        f"<main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )
    return HTMLResponse(doc, status_code=status)


def _logged_in(request: Request) -> bool:
    portal = _portal(request)
    with portal.lock:
        return request.cookies.get(COOKIE, "") in portal.sessions


def _to_login() -> Response:
    return RedirectResponse("/carrier/login", status_code=303)


async def login_form(request: Request) -> Response:
    error = request.query_params.get("error")
    note = "<p role=alert>Wrong username or password.</p>" if error else ""
    return _page(
        "Log in",
        f"{note}<form id=login method=post action=/carrier/login>"
        "<label>Username <input name=username autocomplete=username></label>"
        "<label>Password <input name=password type=password></label>"
        "<button type=submit>Log in</button></form>",
    )


async def login(request: Request) -> Response:
    form = await request.form()
    portal = _portal(request)
    ok = form.get("username") == CARRIER_USERNAME and form.get("password") == CARRIER_PASSWORD
    with portal.lock:
        if not ok:
            portal.failed_logins += 1
        else:
            portal.logins += 1
            token = secrets.token_urlsafe(18)
            portal.sessions.add(token)
    if not ok:
        return RedirectResponse("/carrier/login?error=1", status_code=303)
    response = RedirectResponse("/carrier/shipments", status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="lax", path="/carrier")
    return response


async def shipments(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    tracking = request.query_params.get("tracking", "").strip().upper()
    found = ""
    if tracking:
        shipment = SHIPMENTS.get(tracking)
        if shipment is None:
            found = f"<p>No shipment {html.escape(tracking)}.</p>"
        else:
            t = html.escape(tracking)
            found = (
                f"<table><tr><th>Tracking</th><th>Order</th><th>To</th><th>Status</th></tr>"
                f"<tr><td>{t}</td><td>{html.escape(shipment['order'])}</td>"
                f"<td>{html.escape(shipment['to'])}</td><td>{html.escape(shipment['status'])}</td>"
                f"</tr></table><p><a href='/carrier/claims/new?tracking={t}'>File a claim</a></p>"
            )
    return _page(
        "Shipments",
        "<form id=search method=get action=/carrier/shipments>"
        f"<label>Tracking number <input name=tracking value='{html.escape(tracking)}'></label>"
        "<button type=submit>Search</button></form>"
        f"{found}<p><a href=/carrier/claims>My claims</a></p>",
    )


async def claim_form(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    tracking = request.query_params.get("tracking", "").strip().upper()
    if tracking not in SHIPMENTS:
        return _page("File a claim", "<p>Unknown shipment.</p>", status=404)
    portal = _portal(request)
    token = secrets.token_urlsafe(18)
    with portal.lock:
        portal.tokens.add(token)
    t = html.escape(tracking)
    return _page(
        "Lost parcel claim",
        "<form id=claim method=post action=/carrier/claims>"
        f"<input type=hidden name=form_token value='{token}'>"
        f"<label>Tracking number <input name=tracking value='{t}' readonly></label>"
        "<label>What happened <textarea name=description required></textarea></label>"
        "<label>Your reference (optional) <input name=reference maxlength=40></label>"
        "<button type=submit>Submit claim</button></form>",
    )


async def claim_create(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    form = await request.form()
    portal = _portal(request)
    with portal.lock:
        portal.received_claims += 1
        lost, portal.claim_lost_ms = portal.claim_lost_ms, 0
    if lost:  # held, then dropped: nothing is recorded
        await asyncio.sleep(lost / 1000)
        return _page("Try again", "<p>The service is busy; nothing was filed.</p>", 503)
    with portal.lock:
        claim = _file(portal, form)
        delay, portal.claim_delay_ms = portal.claim_delay_ms, 0
    if claim is None:
        return _page("Claim refused", "<p>This form has expired or was already sent.</p>", 409)
    if delay:  # committed; the answer is late (a client killed meanwhile never sees it)
        await asyncio.sleep(delay / 1000)
    return _page(
        "Claim received",
        f"<p>Your claim for {html.escape(claim.tracking)} is filed. "
        f"Confirmation number: <strong>{claim.number}</strong></p>"
        "<p><a href=/carrier/claims>My claims</a></p>",
    )


def _file(portal: CarrierPortal, form: Any) -> Claim | None:
    """A claim from a posted form, under the portal's lock; None when refused."""
    token, tracking = str(form.get("form_token", "")), str(form.get("tracking", ""))
    if token not in portal.tokens or tracking not in SHIPMENTS:
        portal.refused_claims += 1
        return None
    portal.tokens.discard(token)  # one time: a resubmitted form is refused
    return _add(portal, tracking, form.get("description", ""), form.get("reference", ""))


def _add(portal: CarrierPortal, tracking: str, description: Any, reference: Any) -> Claim:
    claim = Claim(
        f"CLM-{len(portal.claims) + 1:04d}-{secrets.token_hex(2).upper()}",
        tracking,
        str(description)[:2000],
        time.time(),
        str(reference)[:40],
    )
    portal.claims.append(claim)
    return claim


async def claims_list(request: Request) -> Response:
    if not _logged_in(request):
        return _to_login()
    portal = _portal(request)
    with portal.lock:
        rows = "".join(
            f"<tr><td>{c.number}</td><td>{html.escape(c.tracking)}</td>"
            f"<td>{html.escape(c.reference)}</td><td>{html.escape(c.description)}</td></tr>"
            for c in portal.claims
        )
    return _page(
        "My claims",
        "<table><tr><th>Confirmation</th><th>Tracking</th><th>Your reference</th>"
        f"<th>Description</th></tr>{rows}</table>",
    )


async def news(request: Request) -> Response:
    """Deliberately unescaped: it stands for content the site does not control."""
    return _page("News", _portal(request).news_html or "<p>No news.</p>")


async def go(request: Request) -> Response:
    """An open redirect, as old portals have."""
    return RedirectResponse(request.query_params.get("to", "/carrier/login"), status_code=302)


async def admin_stats(request: Request) -> Response:
    return JSONResponse(_portal(request).stats())


async def admin_set(request: Request) -> Response:
    body = await request.json()
    portal = _portal(request)
    earlier = body.get("earlier_claim")
    with portal.lock:
        portal.claim_delay_ms = int(body.get("claim_delay_ms", portal.claim_delay_ms))
        portal.claim_lost_ms = int(body.get("claim_lost_ms", portal.claim_lost_ms))
        portal.news_html = str(body.get("news_html", portal.news_html))
        if earlier:
            _add(portal, str(earlier["tracking"]), earlier.get("description", ""), "")
    return JSONResponse({"ok": True})


routes = [
    Route("/carrier/login", login_form, methods=["GET"]),
    Route("/carrier/login", login, methods=["POST"]),
    Route("/carrier/shipments", shipments, methods=["GET"]),
    Route("/carrier/claims/new", claim_form, methods=["GET"]),
    Route("/carrier/claims", claim_create, methods=["POST"]),
    Route("/carrier/claims", claims_list, methods=["GET"]),
    Route("/carrier/news", news, methods=["GET"]),
    Route("/carrier/go", go, methods=["GET"]),
    Route("/_carrier", admin_stats, methods=["GET"]),
    Route("/_carrier", admin_set, methods=["POST"]),
]
