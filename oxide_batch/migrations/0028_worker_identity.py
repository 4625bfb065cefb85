"""Schema version 11 (issue 40 point 3): who runs an execution or a step —
the worker's host, process id, name and client (``worker_*``) on the
execution and step rows, written with the claim (decision 310), and two
partial indexes for the console's search by host and by worker name
(decision 311). Columns and indexes only: every existing row reads as "not
recorded" (NULL), nothing to backfill. Code of this version refuses a
database without them (``MigrationRequired``).
"""

from django.db import migrations, models

VERSION = 11


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


def worker_columns(model_name):
    return [
        migrations.AddField(
            model_name=model_name,
            name="worker_host",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name=model_name,
            name="worker_pid",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name=model_name,
            name="worker_name",
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name=model_name,
            name="worker_client",
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
    ]


class Migration(migrations.Migration):

    dependencies = [
        ("oxide_batch", "0027_failure_detail"),
    ]

    operations = [
        *worker_columns("jobexecution"),
        *worker_columns("stepexecution"),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=models.Q(("worker_host__isnull", False)),
                fields=["worker_host", "-created_at"],
                name="ob_execution_worker_host",
            ),
        ),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=models.Q(("worker_name__isnull", False)),
                fields=["worker_name", "-created_at"],
                name="ob_execution_worker_name",
            ),
        ),
        migrations.RunPython(record, unrecord),
    ]
