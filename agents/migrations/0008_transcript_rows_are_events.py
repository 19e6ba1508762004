"""Transcript rows become part of the events that add them.

A model reply was two rows written in one commit: the `model.replied` event
and an `agents_message` row beside it (a tool result likewise). Each step
now writes the row once, on its event (`position`, `role`, `content`), and
`agents_message` becomes a view over those events, so every reader of the
transcript is unchanged. Per agent step that is two heap tuples and two
primary-key entries less in the WAL (bench/profile.py measures it).

Existing rows move into the event log of their session, after its last
event, as `transcript.row` events (same position, role, content and time),
and `last_seq` follows so that seqs stay gap-free.
"""

from django.db import migrations, models

FORWARD = """
WITH base AS (
    SELECT m.session_id, greatest(
        coalesce(max(r.last_seq), 0),
        coalesce((SELECT max(e.seq) FROM agents_event e WHERE e.session_id = m.session_id), 0)
    ) AS last_seq
    FROM agents_message m
    LEFT JOIN agents_sessionruntime r ON r.session_id = m.session_id
    GROUP BY m.session_id
), moved AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at,
        position, role, content)
    SELECT m.session_id,
        b.last_seq + row_number() OVER (PARTITION BY m.session_id ORDER BY m.position),
        m.turn_id, 'transcript.row', '{}'::jsonb, 'migration', m.created_at,
        m.position, m.role, m.content
    FROM agents_message m JOIN base b ON b.session_id = m.session_id
    RETURNING session_id, seq
)
UPDATE agents_sessionruntime r SET last_seq = moved.last_seq
FROM (SELECT session_id, max(seq) AS last_seq FROM moved GROUP BY session_id) AS moved
WHERE r.session_id = moved.session_id;

DROP TABLE agents_message;

CREATE VIEW agents_message AS
    SELECT session_id, position, turn_id, role, content, created_at
    FROM agents_event WHERE position IS NOT NULL;
"""

BACKWARD = """
DROP VIEW agents_message;
CREATE TABLE agents_message (
    session_id bigint NOT NULL,
    position integer NOT NULL,
    turn_id bigint NOT NULL,
    role varchar(10) NOT NULL,
    content jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL,
    PRIMARY KEY (session_id, position)
);
INSERT INTO agents_message
    SELECT session_id, position, turn_id, role, content, created_at
    FROM agents_event WHERE position IS NOT NULL;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0007_event_created_brin"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="content",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="event",
            name="position",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="event",
            name="role",
            field=models.CharField(blank=True, db_default="", default="", max_length=10),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterModelOptions(
                    name="message",
                    options={"managed": False, "ordering": ["session_id", "position"]},
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
