"""A parent waiting on its sub-agent has its own status, waiting_for_subagent
(tool call, turn and session), instead of waiting_for_approval: it needs no
person. Parents parked on a child when this runs move to it; backwards,
they move back before the old constraints return."""

from django.db import migrations, models

FORWARD = [
    r"""UPDATE agents_toolcall SET status = 'waiting_for_subagent'
       WHERE status = 'waiting_for_approval' AND name LIKE 'subagent\_\_%'""",
    """UPDATE agents_turn t SET status = 'waiting_for_subagent'
       WHERE t.status = 'waiting_for_approval'
         AND EXISTS (SELECT 1 FROM agents_toolcall c
                     WHERE c.turn_id = t.id AND c.status = 'waiting_for_subagent')
         AND NOT EXISTS (SELECT 1 FROM agents_toolcall c
                     WHERE c.turn_id = t.id AND c.status IN ('waiting_for_approval', 'in_doubt'))""",
    """UPDATE agents_session s SET status = 'waiting_for_subagent'
       WHERE s.status = 'waiting_for_approval'
         AND EXISTS (SELECT 1 FROM agents_turn t
                     WHERE t.session_id = s.id AND t.status = 'waiting_for_subagent')""",
]
BACKWARD = [
    "UPDATE agents_toolcall SET status = 'waiting_for_approval' WHERE status = 'waiting_for_subagent'",
    "UPDATE agents_turn SET status = 'waiting_for_approval' WHERE status = 'waiting_for_subagent'",
    "UPDATE agents_session SET status = 'waiting_for_approval' WHERE status = 'waiting_for_subagent'",
]


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0014_audit_trail"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="session",
            name="session_status_valid",
        ),
        migrations.RemoveConstraint(
            model_name="toolcall",
            name="toolcall_status_valid",
        ),
        migrations.RemoveConstraint(
            model_name="turn",
            name="turn_status_valid",
        ),
        migrations.AlterField(
            model_name="session",
            name="status",
            field=models.CharField(
                choices=[
                    ("idle", "Idle"),
                    ("running", "Running"),
                    ("waiting_for_approval", "Waiting"),
                    ("waiting_for_subagent", "Waiting Subagent"),
                    ("in_doubt", "In Doubt"),
                    ("paused", "Paused"),
                    ("failed", "Failed"),
                    ("canceled", "Canceled"),
                ],
                default="idle",
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="toolcall",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("waiting_for_approval", "Waiting"),
                    ("waiting_for_subagent", "Waiting Subagent"),
                    ("approved", "Approved"),
                    ("denied", "Denied"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("in_doubt", "In Doubt"),
                    ("canceled", "Canceled"),
                ],
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="turn",
            name="status",
            field=models.CharField(
                choices=[
                    ("accepted", "Accepted"),
                    ("running", "Running"),
                    ("waiting_for_approval", "Waiting"),
                    ("waiting_for_subagent", "Waiting Subagent"),
                    ("resuming", "Resuming"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("canceled", "Canceled"),
                ],
                default="accepted",
                max_length=24,
            ),
        ),
        migrations.AddConstraint(
            model_name="session",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "idle",
                            "running",
                            "waiting_for_approval",
                            "waiting_for_subagent",
                            "in_doubt",
                            "paused",
                            "failed",
                            "canceled",
                        ],
                    )
                ),
                name="session_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="toolcall",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending",
                            "waiting_for_approval",
                            "waiting_for_subagent",
                            "approved",
                            "denied",
                            "running",
                            "succeeded",
                            "failed",
                            "in_doubt",
                            "canceled",
                        ],
                    )
                ),
                name="toolcall_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="turn",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "accepted",
                            "running",
                            "waiting_for_approval",
                            "waiting_for_subagent",
                            "resuming",
                            "succeeded",
                            "failed",
                            "canceled",
                        ],
                    )
                ),
                name="turn_status_valid",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
