"""Schema version 12 (issue 43): remote partition claiming with worker leases.

A claimed worker step holds its own owner token, the lease TTL its claim was
granted and the partition it was claimed for (``owner_token``, ``lease_ttl``,
``claimed_partition_id`` on the step row, decision 461); a partition counts its
retries (decision 464); the watchdog's recovery of a worker is an append-only
audit row of its own (``ob_worker_recovery``, decision 465), append-only below
the ORM on PostgreSQL like the other audit tables. Columns, indexes and a
table: every existing step reads as "not a claimed worker" (NULL), every
partition as retried 0 times. Code of this version refuses a database without
them (``MigrationRequired``).
"""

from django.db import migrations, models

VERSION = 12
TABLE = "ob_worker_recovery"


def forward(apps, schema_editor):
    alias = schema_editor.connection.alias
    if schema_editor.connection.vendor == "postgresql":
        # ob_audit_append_only() is migration 0008's.
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION ob_audit_append_only()"
        )
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(alias).update_or_create(id=1, defaults={"version": VERSION})


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE}")
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).update(
        version=VERSION - 1
    )


class Migration(migrations.Migration):

    dependencies = [
        ("oxide_batch", "0029_outbox_notify"),
    ]

    operations = [
        migrations.AddField(
            model_name="stepexecution",
            name="owner_token",
            field=models.BinaryField(blank=True, max_length=16, null=True),
        ),
        migrations.AddField(
            model_name="stepexecution",
            name="lease_ttl",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="stepexecution",
            name="claimed_partition_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="steppartition",
            name="retries",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="stepexecution",
            index=models.Index(
                condition=models.Q(
                    ("owner_token__isnull", False), ("status__in", ["STARTING", "STARTED"])
                ),
                fields=["id"],
                name="ob_step_worker_live",
            ),
        ),
        migrations.AddIndex(
            model_name="stepexecution",
            index=models.Index(
                condition=models.Q(("claimed_partition_id__isnull", False)),
                fields=["claimed_partition_id", "id"],
                name="ob_step_claimed_partition",
            ),
        ),
        migrations.CreateModel(
            name="WorkerRecovery",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_instance_id", models.BigIntegerField()),
                ("job_execution_id", models.BigIntegerField()),
                (
                    "step_execution_id",
                    models.BigIntegerField(help_text="the partitioned parent step"),
                ),
                ("worker_step_execution_id", models.BigIntegerField()),
                ("worker_step_version", models.BigIntegerField()),
                ("partition_id", models.BigIntegerField()),
                ("partition_key", models.CharField(max_length=128)),
                ("retries", models.PositiveIntegerField()),
                (
                    "prior_status",
                    models.CharField(
                        choices=[
                            ("STARTING", "STARTING"),
                            ("STARTED", "STARTED"),
                            ("STOPPING", "STOPPING"),
                            ("STOPPED", "STOPPED"),
                            ("FAILED", "FAILED"),
                            ("COMPLETED", "COMPLETED"),
                            ("ABANDONED", "ABANDONED"),
                            ("UNKNOWN", "UNKNOWN"),
                        ],
                        max_length=9,
                    ),
                ),
                ("reason_code", models.CharField(max_length=64)),
                ("actor", models.CharField(max_length=128)),
                ("evidence", models.JSONField()),
                ("parent_failed", models.BooleanField(default=False)),
                ("decided_at", models.DateTimeField()),
            ],
            options={
                "db_table": "ob_worker_recovery",
                "indexes": [
                    models.Index(
                        fields=["job_execution_id", "-id"], name="ob_worker_recovery_exec"
                    ),
                    models.Index(fields=["partition_id", "-id"], name="ob_worker_recovery_part"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("worker_step_execution_id",), name="ob_worker_recovery_once"
                    )
                ],
            },
        ),
        migrations.RunPython(forward, backward),
    ]
