"""The two events raised outside an execution's terminal transition (issue 41
point 1): ``execution.lost_write`` with the marker it tells of (one
transaction: no marker without its event, nor the reverse) and
``purge.failed`` for a purge batch that failed (in its own transaction after
the batch rolled back, so it survives the failure); a refused batch (a plan
found stale) raises none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError
from django.db.models import F

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.errors import RetentionPlanStale, VersionAhead
from oxide_batch.domain.notifications import one_line, payload
from oxide_batch.repository import outbox
from oxide_batch.repository.retention import RetentionOperations
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import retention_service
from tests.helpers import launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
ALICE = Actor("alice")


def events(kind: str) -> list[models.NotificationEvent]:
    return list(models.NotificationEvent.objects.filter(kind=kind).order_by("id"))


def running_step(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, written=5))
        uow.commit()
    return execution, step


def lose_a_write(repo, clock):
    """A chunk refused as ``version_ahead`` (the stored step one version back)."""
    execution, step = running_step(repo, clock)
    models.StepExecution.objects.filter(pk=step.id).update(version=F("version") - 1)
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, written=5))
    return execution


def test_a_lost_write_marker_writes_one_lost_write_event(repo, clock) -> None:
    execution = lose_a_write(repo, clock)
    marker = models.JobExecution.objects.get(pk=execution.id).lost_write
    assert marker is not None
    (event,) = events("execution.lost_write")
    assert (event.job_execution_id, event.job_instance_id, event.job_name) == (
        execution.id,
        execution.job_instance_id,
        "import_job",
    )
    assert event.status == "STARTED"
    assert event.data["expected_version"] == marker["expected_version"]
    assert event.data["stored_version"] == marker["stored_version"]
    document = payload(
        kind=event.kind,
        occurred_at=event.occurred_at,
        job_name=event.job_name,
        job_instance_id=event.job_instance_id,
        job_execution_id=event.job_execution_id,
        status=event.status,
        url="https://batch.example/x",
        data=event.data,
    )
    assert one_line(document) == f"import_job: execution {execution.id} lost write"


def test_a_second_loss_before_a_resolution_keeps_its_marker_and_writes_no_second_event(
    repo, clock
) -> None:
    execution = lose_a_write(repo, clock)
    step = models.StepExecution.objects.get(job_execution_id=execution.id)
    models.StepExecution.objects.filter(pk=step.pk).update(version=F("version") - 1)
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.commit_chunk(step.pk, step.version, ExecutionCounts(read=1, written=1))
    assert len(events("execution.lost_write")) == 1


def test_a_marker_whose_event_fails_is_not_left_without_it(repo, clock, monkeypatch) -> None:
    """One transaction: the event's INSERT failing takes the marker back with it."""

    def refuse(*args, **kwargs):
        raise DatabaseError("injected: the event's insert failed")

    monkeypatch.setattr(outbox, "write_lost_write_event", refuse)
    execution = lose_a_write(repo, clock)
    assert models.JobExecution.objects.get(pk=execution.id).lost_write is None
    assert events("execution.lost_write") == []


def purgeable(repo, clock, settings):
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(0)
    execution = move(repo, move(repo, launch(repo), S.STARTED, clock=clock), S.COMPLETED)
    clock.advance(timedelta(minutes=1))
    retention = retention_service(repo)
    return execution, retention, retention.survey(cutoff=clock.now(), job_name="import_job")


def test_a_failed_purge_batch_writes_purge_failed_after_its_rollback(
    repo, clock, settings, monkeypatch
) -> None:
    execution, retention, plan = purgeable(repo, clock, settings)
    original = RetentionOperations.apply_purge

    def fail_after_deleting(self, plan, *, min_age):
        original(self, plan, min_age=min_age)
        raise DatabaseError("injected after the deletes, before the commit: the disk is full")

    monkeypatch.setattr(RetentionOperations, "apply_purge", fail_after_deleting)
    with pytest.raises(DatabaseError):
        retention.apply(plan, actor=ALICE, operation_id="purge-1")
    # Nothing of the batch was deleted, and its event survived the rollback.
    assert models.JobExecution.objects.filter(pk=execution.id).exists()
    (event,) = events("purge.failed")
    assert (event.job_name, event.job_execution_id, event.job_instance_id) == (
        "import_job",
        None,
        None,
    )
    assert event.data == {"outcome": "database_error", "candidates": 1, "by": "purge"}
    assert event.dispatched_at is None
    assert "purge failed (database_error)" in one_line(
        {"type": event.kind, "data": {"job_name": event.job_name, **event.data}}
    )


def test_a_purge_refused_as_stale_raises_no_purge_failed(repo, clock, settings) -> None:
    execution, retention, plan = purgeable(repo, clock, settings)
    retention.place_hold(
        execution.job_instance_id, actor=ALICE, reason_code="LEGAL", operation_id="hold-1"
    )
    with pytest.raises(RetentionPlanStale):
        retention.apply(plan, actor=ALICE, operation_id="purge-2")
    assert events("purge.failed") == []
