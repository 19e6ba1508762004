"""Put the long columns that never change after insert at the end of the
turn and tool-call rows, and leave room on turn pages for HOT updates.

A HOT update logs the new row version minus the bytes it shares with the old
one at its start and at its end. A turn's `input` (the customer's message)
sat between `status` and `started_at`/`finished_at`, so both updates of every
turn logged it again, and a full page made them non-HOT (a new row version on
another page, five index entries each). A tool call's `input` and `output`
sat between `status` and `finished_at` in the same way. Moved to the end,
an update logs its changed columns only (bench/profile.py measures it).

Postgres cannot reorder columns: each moved column is added again at the end,
filled, and the old one dropped (a dropped column costs new rows nothing).
Django's model state is unchanged: column order is not part of it.
"""

from django.db import migrations


def _move_last(table: str, column: str, type_: str) -> str:
    moved = f"{column}_moved"
    # IMMEDIATE: the UPDATE's deferred foreign-key checks run before the ALTER.
    return f"""
        SET CONSTRAINTS ALL IMMEDIATE;
        ALTER TABLE {table} ADD COLUMN {moved} {type_};
        UPDATE {table} SET {moved} = {column};
        ALTER TABLE {table} DROP COLUMN {column};
        ALTER TABLE {table} RENAME COLUMN {moved} TO {column};
        ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL;
    """  # noqa: S608 (constants of this file)


class Migration(migrations.Migration):
    dependencies = [("agents", "0008_transcript_rows_are_events")]

    operations = [
        migrations.RunSQL(
            _move_last("agents_turn", "input", "text")
            + _move_last("agents_turn", "error", "text")
            + "ALTER TABLE agents_turn SET (fillfactor = 70);",
            "ALTER TABLE agents_turn RESET (fillfactor);",
        ),
        migrations.RunSQL(
            _move_last("agents_toolcall", "input", "jsonb")
            + _move_last("agents_toolcall", "output", "text"),
            migrations.RunSQL.noop,
        ),
    ]
