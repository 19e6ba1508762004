"""The model seam: the runtime talks to any model through base.ModelClient."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

from agents.llm.base import ModelClient


@cache
def get_model_client() -> ModelClient:
    """The process-wide client named by AGENTDESK_MODEL_CLIENT."""
    return import_string(settings.AGENTDESK_MODEL_CLIENT)()
