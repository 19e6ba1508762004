"""The desk's pages and actions. Thin: check the permission, parse, call one
selector or service, render a template or a partial.

Every POST is `@require_POST`, CSRF-checked (htmx sends X-CSRFToken) and
calls exactly one service; a refused transition comes back as its HTTP status
(409, 403, 400) with the current state rendered in the same partial.
Every GET is `@never_cache`: pages show live state (a page from the HTTP
or back/forward cache would show a decision that was already taken), and
no-store keeps customers' data off the browser's disk.
"""

from dashboard.views.approvals import (
    approval_assign,
    approval_card,
    approval_check,
    approval_decide,
    approvals,
    approvals_bulk,
    session_approvals_assign,
)
from dashboard.views.features import (
    customer_retriage,
    followup_cancel,
    job_retry,
    jobs_page,
    session_fork,
)
from dashboard.views.history import history, history_export
from dashboard.views.sessions import (
    session,
    session_cancel,
    session_message,
    session_resume,
    sessions,
    toolcall_resolve,
)

__all__ = [
    "approval_assign",
    "approvals_bulk",
    "session_approvals_assign",
    "approval_card",
    "approval_check",
    "approval_decide",
    "approvals",
    "customer_retriage",
    "followup_cancel",
    "job_retry",
    "jobs_page",
    "session_fork",
    "history",
    "history_export",
    "session",
    "session_cancel",
    "session_message",
    "session_resume",
    "sessions",
    "toolcall_resolve",
]
