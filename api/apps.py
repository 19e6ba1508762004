from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The machine API: REST under /api/v1/, its tokens, idempotency keys,
    the event stream and its audit (integrations/ holds what we send out)."""

    name = "api"
    label = "api"
    verbose_name = "Machine API"
