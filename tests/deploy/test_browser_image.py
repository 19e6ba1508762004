"""Chromium for agents' browser: the image installs it, `make run` says how."""

from __future__ import annotations

import importlib.util

from tests.deploy.image import ROOT, instructions


def test_the_image_installs_chromium_where_the_browser_looks():
    steps = instructions(ROOT / "Dockerfile")
    runs = [rest for word, rest in steps if word == "RUN"]
    assert any("apt-get install" in r and " chromium" in r for r in runs)
    assert ("ENV", "AGENTDESK_BROWSER_EXECUTABLE=/usr/bin/chromium") in steps


def test_make_run_says_how_to_install_a_missing_chromium(monkeypatch):
    spec = importlib.util.spec_from_file_location("run_script", ROOT / "scripts" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    monkeypatch.setenv("AGENTDESK_BROWSER_EXECUTABLE", "/nowhere/chromium")
    note = "\n".join(run.browser_note())
    assert "apt-get install -y chromium" in note and "AGENTDESK_BROWSER_EXECUTABLE" in note
    monkeypatch.setenv("AGENTDESK_BROWSER_EXECUTABLE", "/usr/bin/chromium")
    assert run.browser_note() == []
