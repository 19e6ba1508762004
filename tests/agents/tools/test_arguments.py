"""Arguments are normalised to the schema's types, and what cannot be is refused."""

from __future__ import annotations

import math

from agents.tools.arguments import MAX_DEPTH
from agents.tools.base import Kind, Tool, ToolOutput

SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "any": {},
    },
    "additionalProperties": False,
}
TOOL = Tool("t", "test", SCHEMA, Kind.READ_ONLY, lambda ctx, args: ToolOutput(""))


def test_whole_floats_become_ints_only_where_the_schema_says_integer():
    arguments = {"count": 3.0, "ratio": 2.0, "tags": [1.0, 2]}
    normalised = TOOL.normalize(arguments)
    assert normalised == {"count": 3, "ratio": 2.0, "tags": [1, 2]}
    assert type(normalised["count"]) is int and type(normalised["ratio"]) is float
    assert all(type(t) is int for t in normalised["tags"])
    assert arguments["count"] == 3.0 and type(arguments["count"]) is float  # a copy
    assert TOOL.validate(normalised) is None


def test_what_cannot_be_normalised_is_refused_with_where_and_why():
    assert "count" in TOOL.validate(TOOL.normalize({"count": 2.5}))
    assert "not a number JSON can carry" in TOOL.validate({"ratio": math.nan})
    assert "not a number JSON can carry" in TOOL.validate({"any": [math.inf]})
    assert "outside" in TOOL.validate({"any": 2**60})
    assert "not a whole number" in TOOL.validate(TOOL.normalize({"count": 1e300}))
    assert TOOL.validate({"count": True}) is not None  # JSON Schema: a bool is no integer
    assert TOOL.validate({"count": "3"}) is not None


def test_deep_nesting_is_refused_before_the_schema_validator_recurses():
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    problem = TOOL.validate(TOOL.normalize({"any": deep}))
    assert problem is not None and f"nested more than {MAX_DEPTH} levels" in problem
