"""Tool errors lose credentials, query strings, secrets and stack text."""

from __future__ import annotations

from agents.tools.sanitize import MAX_CHARS, REDACTED, clean


def test_urls_lose_credentials_query_and_fragment_but_keep_host_and_path():
    text = (
        "GET https://agent:hunter2pass@desk.example:8443/v1/orders/ORD-1?api_key=abc#x answered 500"
    )
    assert clean(text) == "GET https://desk.example:8443/v1/orders/ORD-1?… answered 500"
    assert clean("http://[::1]:81/a?b=c") == "http://[::1]:81/a?…"
    assert clean("see http://127.0.0.1:8100/helpdesk/orders") == (
        "see http://127.0.0.1:8100/helpdesk/orders"
    )


def test_urllib3_style_reprs_lose_the_query_and_object_addresses():
    text = (
        "HTTPConnectionPool(host='127.0.0.1', port=8100): Max retries exceeded with url: "
        "/v1/refunds?amount=5&token=zzz (Caused by NewConnectionError('<urllib3.connection."
        "HTTPConnection object at 0x7f3a2b1c>: Failed to establish a new connection'))"
    )
    cleaned = clean(text)
    assert "url: /v1/refunds?…" in cleaned and "zzz" not in cleaned and "0x7f3a" not in cleaned


def test_configured_secrets_and_key_shaped_strings_are_redacted(settings):
    settings.STRIPE_API_KEY = "sk_live_configuredKey123"
    settings.SECRET_KEY = "django-very-secret-value-42"
    text = (
        "auth failed with sk_live_configuredKey123 and django-very-secret-value-42; "
        "Authorization: Bearer eyJhbGciOi.abc.def password=p@ss token='t0k3n' sk_test_otherKey999"
    )
    cleaned = clean(text)
    for secret in ("configuredKey123", "very-secret", "eyJhbGciOi", "p@ss", "t0k3n", "otherKey999"):
        assert secret not in cleaned, cleaned
    assert REDACTED in cleaned


def test_stack_text_is_cut_and_long_text_capped():
    text = (
        "lookup failed\nTraceback (most recent call last):\n"
        "  File \"/srv/app/agents/tools/http.py\", line 40, in call\n    raise X\nKeyError: 'x'"
    )
    assert clean(text) == "lookup failed\n(traceback omitted)"
    assert clean('boom\n  File "/srv/x.py", line 3, in f') == "boom"
    long = clean("x" * (MAX_CHARS * 3))
    assert len(long) < MAX_CHARS + 60 and long.endswith("more characters omitted)")
