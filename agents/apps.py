from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        # Features plug into the runtime's hooks (agents/runtime/hooks.py);
        # imported here, not at the top: models load only once apps are ready.
        from agents.features import followups
        from agents.runtime import hooks

        hooks.customer_reply.register(followups.followups_cancel_on_reply)
