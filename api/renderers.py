"""JSON bodies as the OpenAPI document describes them."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse
from pydantic import BaseModel


def json_response(body: Any, status: int = 200) -> HttpResponse:
    if isinstance(body, BaseModel):
        body = body.model_dump(mode="json", by_alias=True)
    return HttpResponse(
        json.dumps(body, cls=DjangoJSONEncoder), status=status, content_type="application/json"
    )
