"""The process-wide model client (agents/llm/__init__.py) is made once,
even when a burst's first calls ask for it on many slots at once."""

from __future__ import annotations

import threading
import time

from agents.llm import forget_model_client, get_model_client

made: list[object] = []


class SlowToMake:
    """Stands in for AnthropicModel, whose SSL context takes ~20 ms to build."""

    def __init__(self) -> None:
        made.append(self)
        time.sleep(0.05)  # a slow constructor, so that racing callers overlap


def test_slots_asking_at_once_share_one_client(settings):
    settings.AGENTDESK_MODEL_CLIENT = "tests.agents.llm.test_model_client.SlowToMake"
    forget_model_client()
    made.clear()
    start = threading.Barrier(16)
    got: list[object] = []

    def ask() -> None:
        start.wait(10)
        got.append(get_model_client())

    threads = [threading.Thread(target=ask) for _ in range(16)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(got) == 16
        assert len(made) == 1, f"{len(made)} clients made for 16 slots"
        assert all(client is made[0] for client in got)
        forget_model_client()  # settings changed: made again on the next call
        assert get_model_client() is not made[0] and len(made) == 2
    finally:
        forget_model_client()
