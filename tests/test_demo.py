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
    assert not models.StepExecution.objects.filter(checkpoint__isnull=True).exists()
    assert models.StepExecution.objects.filter(read_count__gt=0).count() > 10


def test_demo_workload_if_empty_does_not_duplicate():
    call_command("demo_workload", stdout=io.StringIO())
    before = models.JobExecution.objects.count()
    out = io.StringIO()
    call_command("demo_workload", "--if-empty", stdout=out)
    assert models.JobExecution.objects.count() == before
    assert "skipped" in out.getvalue()
