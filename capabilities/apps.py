from django.apps import AppConfig


class CapabilitiesConfig(AppConfig):
    name = "capabilities"
    verbose_name = "Capabilities"

    def ready(self) -> None:
        # The runtime knows no provider: this app plugs its profiles and its
        # sub-agents into the runtime's hooks (agents/runtime/hooks.py).
        # Imported here, not at the top: models load only once apps are ready.
        from agents.runtime import hooks
        from capabilities import profiles, subagents

        hooks.profiles.provide(profiles.get_profile)
        hooks.call_waiting.provide(subagents.park_on_child)
        hooks.turn_ended.register(subagents.turn_ended)
        hooks.turn_canceled.register(subagents.cancel_children)
        # A session whose turn ended gives its browser context back (its
        # state is in Postgres; the next turn restores it).
        from capabilities.browser.actions import turn_ended as browser_turn_ended

        hooks.turn_ended.register(browser_turn_ended)
