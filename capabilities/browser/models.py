"""An agent session's browser, at rest: encrypted storage state and budgets."""

from __future__ import annotations

from django.db import models


class BrowserState(models.Model):
    """One row per agent session that used the browser, rewritten after every
    action (capabilities/browser/state.py). `state` is AES-GCM ciphertext of
    the JSON {storage (Playwright's storage state: cookies are credentials),
    url, history, forms (fields filled since the page loaded)}; nothing in it
    is readable without AGENTDESK_BROWSER_KEY. The columns beside it are
    plain on purpose: budgets and the submit in flight are read by queries."""

    session = models.OneToOneField(
        "agents.Session", on_delete=models.CASCADE, related_name="browser_state"
    )
    state = models.BinaryField()
    key_id = models.CharField(max_length=16)  # which key sealed it (rotation)
    # Budgets count per turn: a new turn starts them again.
    turn_id = models.BigIntegerField(null=True)
    actions = models.PositiveIntegerField(default=0)
    pages = models.PositiveIntegerField(default=0)
    turn_started_at = models.DateTimeField(null=True)
    # A submit that left (or was about to leave) the process and has no
    # recorded outcome yet: its idempotency key and form. Set in its own
    # commit before the click, cleared with the outcome.
    pending_key = models.CharField(max_length=300, blank=True)
    pending_form = models.CharField(max_length=200, blank=True)
    version = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "capabilities"

    def __str__(self) -> str:
        return f"browser state of session {self.session_id} (v{self.version})"
