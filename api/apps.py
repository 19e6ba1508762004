from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The machine API: REST under /api/v1/, its tokens, idempotency keys,
    the event stream and its audit, and the inbound channels (the helpdesk's
    signed webhook, the first messages API). It builds on agents/; agents/
    imports nothing of it (integrations/ holds what we send out)."""

    name = "api"
    label = "api"
    verbose_name = "Machine API"
