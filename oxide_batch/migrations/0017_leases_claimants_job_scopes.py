"""Schema version 5 (contract §2.5.2, §2.5.5, §4.1), which the code needs:

- a job execution records the user whose token claimed it (``owner_user_id``):
  only that user's runtime writes are accepted on it afterwards;
- a recovery decision records why it was allowed (``eligibility``: an unknown
  status, inactivity, an expired lease, an operator's override) and the
  override's note;
- an API token may be limited to job names (``job_patterns``: shell-style globs;
  NULL for every job).

Every column is nullable without a default: ``ALTER TABLE … ADD COLUMN`` on both
databases, no table rebuild. Existing rows read as before: no owner user (the
claim predates the rule), no recorded eligibility, every job.
"""

from django.db import migrations, models

VERSION = 5


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
    dependencies = [("oxide_batch", "0016_hash_drf_tokens")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="owner_user_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="recoverydecision",
            name="eligibility",
            field=models.CharField(blank=True, max_length=24, null=True),
        ),
        migrations.AddField(
            model_name="recoverydecision",
            name="override_note",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="job_patterns",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(record, unrecord),
    ]
