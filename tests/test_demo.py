"""The demo workload leaves every situation an operator should see."""

from __future__ import annotations

import io
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

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


@pytest.mark.parametrize(
    ("at", "days", "month", "period"),
    [
        # A year's first day: the nightly runs' days and the months are last year's.
        ("2027-01-01T00:30:00Z", ["2026-12-29", "2026-12-30", "2026-12-31"], "2026-11", "2026-12"),
        # Leap day, just before midnight.
        (
            "2028-02-29T23:59:00+00:00",
            ["2028-02-26", "2028-02-27", "2028-02-28"],
            "2027-12",
            "2028-01",
        ),
    ],
)
def test_demo_workload_at_an_instant_is_dated_from_it(at, days, month, period):
    """``--at`` records the workload as if it were that instant: every date and
    month the demo names comes from it, none from the machine's calendar."""
    call_command("demo_workload", "--at", at, stdout=io.StringIO())
    start = datetime.fromisoformat(at.replace("Z", "+00:00"))
    nightly = models.JobInstance.objects.filter(job_name="nightly_import").order_by("pk")
    dates = [instance.identifying_parameters[0]["value"] for instance in nightly]
    assert dates == [*days, start.date().isoformat()]
    report = models.JobInstance.objects.get(job_name="report_build")
    ledger = models.JobInstance.objects.get(job_name="ledger_post")
    assert report.identifying_parameters[0]["value"] == month
    assert ledger.identifying_parameters[0]["value"] == period
    latest = models.JobExecution.objects.order_by("-created_at").first()
    assert start - timedelta(hours=6) <= latest.created_at <= start


@pytest.mark.parametrize("at", ["yesterday", "2027-01-01T00:00:00"])
def test_demo_workload_refuses_an_unclear_instant(at):
    with pytest.raises(CommandError, match="--at"):
        call_command("demo_workload", "--at", at, stdout=io.StringIO())
    assert not models.JobExecution.objects.exists()
