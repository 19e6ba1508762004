"""What production refuses, and the stand-in secrets local runs use instead.

With DJANGO_DEBUG off, config/settings.py calls `refuse_insecure_production`
as its last statement: a development secret (the defaults below, which are
public in this repository) or a missing one stops every process at start-up
with one message naming each variable to set.

The test suite and the bench run with DEBUG off too (as production does), so
they call `use_local_defaults` first: random secrets made for this run, put
in os.environ so every process they start inherits the same values.
"""

from __future__ import annotations

import os
import secrets

from django.core.exceptions import ImproperlyConfigured

# The defaults `make run` (DEBUG on) works with. Public: never production's.
DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
DEV_WEBHOOK_SECRET = "whsec_dev_only"


def refuse_insecure_production(
    *, secret_key: str, webhook_secret: str, metrics_token: str, metrics_open: bool
) -> None:
    problems = [
        _secret_problem("DJANGO_SECRET_KEY", secret_key, DEV_SECRET_KEY),
        _secret_problem("AGENTDESK_WEBHOOK_SECRET", webhook_secret, DEV_WEBHOOK_SECRET),
    ]
    problems = [p for p in problems if p]
    if not metrics_token and not metrics_open:
        problems.append(
            "AGENTDESK_METRICS_TOKEN is not set, so /metrics would answer anyone"
            " (set AGENTDESK_METRICS_OPEN=1 only if the network keeps /metrics private)"
        )
    if problems:
        raise ImproperlyConfigured(
            "DJANGO_DEBUG is off (production) and these settings are not fit for it: "
            + "; ".join(problems)
            + ". Generate a secret with"
            " `python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
        )


def _secret_problem(name: str, value: str, development: str) -> str | None:
    # The setting falls back to the development value when the variable is
    # unset: say which of the two it is, the fix differs (set it, or change it).
    if not os.environ.get(name) or not value:
        return f"{name} is not set"
    if value == development:
        return f"{name} is the development default"
    return None


def use_local_defaults() -> None:
    """For the tests and the bench: secrets made up for this run, plain HTTP
    (the test client and local Daphne processes), /metrics open (the tests of
    its token set one themselves). Values already in the environment win."""
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("AGENTDESK_WEBHOOK_SECRET", "whsec_" + secrets.token_urlsafe(24))
    os.environ.setdefault("AGENTDESK_METRICS_OPEN", "1")
    os.environ.setdefault("AGENTDESK_PLAIN_HTTP", "1")
