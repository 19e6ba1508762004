from django.urls import path, register_converter

from dashboard import views
from dashboard.inputs import IdConverter
from dashboard.views.budgets import session_raise_budget
from dashboard.views.operations import operations

app_name = "dashboard"
register_converter(IdConverter, "id")  # ids that always fit a bigint (dashboard/inputs.py)

urlpatterns = [
    path("", views.sessions, name="sessions"),
    path("sessions/<id:session_id>/", views.session, name="session"),
    path("sessions/<id:session_id>/messages", views.session_message, name="session_message"),
    path("sessions/<id:session_id>/cancel", views.session_cancel, name="session_cancel"),
    path("sessions/<id:session_id>/resume", views.session_resume, name="session_resume"),
    path(
        "sessions/<id:session_id>/calls/<id:call_id>/resolve",
        views.toolcall_resolve,
        name="toolcall_resolve",
    ),
    path("sessions/<id:session_id>/history", views.history, name="history"),
    path("sessions/<id:session_id>/history.json", views.history_export, name="history_export"),
    path(
        "sessions/<id:session_id>/followups/cancel",
        views.followup_cancel,
        name="followup_cancel",
    ),
    path("sessions/<id:session_id>/retriage", views.customer_retriage, name="customer_retriage"),
    path("sessions/<id:session_id>/fork", views.session_fork, name="session_fork"),
    path("sessions/<id:session_id>/budget", session_raise_budget, name="session_raise_budget"),
    path("jobs/", views.jobs_page, name="jobs"),
    path("jobs/<id:job_id>/retry", views.job_retry, name="job_retry"),
    path("ops/", operations, name="operations"),
    path("approvals/", views.approvals, name="approvals"),
    path("approvals/<id:approval_id>/", views.approval_card, name="approval"),
    path("approvals/<id:approval_id>/decide", views.approval_decide, name="approval_decide"),
    path("approvals/<id:approval_id>/check", views.approval_check, name="approval_check"),
    path("approvals/<id:approval_id>/assign", views.approval_assign, name="approval_assign"),
    path("approvals/bulk", views.approvals_bulk, name="approvals_bulk"),
    path(
        "approvals/sessions/<id:session_id>/assign",
        views.session_approvals_assign,
        name="session_approvals_assign",
    ),
]

# POST routes and the permission each needs (tests/dashboard walk this list).
POST_ROUTES = {
    "session_message": "agents.operate_session",
    "session_cancel": "agents.operate_session",
    "session_resume": "agents.operate_session",
    "toolcall_resolve": "agents.operate_session",
    "followup_cancel": "agents.operate_session",
    "customer_retriage": "agents.operate_session",
    "session_fork": "agents.fork_session",
    "session_raise_budget": "agents.raise_budget",
    "job_retry": "agents.operate_session",
    "approval_decide": "approvals.decide_approval",
    "approval_check": "approvals.decide_approval",
    "approval_assign": "approvals.decide_approval",
    "approvals_bulk": "approvals.decide_approval",
    "session_approvals_assign": "approvals.decide_approval",
}
