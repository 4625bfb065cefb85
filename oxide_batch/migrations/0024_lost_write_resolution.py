"""A lost write waits for a person (issue 38 point 5, contract §2.5.14).

``lost_write_resolution`` records the operator's decision on an execution's
lost-write marker (when, who, why, the note, the operation id); until it is set
a launch or restart of the instance is refused (``lost_write_unresolved``). The
partial index holds the few marked, unresolved executions by instance: the
launch's gate and the gauge read it; no runtime write moves its columns, so the
hot updates stay HOT. The audit's ``action`` gains ``RESOLVE_LOST_WRITE`` (and
room for it). Nullable columns, nothing to backfill.

``lease_ttl`` (issue 38 point 6) records the lease TTL an owner's claim was
granted, written by the claim's own write: every process computes the lease
from it, whatever its own ``OXIDE_BATCH_LEASE_TTL`` says (null for claims made
before: the reader's setting applies to them).

Schema version 8: this is the last migration of that version (0022's
notification tables, 0023's ``stopping_at`` and these columns): code of version
8 refuses a database without them (``MigrationRequired``) instead of failing on
its first write.
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

ACTIONS = ["LAUNCH", "RESTART", "STOP", "ABANDON", "RECOVER", "RESOLVE_LOST_WRITE"]


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0023_execution_stopping_at")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="lost_write_resolution",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="jobexecution",
            name="lease_ttl",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="operatorrequest",
            name="action",
            field=models.CharField(choices=[(a, a) for a in ACTIONS], max_length=32),
        ),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=models.Q(
                    ("lost_write__isnull", False), ("lost_write_resolution__isnull", True)
                ),
                fields=["job_instance"],
                name="ob_execution_lost_write",
            ),
        ),
        migrations.RunPython(record, unrecord),
    ]
