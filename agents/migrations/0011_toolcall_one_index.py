"""One secondary index on tool calls instead of two, written on every step.

`UNIQUE (session_id, tool_use_id)` replaces `UNIQUE (idempotency_key)` and the
index on `turn_id`: the key is `<session key>:<tool_use_id>` and a session's
key is unique and never changes, so the two uniqueness rules are the same;
a turn's calls are found through their session's entries.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0010_event_data_json"),
    ]

    operations = [
        migrations.AddConstraint(  # first: never a moment without the rule
            model_name="toolcall",
            constraint=models.UniqueConstraint(
                fields=("session", "tool_use_id"), name="toolcall_session_use_unique"
            ),
        ),
        migrations.RemoveConstraint(
            model_name="toolcall",
            name="toolcall_key_unique",
        ),
        migrations.AlterField(
            model_name="toolcall",
            name="turn",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tool_calls",
                to="agents.turn",
            ),
        ),
    ]
