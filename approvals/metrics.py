"""SLA gauges for /metrics, computed per scrape from Postgres: pending
approvals by clock state (ok, in the warning window, past due but not yet
swept), and the escalated ones. Registered by ApprovalsConfig.ready()."""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# The warning window is the last fraction of each approval's own clock
# (clock_started_at after an escalation, else created_at).
_SLA_SQL = """
    SELECT
        count(*) FILTER (WHERE expires_at > now() AND now() < warn_at),
        count(*) FILTER (WHERE expires_at > now() AND now() >= warn_at),
        count(*) FILTER (WHERE expires_at <= now()),
        count(*) FILTER (WHERE escalations > 0)
    FROM (
        SELECT expires_at, escalations,
            expires_at - (expires_at - coalesce(clock_started_at, created_at)) * %s AS warn_at
        FROM approvals_approval WHERE status = 'pending'
    ) p
"""


class SlaCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(_SLA_SQL, [settings.AGENTDESK_APPROVAL_WARN_FRACTION])
            ok, warning, overdue, escalated = cursor.fetchone()
        family = GaugeMetricFamily(
            "agentdesk_approvals_sla",
            "Pending approvals by SLA clock: ok, warning (last part of their time), overdue",
            labels=["state"],
        )
        family.add_metric(["ok"], ok)
        family.add_metric(["warning"], warning)
        family.add_metric(["overdue"], overdue)
        yield family
        yield GaugeMetricFamily(
            "agentdesk_approvals_in_warning",
            "Pending approvals in their warning window (close to expiry)",
            value=warning,
        )
        yield GaugeMetricFamily(
            "agentdesk_approvals_escalated",
            "Pending approvals escalated to a higher role after their first clock ran out",
            value=escalated,
        )
