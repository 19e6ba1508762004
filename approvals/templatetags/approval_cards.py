"""What an approval card shows beside its row: `{% card_view approval as v %}`
(policy terms, votes, owner, SLA clock, context; computed once per card
when the view that rendered it did not already), and money."""

from __future__ import annotations

from django import template

from approvals import terms as who_decides
from approvals.models import Approval
from approvals.selectors import CardView, ensure_view

register = template.Library()


@register.simple_tag
def card_view(approval: Approval) -> CardView:
    return ensure_view(approval).view


@register.filter
def dollars(cents) -> str:
    return who_decides.dollars(
        cents if isinstance(cents, int) and not isinstance(cents, bool) else None
    )


@register.simple_tag
def desk_admin(user) -> bool:
    if not hasattr(user, "is_authenticated"):
        return False
    return who_decides.role_level(user) >= who_decides.ROLE_LEVEL[who_decides.ADMIN]
