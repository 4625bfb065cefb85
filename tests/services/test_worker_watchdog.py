"""The watchdog and claimed partition workers (issue 43, decisions 465–467): a
worker whose own lease expired is recovered alone — its worker step FAILED and
fenced, its partition claimable again in the same attempt, an audit row of its
own — while the parent step and the execution stay STARTED; over the retry
limit the parent step fails; recovering the execution fences every worker."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, FailureCategory, LifecycleTransition
from oxide_batch.domain.errors import (
    ExecutionOwned,
    IllegalTransition,
    InvalidState,
    PartitionWorkerStale,
    StaleVersion,
)
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.repository.claims import NothingClaimed, PartitionClaim
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.watchdog import LEASE_EXPIRED, ActionKind, Watchdog
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
TTL = timedelta(seconds=30)
MANAGER = b"\x05" * 16
DEAD = b"\x0d" * 16
NEXT = b"\x0e" * 16
CHECKPOINT = StateEnvelope.from_json(
    {"schema": "offset", "schema_version": 1, "payload": {"at": 7}}, kind=EnvelopeKind.CHECKPOINT
)
WHO = WorkerIdentity(host="worker-9", pid=999, client="oxide-batch test")


@pytest.fixture(autouse=True)
def granted_ttl(settings) -> None:
    settings.OXIDE_BATCH_LEASE_TTL = TTL


@pytest.fixture
def service(repo: DjangoJobRepository) -> OperatorService:
    return bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)


def watchdog(service: OperatorService, **options: object) -> Watchdog:
    return bootstrap.watchdog(service, actor=Actor("watchdog@test-host"), **options)  # type: ignore[arg-type]


def managed(repo: DjangoJobRepository, clock: FixedClock, *keys: str):
    """A claimed STARTED execution (``MANAGER``), a STARTED parent and its plan."""
    execution = launch(repo, key(run="claims"))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, MANAGER)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        parent = uow.create_step_execution(execution.id, "fan", started=True)
        uow.create_step_partition_plan(parent.id, [_entry(k) for k in keys])
        uow.commit()
    return execution, parent


def _entry(key_: str):
    from oxide_batch.domain.partitions import PartitionPlanEntry

    return PartitionPlanEntry(key_, None)


def claim(repo: DjangoJobRepository, parent_id: int, token: bytes) -> PartitionClaim:
    with repo.begin(owner_token=token) as uow:
        claimed = uow.claim_step_partition(parent_id, token, worker=WHO)
        uow.commit()
    return claimed


def chunk(repo: DjangoJobRepository, worker_id: int, token: bytes, version: int):
    with repo.begin(owner_token=token) as uow:
        step = uow.commit_chunk(
            worker_id, version, ExecutionCounts(read=3, written=3, committed=1),
            checkpoint=CHECKPOINT,
        )  # fmt: skip
        uow.commit()
    return step


def manager_alive(repo: DjangoJobRepository, execution_id: int) -> None:
    with repo.begin(owner_token=MANAGER) as uow:
        uow.observe_execution_control(execution_id, MANAGER)
        uow.commit()


def test_an_expired_worker_is_recovered_alone_and_its_partition_resumes(
    repo, clock, service
) -> None:
    execution, parent = managed(repo, clock, "a", "b")
    dead = claim(repo, parent.id, DEAD)
    assert dead.worker_step is not None
    assert dead.partition is not None
    worker = chunk(repo, dead.worker_step.id, DEAD, dead.worker_step.version)
    live = claim(repo, parent.id, NEXT)
    assert live.worker_step is not None
    clock.advance(TTL)
    # The live worker and the manager wrote within their TTL; the dead one did not.
    live_step = chunk(repo, live.worker_step.id, NEXT, live.worker_step.version)
    manager_alive(repo, execution.id)
    clock.advance(timedelta(milliseconds=1))
    report = watchdog(service).run_pass()
    (action,) = report.actions
    assert action.kind is ActionKind.RECOVERED
    assert action.worker_step_execution_id == worker.id
    assert action.job_execution_id == execution.id
    decision = models.WorkerRecovery.objects.get()
    assert action.decision_id == decision.id
    assert (decision.reason_code, decision.actor) == (LEASE_EXPIRED, "watchdog@test-host")
    assert (decision.step_execution_id, decision.partition_id, decision.partition_key) == (
        parent.id,
        dead.partition.id,
        "a",
    )
    assert decision.prior_status == "STARTED"
    assert decision.parent_failed is False
    assert decision.evidence["worker"]["host"] == "worker-9"
    assert decision.evidence["lease_ttl_seconds"] == 30
    row = models.StepExecution.objects.get(pk=worker.id)
    assert (row.status, row.failure_category) == ("FAILED", FailureCategory.STALE_RECOVERED.value)
    assert row.last_activity_at == worker.last_activity_at  # a recovery is no activity
    partition = models.StepPartition.objects.get(pk=dead.partition.id)
    assert (partition.status, partition.written_count) == ("FAILED", 3)
    # The parent, the execution and the live worker stay as they were.
    assert models.StepExecution.objects.get(pk=parent.id).status == "STARTED"
    assert models.StepExecution.objects.get(pk=live_step.id).status == "STARTED"
    assert models.JobExecution.objects.get(pk=execution.id).status == "STARTED"
    assert not models.RecoveryDecision.objects.exists()
    # The dead worker is fenced: its writes are refused, whatever they are.
    with pytest.raises(StaleVersion), repo.begin(owner_token=DEAD) as uow:
        uow.commit_chunk(worker.id, worker.version, ExecutionCounts(read=1))
    with pytest.raises(InvalidState), repo.begin(owner_token=DEAD) as uow:
        uow.commit_chunk(worker.id, worker.version + 1, ExecutionCounts(read=1))
    with pytest.raises(IllegalTransition), repo.begin(owner_token=DEAD) as uow:
        uow.transition_step_execution(
            worker.id, worker.version + 1, LifecycleTransition(S.COMPLETED)
        )
    # The same attempt's next claimant resumes from the dead worker's checkpoint.
    again = claim(repo, parent.id, NEXT)
    assert again.partition is not None
    assert again.worker_step is not None
    assert (again.partition.key, again.partition.retries) == ("a", 1)
    assert again.worker_step.step_name == "fan:1#2"
    assert again.checkpoint == CHECKPOINT
    assert again.worker_step.counts.written == 3
    assert again.worker_step.job_execution_id == execution.id
    with pytest.raises(PartitionWorkerStale), repo.begin(owner_token=DEAD) as uow:
        uow.complete_step_partition(dead.partition.id, again.partition.version, worker.id)
    # A second pass has nothing left to do.
    assert watchdog(service).run_pass().actions == ()


def test_a_second_watchdog_replays_the_decision(repo, clock) -> None:
    execution, parent = managed(repo, clock, "a")
    dead = claim(repo, parent.id, DEAD)
    assert dead.worker_step is not None
    clock.advance(TTL)
    manager_alive(repo, execution.id)
    with repo.begin() as uow:
        first = uow.recover_partition_worker(
            dead.worker_step.id, actor="watchdog@one", reason_code=LEASE_EXPIRED, failure_id=5
        )
        uow.commit()
    with repo.begin() as uow:
        second = uow.recover_partition_worker(
            dead.worker_step.id, actor="watchdog@two", reason_code=LEASE_EXPIRED, failure_id=6
        )
        uow.commit()
    assert (first.outcome.value, second.outcome.value) == ("recovered", "replayed")
    assert second.record == first.record
    assert models.WorkerRecovery.objects.count() == 1


def test_a_live_lease_is_left_alone(repo, clock, service) -> None:
    execution, parent = managed(repo, clock, "a")
    dead = claim(repo, parent.id, DEAD)
    assert dead.worker_step is not None
    clock.advance(TTL - timedelta(milliseconds=1))
    manager_alive(repo, execution.id)
    assert watchdog(service).run_pass().actions == ()
    with repo.begin() as uow:
        result = uow.recover_partition_worker(
            dead.worker_step.id, actor="watchdog@one", reason_code=LEASE_EXPIRED, failure_id=5
        )
    assert (result.outcome.value, result.detail) == ("skipped", "lease_not_expired")


def test_a_dry_run_changes_nothing(repo, clock, service) -> None:
    execution, parent = managed(repo, clock, "a")
    dead = claim(repo, parent.id, DEAD)
    clock.advance(TTL)
    manager_alive(repo, execution.id)
    (action,) = watchdog(service, dry_run=True).run_pass().actions
    assert action.kind is ActionKind.WOULD_RECOVER
    assert dead.worker_step is not None
    assert action.worker_step_execution_id == dead.worker_step.id
    assert models.StepExecution.objects.get(pk=dead.worker_step.id).status == "STARTED"


def test_over_the_retry_limit_the_parent_step_fails(repo, clock, service, settings) -> None:
    settings.OXIDE_BATCH_PARTITION_RETRY_LIMIT = 1
    execution, parent = managed(repo, clock, "a", "b")
    first = claim(repo, parent.id, DEAD)
    clock.advance(TTL)
    manager_alive(repo, execution.id)
    clock.advance(timedelta(milliseconds=1))
    assert [a.kind for a in watchdog(service).run_pass().actions] == [ActionKind.RECOVERED]
    retried = claim(repo, parent.id, NEXT)
    assert retried.partition is not None
    assert (retried.partition.key, retried.partition.retries) == ("a", 1)
    clock.advance(TTL)
    manager_alive(repo, execution.id)
    clock.advance(timedelta(milliseconds=1))
    (action,) = watchdog(service).run_pass().actions
    assert (action.kind, action.detail) == (ActionKind.RECOVERED, "parent_failed")
    row = models.StepExecution.objects.get(pk=parent.id)
    assert (row.status, row.exit_code) == ("FAILED", "PARTITION_RETRY_LIMIT")
    assert row.failure_category == FailureCategory.STALE_RECOVERED.value
    detail = models.FailureDetail.objects.get(step_execution_id=parent.id)
    assert detail.message is not None
    assert "OXIDE_BATCH_PARTITION_RETRY_LIMIT (1)" in detail.message
    assert models.WorkerRecovery.objects.filter(parent_failed=True).count() == 1
    # The execution is the manager's to end; no claim is handed out any more.
    assert models.JobExecution.objects.get(pk=execution.id).status == "STARTED"
    assert claim(repo, parent.id, NEXT).reason is NothingClaimed.FINISHED
    assert first.partition is not None


def test_worker_writes_do_not_renew_the_execution_lease(repo, clock, service) -> None:
    """The manager's death is the execution's lease (decision 467): a busy
    worker does not keep it alive, and the execution's recovery fences it."""
    execution, parent = managed(repo, clock, "a")
    claimed = claim(repo, parent.id, NEXT)
    assert claimed.worker_step is not None
    clock.advance(TTL)
    worker = chunk(repo, claimed.worker_step.id, NEXT, claimed.worker_step.version)
    clock.advance(timedelta(milliseconds=1))
    actions = watchdog(service).run_pass().actions
    assert [(a.kind, a.worker_step_execution_id) for a in actions] == [(ActionKind.RECOVERED, None)]
    assert models.JobExecution.objects.get(pk=execution.id).status == "FAILED"
    with pytest.raises(InvalidState) as refused, repo.begin(owner_token=NEXT) as uow:
        uow.commit_chunk(worker.id, worker.version, ExecutionCounts(read=1))
    assert "recovery decision" in str(refused.value.hint)
    assert claim(repo, parent.id, DEAD).reason is NothingClaimed.FINISHED


