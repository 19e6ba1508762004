"""The outbox: a trigger on agents_event writes the deliveries of an event
in the transaction that inserts the event.

The engine inserts events with its own statements (agents/runtime/store/),
and the desk's services through the ORM; a trigger sees both without
touching either. `WHEN` keeps it off the hot path: the function runs only
for the few kinds a webhook can carry (not for model.replied, tool.finished
and the rest of a step's events), and then costs one indexed look-up of
the subscriptions.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION integrations_event_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted text := CASE WHEN NEW.kind = 'budget.exceeded' THEN 'session.paused' ELSE NEW.kind END;
BEGIN
    INSERT INTO integrations_webhookdelivery
        (subscription_id, message_id, event_type, session_id, seq, payload, status, attempts,
         next_attempt_at, last_error, created_at)
    SELECT s.id, 'msg_' || NEW.session_id || '_' || NEW.seq, wanted, NEW.session_id, NEW.seq,
        jsonb_build_object(
            'type', wanted,
            'timestamp', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'data', jsonb_build_object(
                'session_id', NEW.session_id,
                'session_key', (SELECT key FROM agents_session WHERE id = NEW.session_id),
                'seq', NEW.seq,
                'turn_id', NEW.turn_id,
                'actor', NEW.actor,
                'event', COALESCE(NEW.data::jsonb, '{}'::jsonb))),
        'pending', 0, now(), '', now()
    FROM integrations_webhooksubscription s
    WHERE s.is_active AND s.event_types ? wanted
    ON CONFLICT (subscription_id, message_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER integrations_event_outbox
AFTER INSERT ON agents_event
FOR EACH ROW
WHEN (NEW.kind IN ('approval.requested', 'approval.decided', 'approval.expired',
                   'turn.succeeded', 'turn.failed', 'tool.in_doubt')
      OR (NEW.kind = 'budget.exceeded' AND NEW.data->>'action' = 'paused'))
EXECUTE FUNCTION integrations_event_outbox();
"""

DROP = """
DROP TRIGGER IF EXISTS integrations_event_outbox ON agents_event;
DROP FUNCTION IF EXISTS integrations_event_outbox();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0013_runtime_owner_process"),
        ("integrations", "0001_webhooks"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
