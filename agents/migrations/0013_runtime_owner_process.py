"""The claim names its worker process, whose liveness lock tells a live owner
from a dead one (agents/runtime/ownership.py): ownership is no longer an
advisory lock per session held on a connection per session."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0012_session_indexes_without_like"),
    ]

    operations = [
        migrations.AddField(
            model_name="sessionruntime",
            name="owner_process",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
    ]
