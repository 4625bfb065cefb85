"""Data only (issue 25's review): activity an abandon stamped before schema 6.

Before schema 6 an operator's abandon set the execution's ``last_activity_at``
to the abandon's time, which the console and the evidence read as the
runtime's activity. Migration 0018 stopped it but left the rows it had
stamped. An abandoned execution whose activity is not older than its applied
abandon was stamped (nothing of a runtime's is written after an abandon): its
activity becomes the runtime's own where it is known — an abandon takes a
FAILED or STOPPED attempt, whose end (``ended_at``, kept by the abandon) is its
runtime's last transition — or the best known bound when a recovery decision
ended it: its steps' newest write, else its start, else its creation. No
schema change (the recorded schema version stays 7).
"""

from django.db import migrations
from django.db.models import F, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce

BATCH = 1000


def repair(apps, schema_editor):
    alias = schema_editor.connection.alias
    JobExecution = apps.get_model("oxide_batch", "JobExecution")
    StepExecution = apps.get_model("oxide_batch", "StepExecution")
    OperatorRequest = apps.get_model("oxide_batch", "OperatorRequest")
    abandons = OperatorRequest.objects.using(alias).filter(
        action="ABANDON", outcome="APPLIED", job_execution_id=OuterRef("pk")
    )
    abandoned_at = Subquery(abandons.order_by("requested_at").values("requested_at")[:1])
    newest_step_write = Subquery(
        StepExecution.objects.using(alias)
        .filter(job_execution_id=OuterRef("pk"))
        .values("job_execution_id")
        .annotate(newest=Max("last_activity_at"))
        .values("newest")[:1]
    )
    stamped = list(
        JobExecution.objects.using(alias)
        .filter(status="ABANDONED")
        .annotate(abandoned_at=abandoned_at)
        .filter(abandoned_at__isnull=False, last_activity_at__gte=F("abandoned_at"))
        .values_list("pk", flat=True)
    )
    for start in range(0, len(stamped), BATCH):
        rows = JobExecution.objects.using(alias).filter(pk__in=stamped[start : start + BATCH])
        rows.filter(recovery_decision_id__isnull=True).update(last_activity_at=F("ended_at"))
        rows.filter(recovery_decision_id__isnull=False).update(
            last_activity_at=Coalesce(newest_step_write, "started_at", "created_at")
        )


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0019_lost_write_marker")]

    operations = [migrations.RunPython(repair, migrations.RunPython.noop)]
