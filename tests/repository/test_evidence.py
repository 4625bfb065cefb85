"""Recovery evidence and proposals on the
repository (contract §2.5.3, §2.5.4, §2.5.5; contract scenarios 5.7, 5.8)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    FailureSummary,
    JobExecution,
    LifecycleTransition,
    RecoveryDisposition,
    RecoveryRequest,
)
from oxide_batch.domain.errors import (
    ExecutionNotStale,
    JobExecutionNotFound,
    RecoveryEvidenceStale,
    RecoveryNotAllowed,
    StaleVersion,
    UnresolvedRecoveryRequired,
)
from oxide_batch.domain.evidence import (
    DEFAULT_STALE_AFTER,
    Eligibility,
    RecoveryEvidence,
    RecoveryProposal,
    check_recovery,
    propose_recovery,
)
from oxide_batch.domain.flow import FlowDecisionRequest, FlowTarget, FlowTransitionKind
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.state import StateEnvelope, StoredState
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.conftest import on_postgres
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
D = RecoveryDisposition
OWNER = b"\x01" * 16
OTHER = b"\x02" * 16
MINUTE = timedelta(minutes=1)
CHECKPOINT = StateEnvelope("reader.position", 2, {"offset": 2})
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def sql_of(operation: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


def evidence_of(repo: DjangoJobRepository, execution_id: int) -> RecoveryEvidence:
    with repo.begin() as uow:
        return uow.recovery_evidence(execution_id)


def proposal_of(
    repo: DjangoJobRepository,
    clock: FixedClock,
    execution_id: int,
    stale_after: timedelta = DEFAULT_STALE_AFTER,
) -> RecoveryProposal:
    return propose_recovery(
        evidence_of(repo, execution_id), now=clock.now(), stale_after=stale_after
    )


def owned_started(repo, clock, run: str = "2026-07-29") -> JobExecution:
    """A STARTED execution whose owner claimed it while STARTING (committed)."""
    execution = launch(repo, key(run=run))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    return move(repo, execution, S.STARTED, clock=clock)


def started_step(repo, execution: JobExecution, name: str = "load"):
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, name)
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    return step


def chunk(repo, step, checkpoint: StateEnvelope | None = CHECKPOINT):
    with repo.begin() as uow:
        committed = uow.commit_chunk(
            step.id, step.version, ExecutionCounts(read=2), checkpoint=checkpoint
        )
        uow.commit()
    return committed


# ------------------------------------------------------------------ the evidence


def test_the_evidence_of_a_fresh_execution(repo, clock):
    execution = launch(repo)
    evidence = evidence_of(repo, execution.id)
    assert evidence == RecoveryEvidence(
        job_execution_id=execution.id,
        status=S.STARTING,
        attempt=1,
        version=0,
        owner_recorded=False,
        failure_category=None,
        last_activity_at=clock.now(),
        last_observed_at=None,
        stop_requested_at=None,
        newest_step_write_at=None,
        latest_step=None,
        completed_partition=False,
        committed_flow_decision=False,
    )
    assert not evidence.unknown_commit


def test_the_evidence_carries_owner_stop_and_observation(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(MINUTE)
    with repo.begin() as uow:
        uow.request_execution_stop(execution.id, execution.version, "operator:test")
        uow.commit()
    stopped_at = clock.now()
    clock.advance(MINUTE)
    with repo.begin() as uow:
        uow.observe_execution_control(execution.id, OWNER)
        uow.commit()
    evidence = evidence_of(repo, execution.id)
    assert evidence.owner_recorded
    assert evidence.stop_requested_at == stopped_at
    assert evidence.last_observed_at == evidence.last_activity_at == clock.now()
    assert (evidence.status, evidence.version) == (S.STOPPING, execution.version + 1)


def test_the_latest_step_is_the_highest_id_with_its_checkpoint_schema_and_size(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    first = chunk(repo, started_step(repo, execution, "load"))
    clock.advance(MINUTE)
    second = started_step(repo, execution, "write")
    evidence = evidence_of(repo, execution.id)
    latest = evidence.latest_step
    assert latest is not None
    assert (latest.id, latest.status, latest.version, latest.checkpoint) == (
        second.id,
        S.STARTED,
        1,
        None,
    )
    assert evidence.newest_step_write_at == clock.now()
    clock.advance(MINUTE)
    chunk(repo, second)
    latest = evidence_of(repo, execution.id).latest_step
    assert latest is not None
    assert latest.checkpoint is not None
    size = len(StoredState.of(CHECKPOINT).text.encode("utf-8"))
    assert (latest.checkpoint.schema, latest.checkpoint.schema_version) == ("reader.position", 2)
    assert (latest.checkpoint.size, latest.checkpoint.intact) == (size, True)
    assert first.id < second.id


def test_the_newest_step_write_is_the_latest_updated_at_of_any_step(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    load = started_step(repo, execution, "load")
    started_step(repo, execution, "write")
    clock.advance(MINUTE)
    chunk(repo, load)
    evidence = evidence_of(repo, execution.id)
    assert evidence.newest_step_write_at == clock.now()
    assert evidence.inactivity(clock.now() + MINUTE) == MINUTE


def test_a_corrupt_checkpoint_is_reported_not_raised(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    step = chunk(repo, started_step(repo, execution))
    models.StepExecution.objects.filter(pk=step.id).update(checkpoint_checksum="0" * 64)
    latest = evidence_of(repo, execution.id).latest_step
    assert latest is not None
    assert latest.checkpoint is not None
    assert (latest.checkpoint.intact, latest.checkpoint.schema) == (False, None)


def test_unknown_commit_when_the_execution_is_unknown(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.UNKNOWN, clock=clock)
    assert evidence_of(repo, execution.id).unknown_commit


def test_unknown_commit_when_the_failure_category_is_unknown_commit(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        uow.transition_job_execution(
            execution.id,
            execution.version,
            LifecycleTransition(S.FAILED, FailureSummary(FailureCategory.UNKNOWN_COMMIT, 5)),
        )
        uow.commit()
    evidence = evidence_of(repo, execution.id)
    assert evidence.failure_category is FailureCategory.UNKNOWN_COMMIT
    assert evidence.unknown_commit


def test_unknown_commit_when_the_latest_step_is_unknown(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    step = started_step(repo, execution)
    assert not evidence_of(repo, execution.id).unknown_commit
    with repo.begin() as uow:
        uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.UNKNOWN))
        uow.commit()
    evidence = evidence_of(repo, execution.id)
    assert evidence.status is S.STARTED
    assert evidence.unknown_commit


@pytest.mark.contract
def test_the_completed_partition_marker(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    parent = started_step(repo, execution, "partitioned")
    with repo.begin() as uow:
        worker = uow.create_step_execution(execution.id, "worker-a")
        (partition,) = uow.create_step_partition_plan(parent.id, [PartitionPlanEntry("a")])
        uow.commit()
    with repo.begin() as uow:
        partition = uow.assign_step_partition(partition.id, partition.version, worker.id)
        worker = uow.transition_step_execution(worker.id, 0, LifecycleTransition(S.STARTED))
        worker = uow.transition_step_execution(
            worker.id, worker.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    assert not evidence_of(repo, execution.id).completed_partition
    with repo.begin() as uow:
        uow.complete_step_partition(partition.id, partition.version, worker.id)
        uow.commit()
    assert evidence_of(repo, execution.id).completed_partition


@pytest.mark.contract
def test_the_committed_flow_decision_marker(repo, clock):
    manifest = {
        "format": 2,
        "job": "flow_job",
        "entry": "load",
        "nodes": [{"id": "load", "kind": "step"}],
        "transitions": [{"source": "load", "pattern": "*", "target": {"terminal": "COMPLETE"}}],
    }
    with repo.begin() as uow:
        digest = uow.register_definition("flow_job", "v1", manifest).definition.digest
        instance = uow.select_or_create_job_instance(key("flow_job")).instance
        execution = uow.create_job_execution(instance.id, definition_digest=digest)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_flow_step_execution(execution.id, "load", "load")
        uow.commit()
    assert not evidence_of(repo, execution.id).committed_flow_decision
    with repo.begin() as uow:
        uow.append_flow_decision(
            FlowDecisionRequest(
                job_execution_id=execution.id,
                source_node_id="load",
                kind=FlowTransitionKind.STEP_EXIT,
                observed_outcome="COMPLETED",
                target=FlowTarget.from_json({"terminal": "COMPLETE"}),
                plan_fingerprint=digest,
                input_digest="1" * 64,
                source_step_execution_id=step.id,
            )
        )
        uow.commit()
    assert evidence_of(repo, execution.id).committed_flow_decision


def test_the_evidence_of_a_missing_execution_is_not_found(repo):
    for lock in (False, True):
        with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
            uow.recovery_evidence(10**12, lock=lock)


def test_reading_evidence_is_one_statement_and_three_when_locking(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    chunk(repo, started_step(repo, execution))
    with repo.begin() as uow:
        plain = sql_of(lambda: uow.recovery_evidence(execution.id))
        locked = sql_of(lambda: uow.recovery_evidence(execution.id, lock=True))
    assert len(plain) == 1
    assert "FOR" not in plain[0].split("FROM")[-1]
    assert len(locked) == 3  # the execution, then its steps, then the evidence
    if on_postgres():
        assert locked[0].endswith("FOR NO KEY UPDATE")
        assert locked[1].endswith("FOR NO KEY UPDATE")
    assert locked[2] == plain[0]


# --------------------------------------------------------------- proposals (5.7, 5.8)


def test_5_7_an_unknown_execution_is_eligible_flagged_and_needs_unknown_effect(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.UNKNOWN, clock=clock)
    proposal = proposal_of(repo, clock, execution.id)
    assert (proposal.eligible, proposal.reason_code, proposal.unknown_commit) == (True, None, True)
    common = {
        "expected_version": execution.version,
        "evidence_digest_hex": proposal.evidence_digest,
        "disposition": D.MARK_FAILED,
    }
    with pytest.raises(UnresolvedRecoveryRequired):
        check_recovery(proposal, reason_code="COMMIT_INSPECTED_NOT_DURABLE", **common)
    check_recovery(proposal, reason_code="UNKNOWN_EFFECT", **common)


def test_5_8_a_stale_execution_of_another_owner_yields_a_version_bound_digest(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(16 * MINUTE)
    proposal = proposal_of(repo, clock, execution.id)
    assert proposal.eligible
    assert proposal.inactive_for == 16 * MINUTE
    assert proposal.version == execution.version
    assert proposal.evidence.owner_recorded
    assert re.fullmatch(r"[0-9a-f]{64}", proposal.evidence_digest)
    assert OWNER.hex() not in repr(proposal)


def test_5_8_a_young_execution_is_not_stale(repo, clock):
    """An owned execution within its lease (contract §2.5.3: 60 s by default)."""
    execution = owned_started(repo, clock)
    clock.advance(MINUTE)
    proposal = proposal_of(repo, clock, execution.id)
    assert (proposal.eligible, proposal.reason_code) == (False, "execution_not_stale")
    assert proposal.lease_expires_at == clock.now()
    with pytest.raises(ExecutionNotStale) as raised:
        check_recovery(
            proposal,
            expected_version=execution.version,
            evidence_digest_hex=proposal.evidence_digest,
            disposition=D.ABANDON,
            reason_code="ORPHAN_CONFIRMED",
        )
    assert (raised.value.inactive_seconds, raised.value.threshold_seconds) == (60, 60)


def test_the_lease_is_strict(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(MINUTE)
    assert proposal_of(repo, clock, execution.id).reason_code == "execution_not_stale"
    clock.advance(timedelta(milliseconds=1))
    expired = proposal_of(repo, clock, execution.id)
    assert (expired.eligible, expired.eligibility) == (True, Eligibility.LEASE_EXPIRED)


def test_the_threshold_of_an_unowned_execution_is_strict(repo, clock):
    execution = move(repo, launch(repo, key(run="unowned")), S.STARTED, clock=clock)
    clock.advance(15 * MINUTE)
    assert proposal_of(repo, clock, execution.id).reason_code == "execution_not_stale"
    clock.advance(timedelta(milliseconds=1))
    stale = proposal_of(repo, clock, execution.id)
    assert (stale.eligible, stale.eligibility) == (True, Eligibility.INACTIVE)
    assert stale.lease_expires_at is None


def test_a_finished_execution_is_not_recoverable(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    clock.advance(timedelta(hours=2))
    proposal = proposal_of(repo, clock, execution.id)
    assert (proposal.eligible, proposal.reason_code) == (False, "recovery_not_allowed")
    with pytest.raises(RecoveryNotAllowed):
        check_recovery(
            proposal,
            expected_version=execution.version,
            evidence_digest_hex=proposal.evidence_digest,
            disposition=D.ABANDON,
            reason_code="ORPHAN_CONFIRMED",
        )


def test_5_8_the_digest_is_stable_when_only_time_passes(repo, clock):
    execution = owned_started(repo, clock)
    chunk(repo, started_step(repo, execution))
    clock.advance(16 * MINUTE)
    first = proposal_of(repo, clock, execution.id)
    clock.advance(timedelta(hours=3))
    second = proposal_of(repo, clock, execution.id)
    assert first.inactive_for != second.inactive_for
    assert first.evidence_digest == second.evidence_digest


def _digest_changes(
    repo: DjangoJobRepository, clock: FixedClock, execution_id: int, change: Callable[[], object]
) -> bool:
    before = proposal_of(repo, clock, execution_id).evidence_digest
    clock.advance(MINUTE)
    change()
    return proposal_of(repo, clock, execution_id).evidence_digest != before


def test_5_8_a_chunk_commit_changes_the_digest(repo, clock):
    execution = owned_started(repo, clock)
    step = started_step(repo, execution)
    assert _digest_changes(repo, clock, execution.id, lambda: chunk(repo, step, None))


def test_5_8_a_step_transition_changes_the_digest(repo, clock):
    execution = owned_started(repo, clock)
    step = started_step(repo, execution)

    def complete_step():
        with repo.begin() as uow:
            uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.COMPLETED))
            uow.commit()

    assert _digest_changes(repo, clock, execution.id, complete_step)


def test_5_8_a_stop_request_changes_the_digest(repo, clock):
    execution = owned_started(repo, clock)

    def request_stop():
        with repo.begin() as uow:
            uow.request_execution_stop(execution.id, execution.version, "operator:test")
            uow.commit()

    assert _digest_changes(repo, clock, execution.id, request_stop)


@pytest.mark.parametrize("token", [OWNER, OTHER], ids=["owner", "stranger"])
def test_5_8_an_observation_changes_the_digest(repo, clock, token):
    execution = owned_started(repo, clock)

    def observe():
        with repo.begin() as uow:
            uow.observe_execution_control(execution.id, token)
            uow.commit()

    assert _digest_changes(repo, clock, execution.id, observe)


def test_the_owners_observation_resets_inactivity_a_strangers_does_not(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(20 * MINUTE)
    for token, inactive in ((OTHER, 20 * MINUTE), (OWNER, timedelta(0))):
        with repo.begin() as uow:
            uow.observe_execution_control(execution.id, token)
            uow.commit()
        assert proposal_of(repo, clock, execution.id).inactive_for == inactive


def test_a_stop_request_is_not_activity(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(20 * MINUTE)
    with repo.begin() as uow:
        uow.request_execution_stop(execution.id, execution.version, "operator:test")
        uow.commit()
    assert proposal_of(repo, clock, execution.id).eligible


def test_an_audited_recovery_rechecks_the_proposal_under_the_execution_lock(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(16 * MINUTE)
    seen = proposal_of(repo, clock, execution.id)
    with repo.begin() as uow:
        current = propose_recovery(
            uow.recovery_evidence(execution.id, lock=True),
            now=clock.now(),
            stale_after=DEFAULT_STALE_AFTER,
        )
        check_recovery(
            current,
            expected_version=seen.version,
            evidence_digest_hex=seen.evidence_digest,
            disposition=D.MARK_FAILED,
            reason_code="WORKER_LOST",
        )
        result = uow.recover_job_execution(
            execution.id,
            RecoveryRequest.mark_failed(
                expected_version=seen.version,
                reason_code="WORKER_LOST",
                operator_reference="operator:test",
                evidence_digest=bytes.fromhex(seen.evidence_digest),
                failure=FailureSummary(FailureCategory.STALE_RECOVERED, 1),
            ),
        )
        uow.commit()
    assert result.execution.status is S.FAILED
    assert result.decision.evidence_digest.hex() == seen.evidence_digest


def test_evidence_that_moved_after_the_proposal_is_refused(repo, clock):
    execution = owned_started(repo, clock)
    step = started_step(repo, execution)
    clock.advance(16 * MINUTE)
    seen = proposal_of(repo, clock, execution.id)
    clock.advance(timedelta(seconds=1))
    # A step write the operator did not see: the job version stays, the evidence
    # moves — and once stale again, the old digest no longer matches.
    chunk(repo, step, None)
    clock.advance(16 * MINUTE)
    current = proposal_of(repo, clock, execution.id)
    assert current.eligible
    with pytest.raises(RecoveryEvidenceStale):
        check_recovery(
            current,
            expected_version=seen.version,
            evidence_digest_hex=seen.evidence_digest,
            disposition=D.ABANDON,
            reason_code="ORPHAN_CONFIRMED",
        )
    with pytest.raises(StaleVersion):
        check_recovery(
            current,
            expected_version=seen.version - 1,
            evidence_digest_hex=seen.evidence_digest,
            disposition=D.ABANDON,
            reason_code="ORPHAN_CONFIRMED",
        )


# ---------------------------------------------------------------------- setting


def _settings_with(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OXIDE_BATCH_RECOVERY_STALE_AFTER"}
    if value is not None:
        env["OXIDE_BATCH_RECOVERY_STALE_AFTER"] = value
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'project.settings'; "
            "django.setup(); from oxide_batch.conf import batch_settings as s; "
            "print(int(s.RECOVERY_STALE_AFTER.total_seconds()))",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 900), ("1m", 60), ("90s", 90), ("24h", 86400), ("1d", 86400)]
)
def test_the_stale_threshold_setting(value, seconds):
    result = _settings_with(value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(seconds)


@pytest.mark.parametrize("value", ["59s", "25h", "2d", "soon", "0s"])
def test_a_stale_threshold_outside_1_minute_to_24_hours_is_refused(value):
    """Read from the environment, the value is refused where it is read (and by
    the system check, tests/test_conf.py)."""
    result = _settings_with(value)
    assert result.returncode != 0
    assert "ImproperlyConfigured: OXIDE_BATCH_RECOVERY_STALE_AFTER: " in result.stderr
