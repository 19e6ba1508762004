"""A profile's tools as Python functions: stubs from their JSON schemas.

Each tool becomes one function of the program's globals. Its parameters are
the schema's properties (required ones first, the rest keyword-only with a
default of None), typed from the schema; it returns `Any` (the tool's JSON
result, decoded). The stubs are what Monty type-checks a program against
before it runs, what `describe(name)` answers with, and (one line each) what
the system prompt lists.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any

from agents.tools.base import Tool

IDENT_RE = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class Param:
    name: str  # the Python name
    prop: str  # the schema's property name
    annotation: str
    required: bool


@dataclass(frozen=True)
class Function:
    """One host function of a program: a tool under a Python name."""

    name: str
    tool: Tool
    params: tuple[Param, ...]

    @property
    def summary(self) -> str:
        first = self.tool.description.strip().split("\n")[0]
        return first.split(". ")[0].rstrip(".") + "." if first else ""

    def signature(self) -> str:
        required = [f"{p.name}: {p.annotation}" for p in self.params if p.required]
        optional = [
            f"{p.name}: {p.annotation} | None = None" for p in self.params if not p.required
        ]
        parts = required + (["*", *optional] if optional else [])
        return f"def {self.name}({', '.join(parts)}) -> Any"

    def stub(self) -> str:
        doc = self.tool.description.strip().replace('"""', "'''").replace("\\", "\\\\")
        return f'{self.signature()}:\n    """{doc}"""\n    ...\n'

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """A call's Python arguments as the tool's JSON input (None left out:
        an optional argument not given). Raises TypeError as Python would."""
        if len(args) > sum(1 for p in self.params if p.required):
            raise TypeError(f"{self.name}() takes its optional arguments by keyword only")
        by_name = {p.name: p for p in self.params}
        out: dict[str, Any] = {}
        for param, value in zip(self.params, args, strict=False):
            out[param.prop] = value
        for name, value in kwargs.items():
            param = by_name.get(name)
            if param is None:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {name!r}")
            if param.prop in out:
                raise TypeError(f"{self.name}() got multiple values for argument {name!r}")
            out[param.prop] = value
        missing = [p.name for p in self.params if p.required and p.prop not in out]
        if missing:
            raise TypeError(f"{self.name}() missing required argument(s): {', '.join(missing)}")
        return {k: v for k, v in out.items() if v is not None}


def py_name(name: str) -> str:
    cleaned = IDENT_RE.sub("_", name)
    if not cleaned or cleaned[0].isdigit() or keyword.iskeyword(cleaned):
        cleaned = f"_{cleaned}"
    return cleaned


def annotation(schema: Any, depth: int = 0) -> str:
    """A JSON schema as a Python type annotation (Any where it cannot say)."""
    if not isinstance(schema, dict) or depth > 4:
        return "Any"
    if "enum" in schema and schema["enum"]:
        values = [v for v in schema["enum"] if isinstance(v, (str, int, bool)) or v is None]
        if values and len(values) == len(schema["enum"]):
            return f"Literal[{', '.join(repr(v) for v in values)}]"
    for combiner in ("anyOf", "oneOf"):
        if isinstance(schema.get(combiner), list):
            return _union([annotation(s, depth + 1) for s in schema[combiner]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([annotation({**schema, "type": k}, depth + 1) for k in kind])
    if kind == "array":
        return f"list[{annotation(schema.get('items'), depth + 1)}]"
    simple = {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "object": "dict[str, Any]",
        "null": "None",
    }
    return simple.get(kind, "Any")


def _union(parts: list[str]) -> str:
    unique = list(dict.fromkeys(parts))
    return "Any" if "Any" in unique else " | ".join(unique)


def function_for(tool: Tool) -> Function:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = set(schema.get("required") or [])
    params = [
        Param(py_name(prop), prop, annotation(sub), prop in required) for prop, sub in props.items()
    ]
    params.sort(key=lambda p: not p.required)  # stable: schema order within each group
    return Function(py_name(tool.name), tool, tuple(params))


DESCRIBE_STUB = (
    "def describe(name: str) -> str:\n"
    '    """The full signature and documentation of a host function."""\n'
    "    ...\n"
)


# What a denied or refused host call raises: a builtin of the interpreter
# that its type checker does not list.
EXCEPTIONS = "class PermissionError(OSError): ...\n\n"


def stubs_for(functions: list[Function]) -> str:
    header = "from typing import Any, Literal\n\n" + EXCEPTIONS
    return header + DESCRIBE_STUB + "\n" + "\n".join(f.stub() for f in functions)


def listing(functions: list[Function]) -> str:
    """One line per function, for the system prompt: the name and what it does."""
    return "\n".join(f"- {f.name}: {f.summary}" for f in functions)


def describe(functions: dict[str, Function], name: str) -> str:
    function = functions.get(name)
    if function is None:
        known = ", ".join(sorted(functions))
        return f"No host function named {name!r}. Available: {known}"
    return function.stub()
