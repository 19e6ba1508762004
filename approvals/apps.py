from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        from agents import selectors
        from agents.observability import metrics
        from agents.runtime import hooks
        from approvals.gate import gate_decide
        from approvals.metrics import SlaCollector
        from approvals.selectors import decorate
        from approvals.services import approval_lapse, approval_request

        if not any(isinstance(c, SlaCollector) for c in metrics.SCRAPE_COLLECTORS):
            metrics.SCRAPE_COLLECTORS.append(SlaCollector())
        if decorate not in selectors.APPROVAL_DECORATORS:
            selectors.APPROVAL_DECORATORS.append(decorate)
        # Expiry checked at execution too (the engine asks before an approved call runs).
        hooks.approval_lapsed.provide(approval_lapse)
        # The one gate, and the approval rows it asks for (agents/gate.py).
        hooks.gate.provide(gate_decide)
        hooks.approval_request.provide(approval_request)
