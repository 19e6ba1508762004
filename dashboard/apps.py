from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"

    def ready(self) -> None:
        from dashboard import auth, revocation

        auth.connect()
        revocation.connect()
