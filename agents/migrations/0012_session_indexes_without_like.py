"""Fewer index entries and row locks per turn.

- `unique=True` and `db_index=True` on a CharField add a second index for
  LIKE 'prefix%'. Every session status change (twice per turn) is a non-HOT
  update that writes every index of the table. The key's LIKE twin is read
  only by a fork counting its siblings (rare, admins); the customer indexes
  only by an admin starting a bulk job for a customer (agents/jobs.py).
  The key stays unique through a constraint.
- Turn and runtime rows reference their session without a foreign-key
  constraint (NO_FK_CHECK in agents/models.py): each checked insert locked
  the session row KEY SHARE, one WAL record per turn.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0011_toolcall_one_index"),
    ]

    operations = [
        migrations.AddConstraint(  # first: never a moment without the rule
            model_name="session",
            constraint=models.UniqueConstraint(fields=("key",), name="session_key_unique"),
        ),
        migrations.AlterField(
            model_name="session",
            name="key",
            field=models.CharField(max_length=200),
        ),
        migrations.AlterField(
            model_name="session",
            name="customer",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="sessionruntime",
            name="session",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                primary_key=True,
                related_name="runtime",
                serialize=False,
                to="agents.session",
            ),
        ),
        migrations.AlterField(
            model_name="turn",
            name="session",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="turns",
                to="agents.session",
            ),
        ),
    ]
