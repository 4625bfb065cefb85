"""The whole story over real HTTP with the clients against a live server:
a runtime launches, commits chunks with checkpoints and reports an unknown
commit; an operator reads the recovery proposal and marks the attempt FAILED
with its evidence digest (reason ``UNKNOWN_EFFECT``); the runtime restarts and
the new step resumes from the last checkpoint to COMPLETED; the audit shows
who did what."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from oxide_batch.client import OperatorClient, RuntimeClient
from oxide_batch.domain.errors import (
    OperationIdConflict,
    StaleVersion,
    UnresolvedRecoveryRequired,
)
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.helpers import api_token
from tests.live import api_base_url

User = get_user_model()

S = BatchStatus
OPERATOR_NAME = "olga.ops"
RUNTIME_NAME = "worker-7"


def token_for(username: str, group: str) -> str:
    user = User.objects.create_user(username)
    user.groups.add(Group.objects.get(name=group))
    return api_token(user)


@pytest.fixture
def clients(transactional_db: None, live_server) -> tuple[RuntimeClient, OperatorClient]:
    runtime = RuntimeClient(api_base_url(live_server), token_for(RUNTIME_NAME, RUNTIME), timeout=10)
    operator = OperatorClient(
        api_base_url(live_server), token_for(OPERATOR_NAME, OPERATOR), timeout=10
    )
    return runtime, operator


def offset(value: int) -> StateEnvelope:
    return StateEnvelope("reader.offset", 1, {"offset": value})


def test_an_unknown_commit_is_recovered_and_the_restart_resumes(
    clients: tuple[RuntimeClient, OperatorClient],
) -> None:
    runtime, operator = clients

    # -- the runtime: launch, a step, chunks with checkpoints, then an unknown commit.
    instance, execution = runtime.launch("nightly_import", {"business_date": "2026-07-29"})
    execution = runtime.start(execution)
    step = runtime.create_step(execution, "load")
    step = runtime.transition_step(step, step.version, S.STARTED)
    for value in (100, 200, 300):
        step = runtime.commit_chunk(
            step, step.version, ExecutionCounts(read=100, written=100), checkpoint=offset(value)
        )
    # The fourth chunk's commit outcome is unknown: the step and the job say so.
    step = runtime.transition_step(
        step,
        step.version,
        S.UNKNOWN,
        failure=FailureSummary(FailureCategory.UNKNOWN_COMMIT, 4004),
    )
    execution = runtime.transition(
        execution,
        execution.version,
        S.UNKNOWN,
        failure=FailureSummary(FailureCategory.UNKNOWN_COMMIT, 4004),
    )
    assert execution.status is S.UNKNOWN

    # -- the operator: read the proposal, resolve it with its evidence digest.
    proposal = operator.proposal(execution)
    assert (proposal.eligible, proposal.reason_code) == (True, None)
    assert (proposal.status, proposal.version) == (S.UNKNOWN, execution.version)
    assert proposal.markers["unknown_commit"] is True
    assert proposal.default_failure_category is FailureCategory.UNKNOWN_COMMIT
    assert proposal.evidence["latest_step"]["checkpoint"]["schema"] == "reader.offset"
    # Marking an unknown commit FAILED needs UNKNOWN_EFFECT: refused, audited, replayable.
    with pytest.raises(UnresolvedRecoveryRequired) as refused:
        operator.recover(
            proposal, disposition="MARK_FAILED", reason_code="WORKER_LOST", operation_id="rec-1"
        )
    assert not getattr(refused.value, "replayed", False)
    with pytest.raises(UnresolvedRecoveryRequired) as replayed:
        operator.recover(
            proposal, disposition="MARK_FAILED", reason_code="WORKER_LOST", operation_id="rec-1"
        )
    assert getattr(replayed.value, "replayed", False) is True
    with pytest.raises(OperationIdConflict):
        operator.recover(
            proposal, disposition="ABANDON", reason_code="WORKER_LOST", operation_id="rec-1"
        )
    outcome = operator.recover(
        proposal, disposition="MARK_FAILED", reason_code="UNKNOWN_EFFECT", operation_id="rec-2"
    )
    assert (outcome.outcome, outcome.replayed, outcome.changed) == ("APPLIED", False, True)
    failed = outcome.execution
    assert failed is not None
    assert failed.status is S.FAILED
    assert failed.failure is not None
    assert failed.failure.category is FailureCategory.UNKNOWN_COMMIT
    assert outcome.decision is not None
    assert outcome.decision["evidence_digest"] == proposal.evidence_digest
    # A lost answer is retried safely with the same operation id.
    again = operator.recover(
        proposal, disposition="MARK_FAILED", reason_code="UNKNOWN_EFFECT", operation_id="rec-2"
    )
    assert (again.outcome, again.replayed) == ("REPLAYED", True)
    assert again.decision == outcome.decision
    # The runtime's view is stale now.
    with pytest.raises(StaleVersion):
        runtime.transition(execution, execution.version, S.FAILED)

    # -- the runtime: restart; the step resumes from the last checkpoint.
    restart = runtime.start(runtime.create_execution(instance.id))
    assert restart.attempt == 2
    resumed = runtime.create_step(restart, "load")
    assert resumed.id != step.id
    state = runtime.checkpoint(resumed)
    assert state.step.id == resumed.id
    assert state.checkpoint == offset(300)  # the last committed chunk, not the unknown one
    resumed = runtime.transition_step(resumed, resumed.version, S.STARTED)
    resumed = runtime.commit_chunk(
        resumed, resumed.version, ExecutionCounts(read=50, written=50), checkpoint=offset(350)
    )
    assert runtime.checkpoint(resumed).checkpoint == offset(350)
    resumed = runtime.transition_step(resumed, resumed.version, S.COMPLETED)
    restart = runtime.transition(restart, restart.version, S.COMPLETED)
    assert restart.status is S.COMPLETED

    # -- the operator protects the history, then the audit tells who did what.
    held = operator.hold(instance.id, reason_code="INCIDENT_REVIEW", operation_id="hold-1")
    assert held.hold is not None
    assert held.hold["actor"] == OPERATOR_NAME
    assert runtime.instance(instance.id).hold is not None
    released = operator.release(instance.id, reason_code="REVIEW_DONE", operation_id="rel-1")
    assert (released.changed, released.hold) == (True, None)

    requests = list(operator.audit("operator-requests", job_execution_id=execution.id))
    assert [
        (r["action"], r["operation_id"], r["outcome"], r["actor"], r["rejection_code"])
        for r in requests
    ] == [
        ("RECOVER", "rec-2", "APPLIED", OPERATOR_NAME, None),
        ("RECOVER", "rec-1", "REJECTED", OPERATOR_NAME, "unresolved_recovery_required"),
    ]
    assert (requests[0]["prior_status"], requests[0]["result_status"]) == ("UNKNOWN", "FAILED")
    decisions = list(operator.audit("recovery-decisions", job_instance_id=instance.id))
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision["actor"] == OPERATOR_NAME
    assert decision["reason_code"] == "UNKNOWN_EFFECT"
    assert decision["evidence_digest_prefix"] == proposal.evidence_digest[:12]
    records = list(operator.audit("retention-records", job_instance_id=instance.id))
    assert [(r["action"], r["actor"], r["reason_code"]) for r in records] == [
        ("RELEASE_HOLD", OPERATOR_NAME, "REVIEW_DONE"),
        ("HOLD", OPERATOR_NAME, "INCIDENT_REVIEW"),
    ]
    # The runtime did not act as an operator, and could not.
    assert RUNTIME_NAME not in {r["actor"] for r in requests}
