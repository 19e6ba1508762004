from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """What Agentdesk sends out: signed webhooks (an outbox filled by a
    trigger on the event log) and notifications to approvers."""

    name = "integrations"
    verbose_name = "Integrations"
