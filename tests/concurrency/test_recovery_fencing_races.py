"""Recovery against a worker presumed dead, with real threads and separate
connections on PostgreSQL (contract §2.5.6). Whichever commits first wins, and the
other is refused by a 409 rule — never a 200 on changed history:

- recovery first: the orphaned step is FAILED (version + 1) when the late chunk
  commit or step transition gets its lock, so the worker's write is refused;
- the write first: the recovery recomputes the evidence under its locks, sees
  the new step version and answers ``recovery_evidence_stale`` (resolving nothing).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.errors import (
    IllegalTransition,
    InvalidState,
    RecoveryEvidenceStale,
    StaleVersion,
)
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service
from oxide_batch.services.operator import OperatorService
from tests.concurrency.test_control_races import in_order
from tests.helpers import failure, key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
OPERATOR = Actor("operator")
CHUNK = ExecutionCounts(read=10, written=10, committed=1)


def orphan_with_a_running_step(repo, clock, run: str, *, unknown: bool = False):
    """A STARTED (or UNKNOWN) execution whose STARTED step's worker went silent
    16 minutes ago (past the default 15-minute threshold)."""
    execution = move(repo, launch(repo, key(run=run)), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    if unknown:
        with repo.begin() as uow:
            execution = uow.transition_job_execution(
                execution.id,
                execution.version,
                LifecycleTransition(S.UNKNOWN, failure=failure()),
                by_runtime=True,
            )
            uow.commit()
    clock.advance(timedelta(minutes=16))
    return execution, step


def recover(service: OperatorService, execution_id: int, operation_id: str) -> Any:
    proposal = service.propose(execution_id)
    assert proposal.eligible, proposal
    return service.recover(
        execution_id,
        expected_version=proposal.evidence.version,
        disposition=RecoveryDisposition.MARK_FAILED,
        reason_code="UNKNOWN_EFFECT" if proposal.unknown_commit else "WORKER_LOST",
        evidence_digest=proposal.evidence_digest,
        actor=OPERATOR,
        operation_id=operation_id,
    )


def recover_in(uow, service: OperatorService, execution_id: int) -> Any:
    """The recovery's own steps inside an open unit of work (so the test holds
    its locks open): recompute the evidence under lock, then recover."""
    from oxide_batch.domain.evidence import propose_recovery
    from oxide_batch.domain.recovery import RecoveryRequest

    evidence = uow.recovery_evidence(execution_id, lock=True)
    proposal = propose_recovery(evidence, now=uow.now(), stale_after=service.stale_after)
    request = RecoveryRequest.mark_failed(
        expected_version=evidence.version,
        reason_code="WORKER_LOST",
        operator_reference=OPERATOR.reference,
        evidence_digest=bytes.fromhex(proposal.evidence_digest),
        failure=failure(7),
    )
    return uow.recover_job_execution(execution_id, request)


def late_chunk(repo, step) -> Any:
    with repo.begin() as uow:
        committed = uow.commit_chunk(
            step.id,
            step.version,
            CHUNK,
            checkpoint=StateEnvelope("reader.offset", 1, {"offset": 10}),
        )
        uow.commit()
    return committed


def late_completion(repo, step) -> Any:
    with repo.begin() as uow:
        done = uow.transition_step_execution(
            step.id, step.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    return done


def refused(call) -> BaseException:
    try:
        call()
    except (StaleVersion, InvalidState, IllegalTransition) as error:
        return error
    raise AssertionError("the fenced write was accepted")


@pytest.mark.parametrize("late_write", [late_chunk, late_completion], ids=["chunk", "transition"])
def test_recovery_first_fences_the_late_write_of_the_old_worker(repo, clock, late_write):
    service = operator_service(repo)
    execution, step = orphan_with_a_running_step(repo, clock, f"first-{late_write.__name__}")

    result, outcome = in_order(
        repo,
        lambda uow: recover_in(uow, service, execution.id),
        lambda: refused(lambda: late_write(repo, step)),
    )

    assert result.decision.resolved_step_ids == (step.id,)
    # The late write waited for the step lock, then saw the resolved row.
    assert isinstance(outcome, StaleVersion)
    row = models.StepExecution.objects.get(pk=step.id)
    assert (row.status, row.version, row.read_count) == ("FAILED", step.version + 1, 0)
    assert row.checkpoint is None
    # Re-reading the version does not help the worker: the rule refuses it.
    fresh = models.StepExecution.objects.get(pk=step.id)
    step_now = step.with_state(step.metadata, fresh.version, step.updated_at)
    assert isinstance(refused(lambda: late_chunk(repo, step_now)), InvalidState)
    assert isinstance(refused(lambda: late_completion(repo, step_now)), IllegalTransition)
    assert models.StepExecution.objects.get(pk=step.id).version == step.version + 1


def test_the_write_first_makes_the_recovery_evidence_stale(repo, clock):
    service = operator_service(repo)
    execution, step = orphan_with_a_running_step(repo, clock, "write-first", unknown=True)
    proposal = service.propose(execution.id)
    assert proposal.eligible

    def recover_with_the_old_proposal() -> Any:
        try:
            return service.recover(
                execution.id,
                expected_version=proposal.evidence.version,
                disposition=RecoveryDisposition.MARK_FAILED,
                reason_code="UNKNOWN_EFFECT",
                evidence_digest=proposal.evidence_digest,
                actor=OPERATOR,
                operation_id="after-the-write",
            )
        except RecoveryEvidenceStale as error:
            return error

    def chunk_in(uow) -> Any:
        return uow.commit_chunk(step.id, step.version, CHUNK)

    committed, outcome = in_order(repo, chunk_in, recover_with_the_old_proposal)

    assert committed.version == step.version + 1
    assert isinstance(outcome, RecoveryEvidenceStale)
    row = models.StepExecution.objects.get(pk=step.id)
    assert (row.status, row.version, row.read_count) == ("STARTED", step.version + 1, 10)
    assert models.JobExecution.objects.get(pk=execution.id).status == "UNKNOWN"
    assert not models.RecoveryDecision.objects.exists()
    (record,) = models.OperatorRequest.objects.all()
    assert (record.outcome, record.rejection_code) == ("REJECTED", "recovery_evidence_stale")
    # With a fresh proposal the recovery applies and resolves the step.
    applied = recover(service, execution.id, "with-fresh-evidence")
    assert applied.decision.resolved_step_ids == (step.id,)
    assert models.StepExecution.objects.get(pk=step.id).status == "FAILED"
