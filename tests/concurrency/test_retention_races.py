"""Purge apply racing a hold and a restart on PostgreSQL, with real threads and
separate connections. The contender opens its transaction first and holds it;
apply then blocks on its ``FOR NO KEY UPDATE`` lock of the instance (or of an
execution) and, once the contender commits, re-checks eligibility: stale, and
nothing is deleted."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import JobInstanceNotFound, RetentionPlanStale
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import retention_service
from tests.concurrency.support import admin_connection, run_in_threads, waiting_on_locks
from tests.repository.test_retention import DAY, build_instance, rows_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
ALICE = Actor("alice")
HOLD_OPEN_SECONDS = 0.5


@pytest.fixture
def service(repo):
    return retention_service(repo, min_age=timedelta(0))


def race(service, plan, contend):
    """Run ``contend(uow)`` in a transaction held open while apply starts."""
    opened = threading.Event()
    waited: list[float] = []

    def contender(_: int):
        with service.repository.begin() as uow:
            result = contend(uow)
            opened.set()
            time.sleep(HOLD_OPEN_SECONDS)  # apply is now waiting for our lock
            uow.commit()
        return result

    def purger(_: int):
        assert opened.wait(10)
        started = time.monotonic()
        try:
            return service.apply(plan, actor=ALICE, operation_id="race")
        finally:
            waited.append(time.monotonic() - started)

    outcomes = run_in_threads(2, lambda i: (contender, purger)[i](i))
    return outcomes, waited[0]


def test_a_hold_placed_after_the_survey_wins_and_the_plan_is_stale(service, repo, clock):
    instance_id = build_instance(repo, clock, "held-late", rich=True)
    other = build_instance(repo, clock, "other")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    assert set(plan.instance_ids) == {instance_id, other}
    before = rows_of(instance_id)

    (hold, purge), waited = race(
        service, plan, lambda uow: uow.place_instance_hold(instance_id, ALICE, "LEGAL_HOLD")
    )

    assert hold.ok, hold.error
    assert isinstance(purge.error, RetentionPlanStale)
    assert waited >= HOLD_OPEN_SECONDS * 0.8  # apply really waited for the lock
    assert rows_of(instance_id) == before
    assert rows_of(other)["job_instances"] == 1
    (refusal,) = models.RetentionRecord.objects.filter(action="APPLY_PURGE")
    assert (refusal.outcome, refusal.rejection_code) == ("REJECTED", "retention_plan_stale")


def test_a_restart_of_a_candidate_makes_the_plan_stale_and_nothing_is_deleted(service, repo, clock):
    instance_id = build_instance(repo, clock, "restarted", (S.FAILED,), rich=True)
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    assert plan.instance_ids == [instance_id]

    (restart, purge), _ = race(service, plan, lambda uow: uow.create_job_execution(instance_id))

    assert restart.ok, restart.error
    assert isinstance(purge.error, RetentionPlanStale)
    assert rows_of(instance_id)["job_executions"] == 2
    assert rows_of(instance_id)["flow_decisions"] == 1


def test_a_purge_that_locked_first_wins_and_a_late_hold_finds_nothing(service, repo, clock):
    instance_id = build_instance(repo, clock, "purged-first")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    locked = threading.Event()

    def purger(_: int):
        with repo.begin() as uow:
            counts = uow.apply_purge(plan, min_age=timedelta(0))
            locked.set()
            time.sleep(HOLD_OPEN_SECONDS)
            uow.commit()
        return counts

    def holder(_: int):
        assert locked.wait(10)
        return service.place_hold(
            instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="late"
        )

    purge, hold = run_in_threads(2, lambda i: (purger, holder)[i](i))
    assert purge.ok, purge.error
    assert purge.value.job_instances == 1
    assert isinstance(hold.error, JobInstanceNotFound)
    assert models.RetentionRecord.objects.filter(action="HOLD").count() == 0


def test_concurrent_applies_of_one_plan_delete_once(service, repo, clock):
    ids = [build_instance(repo, clock, f"r{i}", (S.COMPLETED,)) for i in range(3)]
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    barrier = threading.Barrier(4)

    def apply(index: int):
        barrier.wait()
        return service.apply(plan, actor=ALICE, operation_id=f"concurrent-{index}")

    outcomes = run_in_threads(4, apply)
    winners = [o for o in outcomes if o.ok]
    assert len(winners) == 1, [o.error for o in outcomes]
    assert all(isinstance(o.error, RetentionPlanStale) for o in outcomes if not o.ok)
    assert winners[0].value.counts.job_instances == 3
    assert all(rows_of(i)["job_instances"] == 0 for i in ids)


def _latest_execution(instance_id: int) -> models.JobExecution:
    return models.JobExecution.objects.filter(job_instance_id=instance_id).latest("attempt")


def test_an_abandon_committed_while_apply_waits_makes_the_plan_stale(service, repo, clock):
    """Hole: apply locked the instances only and read the executions unlocked, so
    FAILED → ABANDONED committing during the apply was deleted unseen."""
    instance_id = build_instance(repo, clock, "abandoned-late", (S.FAILED,), rich=True)
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY, statuses=["FAILED"])
    assert plan.instance_ids == [instance_id]
    execution = _latest_execution(instance_id)
    before = rows_of(instance_id)

    def abandon(uow):
        return uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.ABANDONED)
        )

    (abandoned, purge), waited = race(service, plan, abandon)

    assert abandoned.ok, abandoned.error
    assert isinstance(purge.error, RetentionPlanStale)
    assert waited >= HOLD_OPEN_SECONDS * 0.8  # apply waited for the execution's lock
    assert rows_of(instance_id) == before
    assert _latest_execution(instance_id).status == S.ABANDONED.value
    assert not models.RetentionRecord.objects.filter(outcome="APPLIED").exists()


def test_an_exit_enrichment_committed_while_apply_waits_makes_the_plan_stale(service, repo, clock):
    """A change that keeps the status eligible (a new version only) is seen too."""
    instance_id = build_instance(repo, clock, "enriched-late", (S.FAILED, S.COMPLETED))
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    execution = _latest_execution(instance_id)
    before = rows_of(instance_id)

    (enriched, purge), _ = race(
        service,
        plan,
        lambda uow: uow.enrich_job_exit_status(execution.id, execution.version, "NOOP"),
    )

    assert enriched.ok, enriched.error
    assert isinstance(purge.error, RetentionPlanStale)
    assert rows_of(instance_id) == before


def test_a_step_insert_under_a_restart_never_deadlocks_with_the_apply(service, repo, clock):
    """The runtime holds its restarted execution (creating a step) while the apply
    locks the instance and waits for that execution; the step insert then needs
    ``FOR KEY SHARE`` on the instance. With the instance locked ``FOR UPDATE``
    the two waited for each other (40P01); ``FOR NO KEY UPDATE`` lets the insert
    through, the runtime commits, and the apply sees the restart: stale."""
    from tests.faults.test_deadlock import deadlocks

    instance_id = build_instance(repo, clock, "restarted-running", (S.FAILED,))
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    assert plan.instance_ids == [instance_id]
    with repo.begin() as uow:
        restart = uow.create_job_execution(instance_id)
        uow.commit()
    holding = threading.Event()
    watcher = admin_connection()
    before = deadlocks(watcher)

    def runtime(_: int):
        with repo.begin() as uow:
            models.JobExecution.objects.select_for_update(no_key=True).get(pk=restart.id)
            holding.set()
            assert waiting_on_locks(1), "the apply did not wait for the execution"
            step = uow.create_step_execution(restart.id, "late")
            uow.commit()
        return step

    def purger(_: int):
        assert holding.wait(10)
        return service.apply(plan, actor=ALICE, operation_id="during-restart")

    step, purge = run_in_threads(2, lambda i: (runtime, purger)[i](i))
    assert step.ok, step.error
    assert isinstance(purge.error, RetentionPlanStale), purge.error
    assert deadlocks(watcher) == before
    watcher.close()
    assert rows_of(instance_id)["job_executions"] == 2
