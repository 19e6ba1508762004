"""Every statement that moves a status, read from the code itself (issue 23,
point 4): the SQL fast paths' UPDATEs of a turn's, a tool call's, a
session's or an approval's status, and the ORM's bulk `.update(status=...)`
of those models. Each move a statement can make (from the states its WHERE
admits to the states its SET writes) must be legal in that model's move
table, and declared by its module (`MOVES = sql_moves(...)`), so the
declaration a reader trusts is the statement's own.

The SQL is read, not executed: a small reader of this project's own
statement shapes (`status = 'x'`, `status = CASE ... THEN 'x' ELSE 'y' END`,
`status = %(param)s`; `status = 'x'`, `IN (...)`, `<> 'x'` in the WHERE, or
in a subquery of the same table that picks the row). A shape it cannot read
fails the test with the statement, rather than passing unread."""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.models import Session, ToolCall, Turn
from agents.transitions import SESSION_MOVES, TOOL_MOVES, TURN_MOVES
from approvals.models import Approval
from approvals.transitions import APPROVAL_MOVES

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "approvals", "api", "capabilities", "dashboard", "integrations")
TABLES = {
    "agents_turn": ("turn", Turn.Status.values, TURN_MOVES),
    "agents_toolcall": ("tool", ToolCall.Status.values, TOOL_MOVES),
    "agents_session": ("session", Session.Status.values, SESSION_MOVES),
    "approvals_approval": ("approval", Approval.Status.values, APPROVAL_MOVES),
}
MODELS = {"Turn": "turn", "ToolCall": "tool", "Session": "session", "Approval": "approval"}
UPDATE = re.compile(r"\bUPDATE\s+(\w+)\s+SET\b", re.I)
LITERAL = re.compile(r"'(\w+)'")


@dataclass(frozen=True)
class Move:
    module: str
    model: str
    sources: frozenset[str]
    targets: frozenset[str] | None  # None: a parameter, checked when the statement is sent
    text: str


