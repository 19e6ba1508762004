"""Model fields of our own."""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from psycopg.types.json import Json


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class CompactJSONField(models.JSONField):
    """JSON kept as PostgreSQL `json`: the compact text as written.

    For small append-only documents read whole (event data): `jsonb` stores
    every number as a `numeric` and every key and value with an offset
    entry, about 1.4x the compact text for an event's few keys, and that is
    WAL on every step. What `json` gives up is containment and indexing of
    the document (`@>`, GIN); `->`, `->>` and Django's key lookups work.
    """

    def db_type(self, connection) -> str:
        return "json"

    def get_db_prep_value(self, value, connection, prepared=False):
        if not prepared:
            value = self.get_prep_value(value)
        if hasattr(value, "as_sql"):
            return value
        return Json(value, dumps=_compact)

    def from_db_value(self, value, expression, connection):
        if value is None or not isinstance(value, str | bytes | bytearray):
            return value  # psycopg decodes `json` itself
        return super().from_db_value(value, expression, connection)


def json_column(value: Any) -> Any:
    """A json or jsonb column read through a raw cursor: Django's psycopg
    setup hands those over as text (the ORM's fields parse them)."""
    return json.loads(value) if isinstance(value, str) else value
