"""The demo workload leaves every situation an operator should see."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from oxide_batch import models

pytestmark = pytest.mark.django_db


def test_demo_workload_records_every_kind_of_outcome():
    call_command("demo_workload", stdout=io.StringIO())
    statuses = set(models.JobExecution.objects.values_list("status", flat=True))
    assert statuses == {"COMPLETED", "FAILED", "STOPPED", "STARTED", "UNKNOWN", "ABANDONED"}
    restart = models.JobExecution.objects.get(job_name="billing_export", attempt=2)
    assert restart.restart_of_id is not None
    assert restart.status == "COMPLETED"
    assert models.RecoveryDecision.objects.filter(resulting_status="ABANDONED").count() == 1
    assert models.StepExecution.objects.filter(status="STARTED").exists()
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    assert unknown.failure_category == "UNKNOWN_COMMIT"
    without_checkpoint = set(
        models.StepExecution.objects.filter(checkpoint__isnull=True).values_list("pk", flat=True)
    )
    partitioned_parents = set(
        models.StepPartition.objects.values_list("step_execution_id", flat=True)
    )
    assert without_checkpoint == partitioned_parents
    assert models.StepExecution.objects.filter(read_count__gt=0).count() > 10


def test_demo_workload_restarts_a_partitioned_flow_job():
    call_command("demo_workload", stdout=io.StringIO())
    attempts = models.JobExecution.objects.filter(job_name="warehouse_load").order_by("attempt")
    assert [a.status for a in attempts] == ["FAILED", "COMPLETED"]
    plans = [
        list(models.StepPartition.objects.filter(step_execution__job_execution=a)) for a in attempts
    ]
    assert sorted(p.status for p in plans[0]) == ["COMPLETED"] * 5 + ["FAILED"]
    assert {p.status for p in plans[1]} == {"COMPLETED"}
    rerun = {p.partition_key for p in plans[1]} - {
        p.partition_key
        for p in plans[1]
        if p.worker_step_execution_id in {q.worker_step_execution_id for q in plans[0]}
    }
    assert rerun == {"sa-east"}  # only the failed partition ran again
    kinds = list(
        models.FlowDecision.objects.filter(job_execution=attempts[1])
        .order_by("sequence")
        .values_list("kind", flat=True)
    )
    assert kinds == ["COMPLETED_STEP_REUSE", "DECIDER", "STEP_EXIT"]


def test_demo_workload_if_empty_does_not_duplicate():
    call_command("demo_workload", stdout=io.StringIO())
    before = models.JobExecution.objects.count()
    out = io.StringIO()
    call_command("demo_workload", "--if-empty", stdout=out)
    assert models.JobExecution.objects.count() == before
    assert "skipped" in out.getvalue()
