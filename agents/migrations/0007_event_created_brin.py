"""A BRIN index on agents_event(created_at) for the operations page's
last-hours aggregates, built CONCURRENTLY: the event log is the biggest,
hottest table, and a plain CREATE INDEX would block every step's commit for
as long as it takes to read it."""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agents", "0006_budgets_memory"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="event",
            index=django.contrib.postgres.indexes.BrinIndex(
                fields=["created_at"], name="event_created_brin"
            ),
        ),
    ]
