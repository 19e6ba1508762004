"""The API's docs page in a real browser: Swagger UI renders from our own
static files under the desk's CSP, with no violation."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_docs_render_under_the_strict_csp(web, browser):
    page = browser.new_page()
    violations: list[str] = []
    outside: list[str] = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.on("request", lambda r: None if r.url.startswith(web.url) else outside.append(r.url))
    page.goto(f"{web.url}/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "Agentdesk API", timeout=20_000
    )
    expect(page.locator("#operations-approvals-approval_decide")).to_have_count(1)
    assert violations == [] and outside == []
