"""Reads on sessions, for views, consumers and commands."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from agents.models import Event, Session


def sessions_for_user(*, user: AbstractBaseUser) -> QuerySet[Session]:
    """Every session the user may see (all of them, for any desk role)."""
    if not user.is_authenticated:
        return Session.objects.none()
    return Session.objects.order_by("-updated_at")


def events_after(*, session_id: int, seq: int = 0, limit: int = 1000) -> QuerySet[Event]:
    return Event.objects.filter(session_id=session_id, seq__gt=seq).order_by("seq")[:limit]
