"""Claims and worker recoveries in the repository (issue 43): what each
statement is, and that a claim costs the same for a plan of 1 or 512
partitions (query budgets)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, FailureCategory, LifecycleTransition
from oxide_batch.domain.errors import ExecutionOwned, InvalidCharacters
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.repository.claims import NothingClaimed, worker_step_name
from tests.conftest import on_postgres
from tests.repository.test_partitions import make_family, plan, sql_of

pytestmark = pytest.mark.django_db
S = BatchStatus
TOKEN = b"\x01" * 16


def _claim_sql(repo, clock, size: int, job: str) -> tuple[list[str], list[str], list[str]]:
    family = make_family(repo, clock, job=job)
    plan(repo, family.parent.id, *[f"k{i:04}" for i in range(size)])
    with repo.begin(owner_token=TOKEN) as uow:
        first = sql_of(lambda: uow.claim_step_partition(family.parent.id, TOKEN))
        uow.commit()
    with repo.begin(owner_token=TOKEN) as uow:
        claim = uow.claim_step_partition(family.parent.id, TOKEN)
        uow.commit()
    # A failed worker: the retry reads it for the takeover.
    with repo.begin() as uow:
        assert claim.worker_step is not None
        assert claim.partition is not None
        worker = uow.transition_step_execution(
            claim.worker_step.id,
            claim.worker_step.version,
            LifecycleTransition(
                S.FAILED, failure=FailureSummary(FailureCategory.USER_COMPONENT, 1)
            ),
        )
        uow.complete_step_partition(claim.partition.id, claim.partition.version, worker.id)
        uow.commit()
    with repo.begin(owner_token=TOKEN) as uow:
        retry = sql_of(lambda: uow.claim_step_partition(family.parent.id, TOKEN))
    if size > 2:
        return first, retry, []
    with repo.begin(owner_token=TOKEN) as uow:
        while uow.claim_step_partition(family.parent.id, TOKEN).claimed:
            pass
        nothing = sql_of(lambda: uow.claim_step_partition(family.parent.id, TOKEN))
    return first, retry, nothing


def test_a_claim_costs_the_same_for_1_or_512_partitions(repo, clock) -> None:
    """A claim: the parent (shared) with its execution, the next claimable
    partition (locked, skipping locked ones), the worker INSERT, the
    assignment's check that the worker serves no other partition, the
    partition UPDATE; a retry reads the failed worker too."""
    first, retry, nothing = _claim_sql(repo, clock, 2, "claims_2")
    big_first, big_retry, _ = _claim_sql(repo, clock, 512, "claims_512")
    verbs = [sql.split()[0] for sql in first]
    assert verbs == ["SELECT", "SELECT", "INSERT", "SELECT", "UPDATE"]
    assert [sql.split()[0] for sql in retry] == ["SELECT", "SELECT", "SELECT", "INSERT",
                                                 "SELECT", "UPDATE"]  # fmt: skip
    assert (len(big_first), len(big_retry)) == (len(first), len(retry))
    # Nothing left: the parent, the (empty) claimable read, one read of what still runs.
    assert [sql.split()[0] for sql in nothing] == ["SELECT", "SELECT", "SELECT"]
    if on_postgres():
        assert first[0].endswith("FOR SHARE OF s")
        assert first[1].endswith("FOR NO KEY UPDATE SKIP LOCKED")
        assert 'COLLATE "C"' in first[1]


def test_claim_refusals(repo, clock) -> None:
    family = make_family(repo, clock, job="refusals")
    plan(repo, family.parent.id, "a")
    with pytest.raises(InvalidCharacters), repo.begin() as uow:
        uow.claim_step_partition(family.parent.id, b"short")
    models.JobExecution.objects.filter(pk=family.execution.id).update(owner_user_id=4242)
    # Another runtime user than the claimant: refused (only the claimant writes).
    with pytest.raises(ExecutionOwned), repo.begin(runtime_user_id=4243) as uow:
        uow.claim_step_partition(family.parent.id, TOKEN)


def test_an_unplanned_parent_waits_and_a_finished_one_ends(repo, clock) -> None:
    family = make_family(repo, clock, job="unplanned")
    with repo.begin() as uow:
        assert uow.claim_step_partition(family.parent.id, TOKEN).reason is (
            NothingClaimed.ALL_ASSIGNED
        )
        uow.transition_step_execution(
            family.parent.id, family.parent.version, LifecycleTransition(S.COMPLETED)
        )
        assert uow.claim_step_partition(family.parent.id, TOKEN).reason is (NothingClaimed.FINISHED)


def test_worker_step_names() -> None:
    assert worker_step_name("fan", 3, 0) == "fan:3"
    assert worker_step_name("fan", 3, 1) == "fan:3#2"
    assert worker_step_name("fan", 3, 2) == "fan:3#3"


def test_a_worker_recovery_costs_a_fixed_number_of_statements(repo, clock, settings) -> None:
    settings.OXIDE_BATCH_LEASE_TTL = timedelta(seconds=30)
    family = make_family(repo, clock, job="recovery_budget")
    plan(repo, family.parent.id, *[f"k{i:03}" for i in range(64)])
    with repo.begin() as uow:
        claim = uow.claim_step_partition(family.parent.id, TOKEN)
        uow.commit()
    assert claim.worker_step is not None
    clock.advance(timedelta(seconds=30))
    with repo.begin() as uow:
        sql = sql_of(
            lambda: uow.recover_partition_worker(
                claim.worker_step.id, actor="watchdog@x", reason_code="LEASE_EXPIRED", failure_id=3
            )
        )
        uow.commit()
    # The worker's partition, its parent, both steps locked (id order), no
    # earlier decision, the worker's write, the partition locked and written, the audit row.
    assert [s.split()[0] for s in sql] == ["SELECT", "SELECT", "SELECT", "SELECT", "UPDATE",
                                           "SELECT", "UPDATE", "INSERT"]  # fmt: skip


def test_a_restart_attempts_first_claim_resumes_the_earlier_failed_worker(repo, clock) -> None:
    from oxide_batch.domain import ExecutionCounts
    from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
    from tests.repository.test_partitions import _restart_attempt_parent

    checkpoint = StateEnvelope.from_json(
        {"schema": "offset", "schema_version": 1, "payload": {"at": 4}},
        kind=EnvelopeKind.CHECKPOINT,
    )
    family = make_family(repo, clock, job="restart_claims")
    plan(repo, family.parent.id, "a", "b")
    outcomes = {}
    for _ in range(2):
        with repo.begin() as uow:
            claim = uow.claim_step_partition(family.parent.id, TOKEN)
            uow.commit()
        assert claim.partition is not None
        assert claim.worker_step is not None
        outcomes[claim.partition.key] = claim
    with repo.begin() as uow:
        a, b = outcomes["a"], outcomes["b"]
        assert a.worker_step is not None
        assert b.worker_step is not None
        assert a.partition is not None
        assert b.partition is not None
        worker = uow.commit_chunk(
            a.worker_step.id, 1, ExecutionCounts(read=4, written=4), checkpoint=checkpoint
        )
        worker = uow.transition_step_execution(
            worker.id,
            worker.version,
            LifecycleTransition(
                S.FAILED, failure=FailureSummary(FailureCategory.USER_COMPONENT, 1)
            ),
        )
        uow.complete_step_partition(a.partition.id, a.partition.version, worker.id)
        done = uow.transition_step_execution(b.worker_step.id, 1, LifecycleTransition(S.COMPLETED))
        uow.complete_step_partition(b.partition.id, b.partition.version, done.id)
        uow.commit()
    target = _restart_attempt_parent(repo, clock, family)
    with repo.begin() as uow:
        target = uow.transition_step_execution(target.id, 0, LifecycleTransition(S.STARTED))
        uow.restart_step_partition_plan(None, target.id)
        uow.commit()
    with repo.begin() as uow:
        again = uow.claim_step_partition(target.id, TOKEN)
        uow.commit()
    assert again.partition is not None
    assert again.worker_step is not None
    assert (again.partition.key, again.partition.retries) == ("a", 0)
    assert again.worker_step.step_name == "partitioned:1"
    assert again.checkpoint == checkpoint
    assert again.worker_step.counts.written == 4
    with repo.begin() as uow:  # b COMPLETED in the earlier attempt: carried, not rerun
        assert uow.claim_step_partition(target.id, TOKEN).reason is NothingClaimed.ALL_ASSIGNED
