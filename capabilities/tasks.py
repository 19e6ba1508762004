"""Celery interface of the capability runtime: thin tasks, see capabilities/."""

from __future__ import annotations

from celery import shared_task

from capabilities import subagents


@shared_task(name="capabilities.settle_subagents", acks_late=True, ignore_result=True)
def settle_subagents() -> dict[str, int]:
    return subagents.sweep()
