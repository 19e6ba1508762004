"""The layering, as a test on the import graph (grimp; imports inside
functions count too: moving an import into a function hides a cycle, it does
not remove it).

- The runtime (agents/runtime/: claim / act / record, ownership, sweeper,
  dispatch, store) imports no feature and no provider, directly or through
  another module: features plug in through agents/runtime/hooks.py.
- approvals/ does not import the desk (dashboard/).
- The sandbox (the outside world, its own process) imports nothing of ours.
- No import cycle among the product's modules.

Each check is a function of the graph, so the last tests can show that each
one fails on a graph with one bad import added.
"""

from __future__ import annotations

import grimp
import pytest

OURS = ("agents", "approvals", "capabilities", "dashboard", "api", "integrations", "config")
RUNTIME = "agents.runtime"
# What the runtime must not reach: the features and providers built on it, and
# every interface (desk, API, outbound integrations, tasks).
FEATURES = (
    "capabilities",  # profiles from rows, MCP, sub-agents
    "agents.features",  # follow-ups, jobs, retention, forks
    "agents.services",  # writes from people and inbound channels
    "agents.selectors",
    "agents.tasks",
    "agents.admin",
    "agents.tools.support",  # the built-in connectors (a provider)
    "agents.tools.http",
    "approvals.services",
    "dashboard",
    "api",
    "integrations",
)


def graph() -> grimp.ImportGraph:
    """A fresh graph of the code as it is (a test may add an import to its own)."""
    return grimp.build_graph(*OURS, "sandbox", cache_dir=None)


def runtime_violations(g: grimp.ImportGraph) -> list[str]:
    found = []
    for feature in FEATURES:
        chain = g.find_shortest_chain(importer=RUNTIME, imported=feature, as_packages=True)
        if chain:
            found.append(" -> ".join(chain))
    return found


def approvals_violations(g: grimp.ImportGraph) -> list[str]:
    chain = g.find_shortest_chain(importer="approvals", imported="dashboard", as_packages=True)
    return [" -> ".join(chain)] if chain else []


def sandbox_violations(g: grimp.ImportGraph) -> list[str]:
    found = []
    for package in OURS:
        for module in sorted(g.find_children("sandbox") | {"sandbox"}):
            for imported in g.find_modules_directly_imported_by(module):
                if imported == package or imported.startswith(package + "."):
                    found.append(f"{module} -> {imported}")
    return sorted(set(found))


def cycles(g: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    modules = sorted(m for m in g.modules if m.split(".")[0] in OURS)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: the graph is deep enough to matter
        work = [(root, iter(sorted(g.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt.split(".")[0] not in OURS:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(g.find_modules_directly_imported_by(nxt)))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


# --- The contracts ----------------------------------------------------------------------


def test_the_runtime_imports_no_feature():
    assert runtime_violations(graph()) == []


def test_approvals_do_not_import_the_desk():
    assert approvals_violations(graph()) == []


def test_the_sandbox_imports_nothing_of_ours():
    assert sandbox_violations(graph()) == []


def test_no_import_cycle_among_product_modules():
    assert cycles(graph()) == []


# --- ...and each can fail ---------------------------------------------------------------


def test_a_reintroduced_cycle_is_caught():
    """The old cycle's first link, engine -> sub-agents, made again: the
    sub-agents import the services, which import the runtime's store and
    dispatch, which the engine imports; and the runtime now reaches a feature."""
    g = graph()
    assert cycles(g) == []
    g.add_import(importer="agents.runtime.store.control", imported="agents.services")
    found = cycles(g)
    assert any({"agents.runtime.store.control", "agents.services"} <= set(c) for c in found)
    assert any("agents.services" in v for v in runtime_violations(g))


def test_a_feature_imported_through_another_module_is_caught():
    g = graph()
    g.add_import(importer="agents.runtime.engine", imported="agents.events")  # harmless
    assert runtime_violations(g) == []
    g.add_import(importer="agents.events", imported="agents.features.jobs")
    assert runtime_violations(g) != []


@pytest.mark.parametrize(
    "importer, imported, check",
    [
        ("approvals.models", "dashboard.presenters", approvals_violations),
        ("sandbox.app", "agents.models", sandbox_violations),
    ],
)
def test_the_other_contracts_can_fail(importer, imported, check):
    g = graph()
    assert check(g) == []
    g.add_import(importer=importer, imported=imported)
    assert check(g) != []
