"""Tool arguments brought to the schema's types before anything reads them.

JSON Schema counts `10100.0` as an integer, and so would pass it to an
approval policy that only treats `int` as an amount and to a tool that sends
it on: a float walked past the refund gate that way. So a call's arguments are
normalised first, and the policy and the tool see the normalised ones (the
engine stores them as the call's input, and the approval's hash is over them):

- a whole float where the schema says integer (`10100.0`, `1e4`) becomes the
  int it spells (10100, 10000);
- everything else that is not plainly a number of the schema's type is
  refused, never coerced: a non-integral float, NaN and infinities (anywhere:
  they are not JSON), a boolean (JSON Schema already refuses `true` for an
  integer), a string of digits (`"10100"`: a model that means a number sends
  one), and an integer outside ±(2**53 - 1), which a JSON number cannot carry
  exactly to the other side;
- nesting deeper than MAX_DEPTH is refused before the schema validator, which
  recurses, sees it;
- text with a NUL character, which PostgreSQL cannot store.

Refused means `problems()` names the first reason; Tool.validate returns it
and the call fails with an error tool_result, so nothing runs.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 32
MAX_SAFE_INTEGER = 2**53 - 1


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def normalized(schema: Any, value: Any, depth: int = 0) -> Any:
    """`value` with whole floats at integer-typed places made ints; a new
    object (the model's recorded reply keeps what it sent). Anything it does
    not convert is left for problems() to refuse."""
    if depth > MAX_DEPTH:
        return value  # refused by problems(); not walked further
    if isinstance(value, float) and "integer" in _types(schema) and "number" not in _types(schema):
        if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
        return value
    if isinstance(value, dict):
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        return {
            k: normalized(
                properties.get(k, extra if isinstance(extra, dict) else None), v, depth + 1
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [normalized(items, v, depth + 1) for v in value]
    return value


def problems(schema: Any, value: Any, path: str = "", depth: int = 0) -> str | None:
    """Why `value` (already normalised) is refused before schema validation:
    the first reason, or None; worded like Tool.validate's schema errors."""
    where = path or "input"
    if depth > MAX_DEPTH:
        return f"{where}: nested more than {MAX_DEPTH} levels deep"
    types = _types(schema)
    if isinstance(value, str):
        if "\x00" in value:  # PostgreSQL text and jsonb cannot hold it
            return f"{where}: text contains a NUL character"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return f"{where}: {value!r} is not a number JSON can carry"
        if "integer" in types and "number" not in types:
            return f"{where}: {value!r} is not a whole number within ±{MAX_SAFE_INTEGER}"
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_SAFE_INTEGER:
            return f"{where}: {value} is outside ±{MAX_SAFE_INTEGER}"
    elif isinstance(value, dict):
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        for key, item in value.items():
            if "\x00" in key:
                return f"{where}: a key contains a NUL character"
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if problem := problems(sub, item, f"{path}/{key}" if path else str(key), depth + 1):
                return problem
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for index, item in enumerate(value):
            if problem := problems(
                items, item, f"{path}/{index}" if path else str(index), depth + 1
            ):
                return problem
    return None
