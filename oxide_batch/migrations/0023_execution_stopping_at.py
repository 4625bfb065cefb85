"""Schema version 8 (issues 39 and 41): a stop's acknowledgement is dated, and
the notification tables exist.

``stopping_at`` records once when a job execution moved to STOPPING (decision
197), so a STOPPED execution's timeline still shows STARTED → STOPPING. The
version also covers 0022's notification tables (the outbox the repository now
writes): code of this version refuses a database without them
(``MigrationRequired``) instead of failing its first terminal transition.
Nullable column: no table rebuild, nothing to backfill.
"""

from django.db import migrations, models

VERSION = 8


def record(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).update_or_create(
        id=1, defaults={"version": VERSION}
    )


def unrecord(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).update(
        version=VERSION - 1
    )


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0022_notifications")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="stopping_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(record, unrecord),
    ]
