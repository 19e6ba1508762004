"""Leave free space in the pages of rows the engine updates in place.

SessionRuntime is rewritten twice per step and a ToolCall once after its
insert; with room on the page Postgres makes these HOT updates (no index
writes, less WAL) instead of moving the row.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE agents_sessionruntime SET (fillfactor = 50);"
            "ALTER TABLE agents_toolcall SET (fillfactor = 80);",
            "ALTER TABLE agents_sessionruntime RESET (fillfactor);"
            "ALTER TABLE agents_toolcall RESET (fillfactor);",
        )
    ]
