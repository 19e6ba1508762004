from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        from agents import selectors
        from agents.observability import metrics
        from agents.runtime import hooks
        from approvals.gate import gate_decide
        from approvals.metrics import SlaCollector
        from approvals.rows import ROWS
        from approvals.selectors import attach_to_calls

        if not any(isinstance(c, SlaCollector) for c in metrics.SCRAPE_COLLECTORS):
            metrics.SCRAPE_COLLECTORS.append(SlaCollector())
        if attach_to_calls not in selectors.CALL_DECORATORS:
            selectors.CALL_DECORATORS.append(attach_to_calls)
        # The one gate, and the approval rows the runtime's commits carry
        # (agents/gate.py), expiry checked at execution too among them.
        hooks.gate.provide(gate_decide)
        hooks.approval_rows.provide(ROWS)
