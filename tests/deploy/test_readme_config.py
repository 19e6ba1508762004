"""What a deployer reads: every setting the product reads from the
environment is in the README (its configuration table, or the paragraphs
around it), so a new setting cannot land undocumented."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Read by a helper (env_int("NAME", ...)) or straight from os.environ.
READ = re.compile(r"""(?:env_\w+|os\.environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']""")
# Conventions of processes and libraries, not Agentdesk settings.
NOT_OURS = {"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "OTEL_SERVICE_NAME", "NO_COLOR", "FORCE_COLOR"}


APPS = ("config", "agents", "approvals", "api", "capabilities", "dashboard", "integrations")


def settings_read() -> set[str]:
    sources = [
        path
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if path.name != "settings_test.py"  # the test run's own wiring
    ]
    sources.append(ROOT / "scripts" / "run.py")
    return {name for path in sources for name in READ.findall(path.read_text())} - NOT_OURS


def documented(readme: str) -> set[str]:
    """Every name in backticks, and the `_SUFFIX` shorthand of a table row
    (`AGENTDESK_JOB_BACKOFF_S` / `_BACKOFF_MAX_S`) spelled out against the
    row's first name."""
    names: set[str] = set()
    for line in readme.splitlines():
        quoted = re.findall(r"`([A-Z_][A-Z0-9_]*)`", line)
        full = [q for q in quoted if not q.startswith("_")]
        names.update(full)
        if not full:
            continue
        parts = full[0].split("_")
        stems = ["_".join(parts[:k]) for k in range(1, len(parts))]
        names.update(stem + q for q in quoted if q.startswith("_") for stem in stems)
    return names


def test_every_setting_is_in_the_readme():
    missing = settings_read() - documented((ROOT / "README.md").read_text())
    assert not missing, f"settings read but not in README.md: {sorted(missing)}"


def test_the_check_sees_a_setting_left_out():
    """Shown able to fail: the reader finds settings, and a table without a
    row for one of them is caught; the shorthand expands."""
    read = settings_read()
    assert {"AGENTDESK_WORKER_SLOTS", "AGENTDESK_JOB_BACKOFF_MAX_S"} <= read
    table = "| `AGENTDESK_JOB_BACKOFF_S` / `_BACKOFF_MAX_S` | `10` / `600` | ... |"
    assert {"AGENTDESK_JOB_BACKOFF_S", "AGENTDESK_JOB_BACKOFF_MAX_S"} <= documented(table)
    assert "AGENTDESK_WORKER_SLOTS" not in documented(table)
