"""Secrets never reach a log: a filter on every handler (config/settings.py
LOGGING, and Celery's own handlers: config/celery.py) rewrites each record
before it is written.

Redacted: the value of any Authorization header or field, whatever its
scheme (Bearer, Token, Basic, none); a credential after a scheme word
anywhere in a line; token-shaped strings (our API tokens `adk_...`, webhook
secrets `whsec_...`, Anthropic, Stripe and Slack keys); and the configured
secrets themselves (the service token, the webhook and metrics secrets,
SECRET_KEY), however they got into the message. A library that logs a
header it did not expect (django-ninja does, under DEBUG) or a traceback
that shows a request are covered alike: the message is formatted, then
redacted, and so is the traceback's text.
"""

from __future__ import annotations

import functools
import logging
import re

MASK = "[redacted]"

_PATTERNS = [
    # Authorization: <value> / 'HTTP_AUTHORIZATION': '<value>' / "authorization": "<value>"
    re.compile(
        r"""(?i)((?:http_)?(?:proxy-)?authorization['"]?\s*[:=]\s*(?:b?['"])?)"""
        r"""([^'"\r\n]+)"""
    ),
    # A scheme word and its credential: Bearer x, Token x, Basic x.
    re.compile(r"(?i)(\b(?:bearer|token|basic|apikey|api-key)\s+)([A-Za-z0-9._~+/=:-]{8,})"),
]
_SHAPES = re.compile(
    r"adk_[0-9a-f]{8}_[A-Za-z0-9_-]+"  # our API tokens
    r"|whsec_[A-Za-z0-9+/=_-]+"  # Standard Webhooks secrets
    r"|sk-ant-[A-Za-z0-9_-]+"  # Anthropic
    r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]+"  # Stripe
    r"|\bxox[abprs]-[A-Za-z0-9-]+"  # Slack
)


@functools.cache
def _configured() -> tuple[str, ...]:
    """The secrets settings hold (read once: settings do not change)."""
    from django.conf import settings

    names = (
        "AGENTDESK_API_TOKEN",
        "AGENTDESK_WEBHOOK_SECRET",
        "AGENTDESK_METRICS_TOKEN",
        "SECRET_KEY",
        "ANTHROPIC_API_KEY",
        "STRIPE_API_KEY",
        "SLACK_BOT_TOKEN",
        "EMAIL_HOST_PASSWORD",
    )
    try:
        values = [getattr(settings, name, "") for name in names]
    except Exception:  # settings not configured (a bare script)
        return ()
    return tuple(sorted({v for v in values if isinstance(v, str) and len(v) >= 8}, key=len))[::-1]


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    text = _SHAPES.sub(MASK, text)
    for secret in _configured():
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class Redact(logging.Filter):
    """Rewrites the record's message (and traceback text) with secrets masked.
    Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_agentdesk_redacted", False):
            return True  # a second handler sees the record already clean
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            # Formatters format exc_info afresh when it is there: only the text is left.
            record.exc_text, record.exc_info = redact(record.exc_text), None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, redact(value))
        record._agentdesk_redacted = True
        return True


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def install(logger: logging.Logger | None = None) -> None:
    """The filter on every handler of `logger` (the root by default) that
    does not have it yet: for handlers someone else set up (Celery's)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, Redact) for f in handler.filters):
            handler.addFilter(Redact())