def test_an_operator_recovery_fences_a_worker_claimed_in_between(repo, clock, service) -> None:
    """A worker step inserted after the recovery read its steps is fenced all
    the same: its execution's decision refuses every write of it."""
    execution, parent = managed(repo, clock, "a")
    claimed = claim(repo, parent.id, NEXT)
    assert claimed.worker_step is not None
    proposal = service.propose(execution.id)
    service.recover(
        execution.id,
        expected_version=proposal.version,
        disposition=RecoveryDisposition.MARK_FAILED,
        reason_code="OPERATOR",
        evidence_digest=proposal.evidence_digest,
        actor=Actor("ops"),
        operation_id="op-1",
        override_note="testing the fence",
    )
    # As if inserted after the recovery: STARTED again, but under a fenced execution.
    models.StepExecution.objects.filter(pk=claimed.worker_step.id).update(
        status="STARTED", recovery_decision_id=None, ended_at=None, failure_category=None,
        failure_id=None,
    )  # fmt: skip
    version = models.StepExecution.objects.get(pk=claimed.worker_step.id).version
    with pytest.raises(InvalidState), repo.begin(owner_token=NEXT) as uow:
        uow.commit_chunk(claimed.worker_step.id, version, ExecutionCounts(read=1))
    with pytest.raises(ExecutionOwned), repo.begin(owner_token=MANAGER) as uow:
        uow.commit_chunk(claimed.worker_step.id, version, ExecutionCounts(read=1))
