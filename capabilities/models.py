"""What agents may do, as admins configure it, and the links between sessions.

The code that uses them (providers, profile resolution, sub-agents) is the
rest of this app (capabilities/__init__.py); the rows:

- AgentProfile + ToolPolicy: a profile's capabilities and per-tool policy.
  A profile with a row here is resolved from its policies alone (least
  privilege: a capability without an enabled policy is not offered); a
  profile without a row keeps the tools declared in code
  (capabilities/registry.py).
- PolicyChange: who changed which profile or policy, when, and how.
- McpToolList: the tools an MCP server last said it has (a cache every
  worker shares, so a server that is down still has its tools offered and
  its calls fail with a clear error instead of vanishing).
- SubagentLink: a parent's delegate call and the child session doing it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from agents.tools.base import Kind  # a tool's kind, one definition


class AgentProfile(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=300, blank=True)
    # Empty: the system prompt of the code profile of the same name.
    system_prompt = models.TextField(blank=True)
    # Summed over the turn's tool calls (each costs its policy's cost_cents).
    max_cost_cents_per_turn = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class DeciderRole(models.TextChoices):
    # The desk roles that decide approvals (dashboard/roles.py), lowest first.
    APPROVER = "approver"
    ADMIN = "admin"


class OnExpiry(models.TextChoices):
    DENY = "deny", "deny: the model reads why"
    ESCALATE = "escalate", "escalate: re-open for the higher role with a fresh clock"


class ApprovalRule(models.TextChoices):
    """A profile's rule for one tool, read by the one gate (approvals/gate.py)."""

    DEFAULT = "default", "the built-in rules (approvals/policies.py)"
    ALWAYS = "always", "always ask an approver"
    NEVER = "never", "never ask"
    # The tool stays offered (a program's stubs keep their shape) and every
    # call of it is refused, with the reason, to the model.
    DENY = "deny", "refuse every call"


class ToolPolicy(models.Model):
    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="policies")
    # As people read it: `lookup_order`, `docs.search` (MCP server.tool),
    # `subagent.research` (delegate to the `research` profile).
    capability = models.CharField(max_length=128)
    enabled = models.BooleanField(default=True)
    kind = models.CharField(
        max_length=24, choices=Kind.choices, blank=True, help_text="empty: as declared"
    )
    approval = models.CharField(
        max_length=8, choices=ApprovalRule.choices, default=ApprovalRule.DEFAULT
    )
    timeout_s = models.FloatField(null=True, blank=True, help_text="empty: as declared")
    max_calls_per_turn = models.PositiveIntegerField(null=True, blank=True)
    cost_cents = models.PositiveIntegerField(default=0)
    # Who decides this tool's approvals (approvals/policies.py::terms_for):
    # the role that may decide, an amount above which the higher role is
    # needed, an amount above which N distinct people must approve, and what
    # happens when nobody decides in time. Empty amounts: never.
    decider_role = models.CharField(
        max_length=16, choices=DeciderRole.choices, default=DeciderRole.APPROVER
    )
    admin_above_cents = models.PositiveIntegerField(
        null=True, blank=True, help_text="above this amount only an admin decides"
    )
    quorum_above_cents = models.PositiveIntegerField(
        null=True, blank=True, help_text="above this amount several people must approve"
    )
    quorum_votes = models.PositiveSmallIntegerField(
        default=2, help_text="how many distinct approvers a quorum needs"
    )
    quorum_deny_ends = models.BooleanField(
        default=True, help_text="one deny ends a quorum (else it counts against)"
    )
    on_expiry = models.CharField(max_length=10, choices=OnExpiry.choices, default=OnExpiry.DENY)
    escalation_ttl_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="the escalated approval's fresh clock; empty: as first"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["profile", "capability"]
        constraints = [
            models.UniqueConstraint(fields=["profile", "capability"], name="toolpolicy_unique"),
            models.CheckConstraint(
                condition=Q(kind__in=["", *Kind.values]), name="toolpolicy_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(approval__in=ApprovalRule.values), name="toolpolicy_approval_valid"
            ),
            models.CheckConstraint(
                condition=Q(decider_role__in=DeciderRole.values), name="toolpolicy_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(on_expiry__in=OnExpiry.values), name="toolpolicy_expiry_valid"
            ),
            models.CheckConstraint(condition=Q(quorum_votes__gte=2), name="toolpolicy_quorum_2"),
        ]
        verbose_name_plural = "tool policies"

    def __str__(self) -> str:
        return f"{self.profile_id}:{self.capability}"


class PolicyChange(models.Model):
    """Append-only: one row per change of a profile or a tool policy."""

    at = models.DateTimeField(auto_now_add=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150)  # kept when the user is deleted
    profile = models.CharField(max_length=64)
    target = models.CharField(max_length=200)  # "profile" or the capability
    action = models.CharField(max_length=10)  # created / changed / deleted
    changes = models.JSONField(default=dict)  # field -> [before, after]

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["profile", "-at"], name="policychange_profile_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.profile}/{self.target}"


class McpToolList(models.Model):
    server = models.CharField(max_length=64, unique=True)
    tools = models.JSONField(default=list)  # [{name, description, input_schema, output_schema}]
    refreshed_at = models.DateTimeField(null=True, blank=True)  # last good answer
    error = models.TextField(blank=True)  # last failure, '' after a good answer
    failed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"tools of MCP server {self.server}"


class LinkStatus(models.TextChoices):
    RUNNING = "running"  # the child's turn is not finished, or its answer not yet handed back
    SETTLED = "settled"  # the answer went back to the parent call
    CANCELED = "canceled"  # the parent no longer waits (canceled, failed)


class SubagentLink(models.Model):
    """A delegate call of a parent session and the child session doing the work.

    One per parent call (the unique constraint is what makes creating the
    child exactly-once when a worker dies and the call is reissued).
    """

    Status = LinkStatus

    parent_session = models.ForeignKey(
        "agents.Session", on_delete=models.CASCADE, related_name="subagent_children"
    )
    parent_call = models.OneToOneField(
        "agents.ToolCall", on_delete=models.CASCADE, related_name="subagent", db_constraint=False
    )
    parent_turn_id = models.BigIntegerField()
    child_session = models.ForeignKey(
        "agents.Session", on_delete=models.CASCADE, related_name="subagent_parent_links"
    )
    child_turn = models.ForeignKey("agents.Turn", on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=12, choices=LinkStatus.choices, default=LinkStatus.RUNNING)
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=LinkStatus.values), name="link_status_valid"
            )
        ]
        indexes = [
            # The settle sweep looks at open links only.
            models.Index(fields=["status"], name="link_running_idx", condition=Q(status="running")),
        ]

    def __str__(self) -> str:
        return f"{self.parent_session_id} -> {self.child_session_id} ({self.status})"


# Browser sessions keep their state in this app (capabilities/browser/).
from capabilities.browser.models import BrowserState  # noqa: E402, F401
