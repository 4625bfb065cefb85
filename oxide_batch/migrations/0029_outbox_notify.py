"""Wake the notifier when an outbox event commits (issue 41): on PostgreSQL,
each INSERT into ``ob_notification_event`` calls ``pg_notify`` on the
channel ``oxide_batch_outbox`` from a statement-level trigger, in the
inserting transaction — PostgreSQL delivers it only when that transaction
commits, never for one that rolls back, and folds repeats within one
transaction into one. The trigger sends no statement of its own: a run's end
is still BEGIN, the locking read, the UPDATE, the event's INSERT and COMMIT
(``tests/api/test_statement_sequence.py``). ``manage.py batch_notify``
LISTENs on the channel (``repository/outbox_listen.py``). Nothing on SQLite;
no table changes, so the schema version stays as it is.
"""

from django.db import migrations

CHANNEL = "oxide_batch_outbox"  # repository/outbox_listen.py CHANNEL (a test checks they agree)
TABLE = "ob_notification_event"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION ob_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Delivered at COMMIT only; no payload: the notifier reads the outbox itself.
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END
$$;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)
    schema_editor.execute(
        f"CREATE TRIGGER {TABLE}_notify AFTER INSERT ON {TABLE} "
        "FOR EACH STATEMENT EXECUTE FUNCTION ob_outbox_notify()"
    )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_notify ON {TABLE}")
    schema_editor.execute("DROP FUNCTION IF EXISTS ob_outbox_notify()")


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0028_worker_identity")]
    operations = [migrations.RunPython(forward, backward)]
