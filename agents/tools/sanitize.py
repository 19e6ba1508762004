"""Tool errors, cleaned before they reach the model and the event log.

A tool error's text is stored (the call's output, the tool_result in the
transcript, events) and sent to the model provider. Connector exceptions put
whatever they like in it: full URLs with query strings or `user:password@`,
exception reprs with headers, object addresses, whole tracebacks. clean()
keeps what a person or the model needs (what failed, which host and path,
the status) and drops the rest:

- URLs lose their credentials, query string and fragment
  (`https://u:p@h/x?key=1` -> `https://h/x?…`); a bare `path?query` after
  "url:" (urllib3's wording) loses its query;
- the values of configured secrets (settings.SECRET_KEY, STRIPE_API_KEY,
  AGENTDESK_WEBHOOK_SECRET, ANTHROPIC_API_KEY, AGENTDESK_API_TOKEN,
  AGENTDESK_METRICS_TOKEN) and anything shaped like a key or a bearer token
  become `[redacted]`, as do `password=…`, `token=…`, `api_key=…` pairs;
- a traceback is cut off at its first line; `object at 0x…` addresses go;
- what is left is capped at MAX_CHARS.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

MAX_CHARS = 2000
REDACTED = "[redacted]"
SECRET_SETTINGS = (
    "SECRET_KEY",
    "STRIPE_API_KEY",
    "AGENTDESK_WEBHOOK_SECRET",
    "ANTHROPIC_API_KEY",
    "AGENTDESK_API_TOKEN",
    "AGENTDESK_METRICS_TOKEN",
)

_URL = re.compile(
    r"\b[a-zA-Z][a-zA-Z0-9+.\-]{1,15}://(?:[^\s'\"<>()\[\]{}/@]*@)?(?:\[[0-9a-fA-F:.]+\])?"
    r"[^\s'\"<>()\[\]{}]*"
)
_BARE_QUERY = re.compile(r"(\burl: ?/[^\s?'\"]*)\?[^\s'\")]*")
_KEYLIKE = re.compile(
    r"\b(?:sk|pk|rk|whsec|sk-ant|xox[abp])[-_][A-Za-z0-9_\-]{6,}|\bBearer\s+[A-Za-z0-9._~+/\-]+=*",
)
_PAIRS = re.compile(
    r"(?i)\b(password|passwd|secret|token|api[_-]?key|apikey|authorization|auth|signature)"
    r"(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s,;&)]+)"
)
_ADDRESS = re.compile(r" object at 0x[0-9a-fA-F]+")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):.*", re.DOTALL)
_FILE_LINE = re.compile(r'\n\s*File "[^"]+", line \d+.*', re.DOTALL)


def _clean_url(match: re.Match[str]) -> str:
    text = match.group(0)
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    dropped = "?…" if parts.query or parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + dropped


def _secrets() -> list[str]:
    values = [str(getattr(settings, name, "") or "") for name in SECRET_SETTINGS]
    # Short values would blank out ordinary words; none of ours is that short.
    return sorted({v for v in values if len(v) >= 8}, key=len, reverse=True)


def clean(text: object) -> str:
    """`text` (a message or an exception) safe to store and to show the model."""
    out = str(text)
    out = _TRACEBACK.sub("(traceback omitted)", out)
    out = _FILE_LINE.sub("", out)
    for secret in _secrets():
        out = out.replace(secret, REDACTED)
    out = _URL.sub(_clean_url, out)
    out = _BARE_QUERY.sub(r"\1?…", out)
    out = _KEYLIKE.sub(REDACTED, out)
    out = _PAIRS.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)
    out = _ADDRESS.sub("", out)
    if len(out) > MAX_CHARS:
        out = out[:MAX_CHARS] + f"… ({len(out) - MAX_CHARS} more characters omitted)"
    return out
