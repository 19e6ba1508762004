"""/metrics says how many pending approvals are in their warning window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.observability import metrics
from approvals.models import Approval
from approvals.selectors import sla_of
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _gauge(text: str, line: str) -> float:
    found = [r for r in text.splitlines() if r.startswith(line + " ")]
    assert found, f"{line} missing from /metrics"
    return float(found[0].split()[-1])


def test_metrics_count_the_approvals_in_warning(settings):
    settings.AGENTDESK_APPROVAL_WARN_FRACTION = 0.2
    calm, close = factories.pending_approval(), factories.pending_approval()
    now = timezone.now()
    # 100 s clock, 10 s left: inside the last 20 %.
    Approval.objects.filter(pk=close.pk).update(
        created_at=now - timedelta(seconds=90), expires_at=now + timedelta(seconds=10)
    )

    body = metrics.render()[0].decode()

    assert _gauge(body, "agentdesk_approvals_in_warning") == 1
    assert _gauge(body, 'agentdesk_approvals_sla{state="ok"}') == 1
    assert _gauge(body, 'agentdesk_approvals_sla{state="warning"}') == 1
    assert sla_of(Approval.objects.get(pk=close.pk)).state == "warning"
    assert sla_of(Approval.objects.get(pk=calm.pk)).state == "ok"
