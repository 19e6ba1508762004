"""The per-slot SDK clients (agents/llm/anthropic.py) honour proxy variables
when there are some, and skip looking for them when there are none."""

from __future__ import annotations

import pytest

from agents.llm.anthropic import AnthropicModel

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def no_proxies(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_without_proxy_variables_a_slots_client_does_not_look_for_them(no_proxies):
    client = AnthropicModel().client
    assert client._client.trust_env is False
    assert not client._client._mounts  # no proxy transport


def test_a_proxy_in_the_environment_is_used(no_proxies):
    no_proxies.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = AnthropicModel().client
    assert client._client.trust_env is True
    assert any("https" in str(pattern.pattern) for pattern in client._client._mounts)
