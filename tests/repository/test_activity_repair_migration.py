"""Migration 0020: an abandon applied before schema 6 stamped the execution's
activity with its own time; the migration gives it back the runtime's best
known activity, and leaves every other execution as it is."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from oxide_batch import models
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service
from tests.helpers import recover_as_proposed

pytestmark = pytest.mark.django_db
migration = importlib.import_module("oxide_batch.migrations.0020_abandon_stamped_activity")
AFTER = ("oxide_batch", "0020_abandon_stamped_activity")
START = datetime(2026, 3, 1, 8, tzinfo=UTC)
S = BatchStatus


def repair() -> None:
    apps = MigrationExecutor(connection).loader.project_state(AFTER).apps
    migration.repair(apps, SimpleNamespace(connection=connection))


def abandon(pk: int, operation: str) -> models.OperatorRequest:
    execution = models.JobExecution.objects.get(pk=pk)
    operator_service(DjangoJobRepository()).abandon(
        pk,
        expected_version=execution.version,
        reason_code="RERUN_NOT_NEEDED",
        actor=Actor("user:otto", None),
        operation_id=operation,
    )
    return models.OperatorRequest.objects.get(operation_id=operation)


def stamp(pk: int, request: models.OperatorRequest) -> None:
    """What an abandon did before schema 6: its own time as the activity."""
    models.JobExecution.objects.filter(pk=pk).update(last_activity_at=request.requested_at)


def activity(pk: int) -> datetime | None:
    return models.JobExecution.objects.get(pk=pk).last_activity_at


def test_a_stamped_abandon_gets_the_runtimes_activity_back() -> None:
    work = Workload(START)
    stopped = work.move(work.launch("repair_stopped"), BatchStatus.STARTED)
    work.run_steps(stopped, ["load"])
    stopped = work.move(work.move(stopped, S.STOPPING), S.STOPPED)
    stopped_at = models.JobExecution.objects.get(pk=stopped.id).ended_at
    failed = work.move(work.launch("repair_failed"), BatchStatus.STARTED)
    failed = work.move(failed, BatchStatus.FAILED, category=FailureCategory.USER_COMPONENT)
    failed_at = models.JobExecution.objects.get(pk=failed.id).ended_at
    untouched = work.move(work.launch("repair_untouched"), BatchStatus.STARTED)
    before_untouched = activity(untouched.id)
    honest = work.move(work.move(work.launch("repair_honest"), S.STARTED), S.STOPPING)
    honest = work.move(honest, S.STOPPED)
    honest_activity = activity(honest.id)

    stamp(stopped.id, abandon(stopped.id, "abandon-stopped"))
    stamp(failed.id, abandon(failed.id, "abandon-failed"))
    abandon(honest.id, "abandon-honest")  # after schema 6: not stamped
    assert activity(stopped.id) != stopped_at

    repair()
    assert activity(stopped.id) == stopped_at  # its runtime's last transition
    assert activity(failed.id) == failed_at
    assert activity(untouched.id) == before_untouched  # not abandoned
    assert activity(honest.id) == honest_activity  # older than its abandon: kept
    assert stopped_at is not None
    assert stopped_at < datetime.now(UTC) - timedelta(days=1)


def test_after_a_recovery_the_steps_newest_write_stands_in() -> None:
    """A decision ended it: its end is the decision's, not the runtime's."""
    work = Workload(START)
    running = work.move(work.launch("repair_recovered"), S.STARTED)
    work.run_steps(running, ["load"], last=S.STARTED)
    newest_step = (
        models.StepExecution.objects.filter(job_execution_id=running.id)
        .order_by("-last_activity_at")
        .values_list("last_activity_at", flat=True)
        .first()
    )
    recover_as_proposed(
        operator_service(DjangoJobRepository()),
        running.id,
        actor=Actor("user:otto", None),
        operation_id="recover-repair",
    )
    stamp(running.id, abandon(running.id, "abandon-recovered"))
    repair()
    assert activity(running.id) == newest_step
