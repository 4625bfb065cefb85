"""Schema version 7 (issue 26): a lost write is named.

A write whose expected version is ahead of the stored one (the runtime saw a
write the repository no longer has: an acknowledged commit lost in a failover)
is refused with ``version_ahead`` and marks its execution (``lost_write``: when
and the versions), which counts as the unknown-commit marker. Nullable column:
no table rebuild, nothing to backfill.
"""

from django.db import migrations, models

VERSION = 7


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
    dependencies = [("oxide_batch", "0018_history_keeps_its_facts")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="lost_write",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(record, unrecord),
    ]
