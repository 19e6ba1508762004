"""What a profile lets its browser do: where it may go, which forms are side
effects, how a submit's outcome is checked after a crash, and its budgets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SubmitCheck:
    """How to tell whether *this* submit happened when its outcome is unknown
    (the worker died while it was in flight). Before the preview, the runtime
    writes a reference of its own into the form's `field` (a "your
    reference" box): derived from the submit's idempotency key, the same on
    every run of that call and different for any other submit. The check
    opens `url` (e.g. a "my claims" page) and looks for a row holding the
    reference that was submitted; the first match of `confirmation` in that
    row is the confirmation. Matching on anything the form shares with
    other submits (a tracking number) would take an earlier claim for the
    same parcel for this one."""

    url: str
    field: str
    confirmation: str = r"[A-Z]{2,5}-[0-9A-Z-]{3,}"


@dataclass(frozen=True)
class BrowserConfig:
    # URL prefixes the browser may reach (`${SANDBOX_URL}/carrier/`);
    # everything else is refused and recorded (guard.py).
    allow: tuple[str, ...]
    # Forms (by id or name) whose submit changes something: gated, never
    # sent by a click. A form not listed (a login, a search) submits freely.
    side_effect_forms: tuple[str, ...] = ()
    # By form: how a submit in doubt is decided. A side-effect form without
    # a check goes in_doubt after a crash.
    checks: tuple[tuple[str, SubmitCheck], ...] = ()
    max_actions_per_turn: int = 40
    max_pages_per_turn: int = 25
    max_wall_s_per_turn: float = 600.0
    action_timeout_s: float = 20.0

    def check_for(self, form: str) -> SubmitCheck | None:
        return dict(self.checks).get(form)

    def is_side_effect(self, form: str) -> bool:
        return form in self.side_effect_forms
