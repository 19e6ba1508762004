"""Event data as `json` (the compact text), not `jsonb`: about 1.4x smaller
for an event's few keys, and written on every step (agents/fields.py).
Rewrites agents_event once."""

from django.db import migrations

import agents.fields


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0009_mutable_columns_last"),
    ]

    operations = [
        migrations.AlterField(
            model_name="event",
            name="data",
            field=agents.fields.CompactJSONField(default=dict),
        ),
    ]
