"""The model seam: the runtime talks to any model through base.ModelClient."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from agents.llm.base import ModelClient
from agents.per_process import PerProcess


def _make() -> ModelClient:
    return import_string(settings.AGENTDESK_MODEL_CLIENT)()


# Made once, under a lock: a burst's first model calls arrive on hundreds of
# slots at once, and functools.cache let every one of them build a client of
# its own (the SDK's SSL context, ~20 ms of CPU each) before any was cached:
# seconds of a fresh worker's CPU just as the burst needed it.
_client: PerProcess[ModelClient] = PerProcess(_make)


def get_model_client() -> ModelClient:
    """The process-wide client named by AGENTDESK_MODEL_CLIENT."""
    return _client.get()


def forget_model_client() -> None:
    """The next call makes the client again (settings changed: tests, benches)."""
    _client.clear()
