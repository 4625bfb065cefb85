"""Schema version 6 (issue 25): the history keeps its facts.

- a job execution records when it failed (``failed_at``): an abandon that
  follows keeps it, so "failed in the last 24 h" and the dashboard's failures
  select by when the failure happened; indexed where set;
- a step records the runtime's latest write to it (``last_activity_at``): a
  recovery moves its version and ``updated_at``, never its activity;
- a recovery decision records the evidence it was taken on, with its times.

Backfills: ``failed_at`` from the end time of FAILED executions and of those an
operator abandoned while FAILED (their first end time is kept); a step's
activity from its ``updated_at`` — except a step a recovery resolved, whose
``updated_at`` is the decision's: its last runtime write before it is not
known, so its start (or creation) stands in. Nullable columns: no table
rebuild.
"""

from django.db import migrations, models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

VERSION = 6


def backfill(apps, schema_editor):
    alias = schema_editor.connection.alias
    JobExecution = apps.get_model("oxide_batch", "JobExecution")
    StepExecution = apps.get_model("oxide_batch", "StepExecution")
    OperatorRequest = apps.get_model("oxide_batch", "OperatorRequest")
    executions = JobExecution.objects.using(alias)
    executions.filter(status="FAILED").update(failed_at=F("ended_at"))
    abandoned_failed = OperatorRequest.objects.using(alias).filter(
        action="ABANDON", outcome="APPLIED", prior_status="FAILED"
    )
    executions.filter(
        status="ABANDONED", pk__in=abandoned_failed.values("job_execution_id")
    ).update(failed_at=F("ended_at"))
    steps = StepExecution.objects.using(alias)
    steps.filter(recovery_decision_id__isnull=True).update(last_activity_at=F("updated_at"))
    steps.filter(recovery_decision_id__isnull=False).update(
        last_activity_at=Coalesce("started_at", "created_at")
    )
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(alias).update_or_create(id=1, defaults={"version": VERSION})


def unrecord(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).update(
        version=VERSION - 1
    )


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0017_leases_claimants_job_scopes")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="failed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="stepexecution",
            name="last_activity_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="recoverydecision",
            name="evidence",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=Q(failed_at__isnull=False),
                fields=["failed_at"],
                name="ob_execution_failed",
            ),
        ),
        migrations.RunPython(backfill, unrecord),
    ]