def _modules() -> list[Path]:
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    )


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _closing(text: str, start: int) -> int:
    """Where the statement that starts at `start` ends: the parenthesis that
    closes its CTE, or the end of the text."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth < 0:
                return i
    return len(text)


def _top_level(text: str) -> str:
    """The text with every parenthesised part blanked out."""
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        out.append(ch if depth == 0 else " ")
        depth -= ch == ")"
    return "".join(out)


def _clauses(statement: str) -> tuple[str, str]:
    """(SET ..., WHERE ...) of one UPDATE, cut at top-level keywords."""
    flat = _top_level(statement)
    where = re.search(r"\bWHERE\b", flat, re.I)
    ends = [m.start() for m in re.finditer(r"\b(FROM|WHERE|RETURNING)\b", flat, re.I)]
    set_end = min(ends, default=len(statement))
    where_end = len(statement)
    if where:
        after = re.search(r"\bRETURNING\b", flat[where.end() :], re.I)
        where_end = where.end() + after.start() if after else len(statement)
    return statement[:set_end], statement[where.start() : where_end] if where else ""


def _targets(set_clause: str, table: str) -> frozenset[str] | None:
    flat = _top_level(set_clause)
    found = re.search(r"(?:^|[\s,])status\s*=\s*", flat)
    if found is None:
        return frozenset()  # no status written
    rest = set_clause[found.end() :]
    if rest.startswith("%("):
        return None
    if rest.upper().startswith("CASE"):
        case = rest[: re.search(r"\bEND\b", rest, re.I).end()]
        return frozenset(re.findall(r"\b(?:THEN|ELSE)\s+'(\w+)'", case, re.I))
    if literal := re.match(r"'(\w+)'", rest):
        return frozenset({literal.group(1)})
    raise AssertionError(f"cannot read the status {table} is set to: {set_clause!r}")


def _sources(where: str, table: str, everything: list[str]) -> frozenset[str]:
    """The states the WHERE admits: its own status condition, else the one of
    a subquery of the same table that picks the row, else any state."""
    for text in (where, _same_table_subquery(where, table)):
        flat = _top_level(text) if text is where else _top_level(text[1:-1])
        body = text if text is where else text[1:-1]
        condition = re.search(rf"(?:{table}\.)?\bstatus\s*(=|<>|!=|\bIN\b)", flat, re.I)
        if condition:
            value = re.match(r"\('[^)]*\)|'\w+'", body[condition.end() :].lstrip())
            assert value, f"cannot read the states this WHERE admits: {where!r}"
            named = set(LITERAL.findall(value.group(0)))
            op = condition.group(1).upper()
            return frozenset(set(everything) - named if op in ("<>", "!=") else named)
    return frozenset(everything)


def _same_table_subquery(where: str, table: str) -> str:
    found = re.search(rf"\(\s*SELECT\b[^()]*\bFROM\s+{table}\b", where, re.I)
    return where[found.start() : _closing(where, found.start() + 1) + 1] if found else ""


def _sql_moves(path: Path, module: str = "") -> list[Move]:
    module = module or _module_name(path)
    moves = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        for found in UPDATE.finditer(text):
            table = found.group(1).lower()
            if table not in TABLES:
                continue
            model, everything, _ = TABLES[table]
            statement = text[found.end() : _closing(text, found.end())]
            set_clause, where = _clauses(statement)
            targets = _targets(set_clause, table)
            if targets == frozenset():
                continue
            sources = _sources(where, table, everything)
            moves.append(Move(module, model, sources, targets, statement.strip()))
    return moves


def _orm_moves(path: Path) -> list[tuple[str, str, str]]:
    """(module, model, function) of every `<Model>.objects....update(status=...)`."""
    tree = ast.parse(path.read_text())
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "update"
                and any(k.arg == "status" for k in node.keywords)
            ):
                continue
            root = node.func.value
            while isinstance(root, (ast.Call, ast.Attribute)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in MODELS:
                found.append((_module_name(path), MODELS[root.id], function))
    return found


SQL_MOVES = [move for path in _modules() for move in _sql_moves(path)]


def test_the_reader_finds_the_fast_paths():
    """The statements this test exists for are found: a reader that finds
    nothing would pass everything."""
    found = {(m.module, m.model) for m in SQL_MOVES}
    assert {
        ("agents.runtime.store.hot", "turn"),
        ("agents.runtime.store.hot", "session"),
        ("agents.runtime.store.hot", "tool"),
        ("agents.runtime.store.claims", "turn"),
        ("agents.runtime.store.claims", "session"),
        ("agents.services", "session"),
    } <= found


@pytest.mark.parametrize("move", SQL_MOVES, ids=lambda m: f"{m.module}:{m.model}")
def test_every_status_a_statement_writes_is_a_legal_declared_move(move: Move):
    _, _, table = next(t for t in TABLES.values() if t[0] == move.model)
    module = importlib.import_module(move.module)
    if move.targets is None:  # a parameter: the module checks it before sending
        assert "check_tool_move_from(" in Path(module.__file__).read_text(), move.text
        return
    declared = set(getattr(module, "MOVES", {}).get(move.model, []))
    for source in sorted(move.sources):
        for target in sorted(move.targets):
            if source == target:
                continue
            assert target in table.get(source, frozenset()), (
                f"{move.module} can move a {move.model} {source} -> {target}, which is "
                f"not in its move table:\n{move.text}"
            )
            assert (source, target) in declared, (
                f"{move.module} moves a {move.model} {source} -> {target} without declaring "
                f"it in MOVES = sql_moves(...):\n{move.text}"
            )


def test_every_bulk_status_update_checks_the_move_table():
    found = [move for path in _modules() for move in _orm_moves(path)]
    assert ("approvals.rows", "approval", "cancel_pending") in {
        (module, model, function.name) for module, model, function in found
    }
    for module, model, function in found:
        body = ast.unparse(function)
        assert re.search(r"\b[A-Z]+_MOVES\b|\bcheck_\w+_move", body), (
            f"{module}.{function.name} updates {model} statuses in bulk "
            "without checking the move table"
        )


def test_the_reader_refuses_an_illegal_or_undeclared_statement(tmp_path):
    """Shown able to fail: a turn moved from succeeded back to running, and
    a legal move nobody declared."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        'SQL = """UPDATE agents_turn SET status = \'running\' WHERE id = 1 '
        "AND status IN ('succeeded', 'accepted')\"\"\"\n"
    )
    (move,) = _sql_moves(bad, module="agents.runtime.store.claims")
    assert move.sources == {"succeeded", "accepted"} and move.targets == {"running"}
    with pytest.raises(AssertionError, match="succeeded -> running, which is not in its"):
        test_every_status_a_statement_writes_is_a_legal_declared_move(move)
    undeclared = Move("agents.services", "turn", frozenset({"accepted"}), move.targets, "")
    with pytest.raises(AssertionError, match="accepted -> running without declaring"):
        test_every_status_a_statement_writes_is_a_legal_declared_move(undeclared)
