from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        from agents.observability import metrics
        from approvals.metrics import SlaCollector

        if not any(isinstance(c, SlaCollector) for c in metrics.SCRAPE_COLLECTORS):
            metrics.SCRAPE_COLLECTORS.append(SlaCollector())
