"""Runtime writes that do not change an execution's status are HOT updates.

``ob_execution_unresolved`` was keyed by ``last_activity_at``, which every
runtime write and owner observation moves: each of them had to add an entry to
that index (and to every other index of the table) instead of a heap-only
tuple update. Keyed by ``id`` under the same predicate it still hands the
queries that use it (the unresolved lists, the gauge, the watchdog's keyset)
the small set of unresolved rows, and a write that leaves the status alone
changes no indexed column.

On PostgreSQL the two hot tables also leave room on each page
(``fillfactor``), so the new version of a row finds space next to the old
one. Schema semantics are unchanged: the recorded schema version stays 7.
"""

from django.db import migrations, models

UNRESOLVED = ["STARTED", "STARTING", "STOPPING", "UNKNOWN"]
FILLFACTOR = {"ob_job_execution": 90, "ob_step_execution": 90}


def set_fillfactor(schema_editor, statement):
    if schema_editor.connection.vendor != "postgresql":
        return
    # ALTER TABLE refuses a table with deferred trigger events pending (rows
    # written earlier in this transaction): check them now, as COMMIT would.
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    for table, percent in FILLFACTOR.items():
        schema_editor.execute(statement.format(table=table, percent=int(percent)))


def leave_room(apps, schema_editor):
    set_fillfactor(schema_editor, "ALTER TABLE {table} SET (fillfactor = {percent})")


def fill_pages(apps, schema_editor):
    set_fillfactor(schema_editor, "ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0020_abandon_stamped_activity")]

    operations = [
        migrations.RemoveIndex(model_name="jobexecution", name="ob_execution_unresolved"),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=models.Q(("status__in", UNRESOLVED)),
                fields=["id"],
                name="ob_execution_unresolved",
            ),
        ),
        migrations.RunPython(leave_room, fill_pages),
    ]
