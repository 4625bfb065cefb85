"""Schema version 4 (contract §2.5.6, §2.5.11), which the code needs:

- retention records carry an outcome: a purge apply or a hold refused by a rule
  is recorded REJECTED with the problem's code and fields, as operator requests
  are (existing rows are APPLIED);
- a recovery decision records the unfinished steps it resolved to FAILED
  (existing decisions resolved none: ``[]``), and the execution and steps it
  resolved reference it (``recovery_decision_id``): the runtime is fenced from
  them.

On SQLite the new column and CHECK constraint rebuild the tables; their
AUTOINCREMENT high-water marks are kept (see ``_high_water``).
"""

from django.db import migrations, models

from oxide_batch.migrations._high_water import keep_high_water

VERSION = 4
remember_records, restore_records = keep_high_water("ob_retention_record")
remember_decisions, restore_decisions = keep_high_water("ob_recovery_decision")


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
    dependencies = [("oxide_batch", "0011_flow_decision_checks")]

    # Reversed, the last operation remembers and the first restores.
    operations = [
        migrations.RunPython(remember_records, restore_records, elidable=True),
        migrations.RunPython(remember_decisions, restore_decisions, elidable=True),
        migrations.AddField(
            model_name="recoverydecision",
            name="resolved_step_ids",
            field=models.JSONField(blank=True, default=list),
        ),
        # Nullable without a default: ALTER TABLE … ADD COLUMN, no table rebuild.
        migrations.AddField(
            model_name="jobexecution",
            name="recovery_decision_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="stepexecution",
            name="recovery_decision_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="retentionrecord",
            name="outcome",
            field=models.CharField(
                choices=[("APPLIED", "APPLIED"), ("REJECTED", "REJECTED")],
                default="APPLIED",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="retentionrecord",
            name="rejection_code",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="retentionrecord",
            name="rejection_details",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="retentionrecord",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("outcome", "APPLIED"), ("rejection_code__isnull", True)),
                    models.Q(("outcome", "REJECTED"), ("rejection_code__isnull", False)),
                    _connector="OR",
                ),
                name="ob_retention_rejection_code",
            ),
        ),
        migrations.RunPython(restore_decisions, remember_decisions, elidable=True),
        migrations.RunPython(restore_records, remember_records, elidable=True),
        migrations.RunPython(record, unrecord),
    ]
