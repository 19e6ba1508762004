"""What the route modules share: the error responses every operation documents."""

from __future__ import annotations

from api.schemas import Problem

# Documented on every operation (schemathesis checks each answer against them).
READ_ERRORS = {400: Problem, 401: Problem, 403: Problem, 404: Problem, 422: Problem}
WRITE_ERRORS = {**READ_ERRORS, 409: Problem, 429: Problem}
