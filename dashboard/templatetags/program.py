"""The desk's view of a Code Mode program (capabilities/codemode/): its
source highlighted, and its result read back as value, printed output and
interpreter time.

Highlighting runs Python's own tokenizer over the source and wraps each
token, escaped, in a span by kind; anything it cannot tokenize (a program
that does not parse) is shown escaped and plain. Every byte of the source
goes through escape(): the program is the model's text.
"""

from __future__ import annotations

import io
import json
import keyword
import tokenize
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_KINDS = {
    tokenize.STRING: "str",
    tokenize.COMMENT: "com",
    tokenize.NUMBER: "num",
}
_BUILTINS = {"print", "len", "range", "sum", "min", "max", "str", "int", "float", "dict", "list"}


@register.filter
def python_highlight(source: Any) -> SafeString:
    text = str(source or "")
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return mark_safe(escape(text))
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, at = [], 0
    for token in tokens:
        if token.type in (tokenize.ENDMARKER, tokenize.DEDENT):
            continue
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1] if token.end[0] <= len(lines) else len(text)
        if start < at:
            continue
        out.append(escape(text[at:start]))
        out.append(_span(token, text[start:end]))
        at = end
    out.append(escape(text[at:]))
    return mark_safe("".join(out))


def _span(token: tokenize.TokenInfo, text: str) -> str:
    kind = _KINDS.get(token.type)
    if token.type == tokenize.NAME:
        kind = "kw" if keyword.iskeyword(text) else "bi" if text in _BUILTINS else None
    return f'<span class="py-{kind}">{escape(text)}</span>' if kind else escape(text)


@register.filter
def program_result(text: Any) -> dict[str, Any] | None:
    """run_code's result ({"value", "stdout", "host_calls", "interpreter_ms"}), or None."""
    try:
        data = json.loads(text or "")
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or "interpreter_ms" not in data:
        return None
    data["value_json"] = json.dumps(data.get("value"), indent=2, ensure_ascii=False, default=str)
    return data
