"""What a profile lets its browser do: where it may go, which forms are side
effects, how a submit's outcome is checked after a crash, and its budgets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SubmitCheck:
    """How to tell whether a submit happened when its outcome is unknown
    (the worker died while it was in flight): open `url` (e.g. a "my claims"
    page) and look for a row holding the submitted value of `field`; the
    first match of `confirmation` in that row is the confirmation."""

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
