"""Step partitions (contract §2.4, contract scenarios 10.1–10.12 and 10.16): the
behavioural contract on the Django adapter (both databases) and the in-memory fake
(``contract``); tampered rows, locks and statement counts are the adapter's (``adapter``).

Workers are ordinary step executions of the parent's job execution; their counts
only move through chunk commits, and a partition's outcome is copied from its
worker row when the partition is completed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

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
    StepExecution,
)
from oxide_batch.domain.errors import (
    CountExhausted,
    DuplicatePartitionKey,
    EmptyPartitionPlan,
    FaultStateCorrupt,
    IllegalTransition,
    InvalidEnvelope,
    NameTooLong,
    NotRestartable,
    PartitionAggregationIncomplete,
    PartitionParentNotActive,
    PartitionPlanExists,
    PartitionPlanNotCommitted,
    PartitionPlanTooLarge,
    PartitionRestartMismatch,
    PartitionStateCorrupt,
    PartitionUpdateNotAllowed,
    PartitionWorkerAlreadyAssigned,
    PartitionWorkerMismatch,
    PartitionWorkerStale,
    RestartStateNotFound,
    StaleVersion,
    StepExecutionNotFound,
    StepPartitionNotFound,
    VersionAhead,
)
from oxide_batch.domain.partitions import PartitionPlanEntry, StepPartition
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.repository import FixedClock
from oxide_batch.repository.partition_rows import StepPartitionWithContext
from tests.conftest import on_postgres
from tests.helpers import Repository, key, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus
MAX_I64 = 2**63 - 1
CONTEXT = StateEnvelope("contract.partition", 1, {"range": "redacted"})
ZERO = ExecutionCounts()
FAILURE = FailureSummary(FailureCategory.USER_COMPONENT, 5)


# -- builders -------------------------------------------------------------------------


@dataclass
class Family:
    """A STARTED job execution with a parent step and named worker steps (committed)."""

    execution: JobExecution
    parent: StepExecution
    workers: dict[str, StepExecution]


def make_family(
    repo: Repository,
    clock: FixedClock,
    *workers: str,
    parent_path: Sequence[BatchStatus] = (S.STARTED,),
    job: str = "partitioned_job",
) -> Family:
    execution = move(repo, launch(repo, key(job)), S.STARTED, clock=clock)
    with repo.begin() as uow:
        parent = uow.create_step_execution(execution.id, "partitioned")
        for target in parent_path:
            parent = uow.transition_step_execution(
                parent.id,
                parent.version,
                LifecycleTransition(target, failure=FAILURE if target is S.FAILED else None),
            )
        created = {name: uow.create_step_execution(execution.id, name) for name in workers}
        uow.commit()
    return Family(execution, parent, created)


def entries(*keys: str, context: StateEnvelope | None = CONTEXT) -> list[PartitionPlanEntry]:
    return [PartitionPlanEntry(k, context) for k in keys]


def plan(repo: Repository, parent_id: int, *keys: str) -> dict[str, StepPartition]:
    """Create and commit a plan; the partitions by key."""
    with repo.begin() as uow:
        created = uow.create_step_partition_plan(parent_id, entries(*keys))
        uow.commit()
    return {p.key: p for p in created}


def read_plan(repo: Repository, parent_id: int) -> list[StepPartition]:
    with repo.begin() as uow:
        return uow.step_partition_plan(parent_id)


def current(repo: Repository, partition: StepPartition) -> StepPartition:
    return next(p for p in read_plan(repo, partition.step_execution_id) if p.id == partition.id)


def step(repo: Repository, step_id: int) -> StepExecution:
    with repo.begin() as uow:
        return uow.get_step_execution(step_id)


def assign(repo: Repository, partition: StepPartition, worker_id: int) -> StepPartition:
    with repo.begin() as uow:
        assigned = uow.assign_step_partition(partition.id, partition.version, worker_id)
        uow.commit()
    return assigned


def complete(repo: Repository, partition: StepPartition, worker_id: int) -> StepPartition:
    with repo.begin() as uow:
        completed = uow.complete_step_partition(partition.id, partition.version, worker_id)
        uow.commit()
    return completed


def run_worker(
    repo: Repository,
    clock: FixedClock,
    worker_id: int,
    status: BatchStatus,
    exit_code: str | None = None,
    counts: ExecutionCounts | None = None,
    failure_id: int = 800,
) -> StepExecution:
    """Start a worker, commit one chunk of ``counts``, set its exit code, end it in ``status``."""
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        worker = uow.get_step_execution(worker_id)
        if worker.status is S.STARTING:
            worker = uow.transition_step_execution(
                worker.id, worker.version, LifecycleTransition(S.STARTED)
            )
        if counts is not None:
            worker = uow.commit_chunk(worker.id, worker.version, counts)
        if exit_code is not None:
            worker = uow.enrich_step_exit_status(worker.id, worker.version, exit_code)
        if status is not S.STARTED:
            failure = FailureSummary(FailureCategory.USER_COMPONENT, failure_id)
            worker = uow.transition_step_execution(
                worker.id,
                worker.version,
                LifecycleTransition(status, failure=failure if status is S.FAILED else None),
            )
        uow.commit()
    return worker


def counts(base: int) -> ExecutionCounts:
    return ExecutionCounts(*(base * factor for factor in range(1, 7)))


def sql_of(operation: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


@pytest.fixture
def contract(repo, clock) -> Family:
    """Scenario 10a: a STARTED parent and three workers under one job execution."""
    return make_family(repo, clock, "worker", "retry-worker", "restarted-worker")


# -- 10a. plan creation and assignment --------------------------------------------------


def test_10_1_a_new_plan_is_wholly_unassigned_and_returned_in_entry_order(repo, contract):
    with repo.begin() as uow:
        created = uow.create_step_partition_plan(contract.parent.id, entries("zeta", "alpha"))
        uow.commit()
    assert [p.key for p in created] == ["zeta", "alpha"]
    assert [p.ordinal for p in created] == [1, 2]
    for partition in created:
        assert isinstance(partition, StepPartitionWithContext)
        assert (partition.status, partition.worker_step_execution_id) == (S.STARTING, None)
        assert (partition.version, partition.exit_code, partition.counts) == (0, "UNKNOWN", ZERO)
        assert partition.step_execution_id == contract.parent.id
        assert partition.job_instance_id == contract.execution.job_instance_id
        assert partition.context == CONTEXT
    assert read_plan(repo, contract.parent.id) == sorted(created, key=lambda p: p.key)


def test_a_plan_may_be_created_under_a_starting_parent_and_without_contexts(repo, clock):
    family = make_family(repo, clock, parent_path=())
    with repo.begin() as uow:
        created = uow.create_step_partition_plan(family.parent.id, entries("a", context=None))
        uow.commit()
    assert [(p.key, p.context) for p in read_plan(repo, family.parent.id)] == [("a", None)]
    assert created[0].context is None


def test_10_2_workers_cannot_be_assigned_before_the_plan_commits(repo, contract):
    with repo.begin() as uow:
        zeta, _ = uow.create_step_partition_plan(contract.parent.id, entries("zeta", "alpha"))
        with pytest.raises(PartitionPlanNotCommitted) as error:
            uow.assign_step_partition(zeta.id, 0, contract.workers["worker"].id)
        uow.commit()
    assert error.value.step_execution_id == contract.parent.id
    assigned = assign(repo, zeta, contract.workers["worker"].id)
    assert assigned.status is S.STARTED


def test_10_3_reads_return_the_plan_in_byte_exact_key_order(repo, contract):
    # PostgreSQL's linguistic collations order these "_", "a", "B", "é", "Z".
    keys = ["a", "B", "é", "Z", "_", "e\u0301", "zeta", "alpha"]
    plan(repo, contract.parent.id, *keys)
    read = [p.key for p in read_plan(repo, contract.parent.id)]
    assert read == sorted(keys, key=lambda k: k.encode("utf-8"))
    assert read[:5] == ["B", "Z", "_", "a", "alpha"]
    assert read[-1] == "é"


def test_keys_are_compared_byte_for_byte_without_unicode_normalisation(repo, contract):
    created = plan(repo, contract.parent.id, "\u00e9", "e\u0301", " padded ", "tab\there")
    assert len(created) == 4


def test_10_4_one_worker_attempt_serves_at_most_one_partition(repo, contract):
    partitions = plan(repo, contract.parent.id, "zeta", "alpha")
    assign(repo, partitions["zeta"], contract.workers["worker"].id)
    with repo.begin() as uow, pytest.raises(PartitionWorkerAlreadyAssigned) as error:
        uow.assign_step_partition(partitions["alpha"].id, 0, contract.workers["worker"].id)
    assert error.value.worker_step_execution_id == contract.workers["worker"].id
    alpha = assign(repo, partitions["alpha"], contract.workers["retry-worker"].id)
    assert alpha.worker_step_execution_id == contract.workers["retry-worker"].id


def test_assignment_binds_the_worker_and_bumps_the_version(repo, contract):
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    assigned = assign(repo, zeta, contract.workers["worker"].id)
    assert (assigned.status, assigned.version, assigned.exit_code) == (S.STARTED, 1, "UNKNOWN")
    assert assigned.worker_step_execution_id == contract.workers["worker"].id
    assert assigned.context == CONTEXT
    assert current(repo, zeta) == assigned


def test_10_5_completion_is_cas_guarded_and_derives_its_result_from_the_worker(
    repo, clock, contract
):
    partitions = plan(repo, contract.parent.id, "zeta", "alpha")
    worker, retry = contract.workers["worker"].id, contract.workers["retry-worker"].id
    zeta = assign(repo, partitions["zeta"], worker)
    alpha = assign(repo, partitions["alpha"], retry)
    run_worker(repo, clock, worker, S.COMPLETED, "COMPLETED", counts(1))
    run_worker(repo, clock, retry, S.FAILED, "FAILED", counts(10), failure_id=800)
    with repo.begin() as uow:
        with pytest.raises(StaleVersion) as error:
            uow.complete_step_partition(zeta.id, 0, worker)
        assert (error.value.expected, error.value.actual) == (0, 1)
        zeta = uow.complete_step_partition(zeta.id, zeta.version, worker)
        alpha = uow.complete_step_partition(alpha.id, alpha.version, retry)
        uow.commit()
    assert (zeta.status, zeta.exit_code, zeta.counts, zeta.version) == (
        S.COMPLETED,
        "COMPLETED",
        counts(1),
        2,
    )
    assert (alpha.status, alpha.exit_code, alpha.counts) == (S.FAILED, "FAILED", counts(10))
    assert {p.key: p for p in read_plan(repo, contract.parent.id)} == {
        "zeta": zeta,
        "alpha": alpha,
    }


def test_completion_copies_the_worker_row_whatever_the_caller_believes(repo, clock, contract):
    """The caller names only the partition, version and worker: nothing else is taken from it."""
    worker = contract.workers["worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    run_worker(repo, clock, worker, S.STOPPED, "STOPPED_BY_OPERATOR", counts(3))
    completed = complete(repo, zeta, worker)
    row = step(repo, worker)
    assert (completed.status, completed.exit_code, completed.counts) == (
        row.status,
        row.exit_code,
        row.counts,
    )
    assert (completed.status, completed.exit_code) == (S.STOPPED, "STOPPED_BY_OPERATOR")


def test_completing_with_a_worker_that_is_not_the_assigned_one_is_partition_worker_stale(
    repo, clock, contract
):
    worker, other = contract.workers["worker"].id, contract.workers["retry-worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    run_worker(repo, clock, other, S.COMPLETED, "COMPLETED")
    with repo.begin() as uow, pytest.raises(PartitionWorkerStale) as error:
        uow.complete_step_partition(zeta.id, zeta.version, other)
    assert (error.value.partition_id, error.value.worker_step_execution_id) == (zeta.id, other)


def test_a_replaced_worker_cannot_complete_the_partition(repo, clock, contract):
    worker, retry = contract.workers["worker"].id, contract.workers["retry-worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    run_worker(repo, clock, worker, S.FAILED, "FAILED")
    zeta = assign(repo, complete(repo, zeta, worker), retry)
    with repo.begin() as uow, pytest.raises(PartitionWorkerStale):
        uow.complete_step_partition(zeta.id, zeta.version, worker)


@pytest.mark.adapter
def test_completion_by_a_worker_of_another_job_execution_is_a_mismatch(repo, clock, contract):
    """Unreachable through assignment; a row pointing across job executions is refused."""
    stranger = make_family(repo, clock, "stranger", job="other_job").workers["stranger"].id
    zeta = assign(
        repo, plan(repo, contract.parent.id, "zeta")["zeta"], contract.workers["worker"].id
    )
    models.StepPartition.objects.filter(pk=zeta.id).update(worker_step_execution_id=stranger)
    run_worker(repo, clock, stranger, S.COMPLETED, "COMPLETED")
    with repo.begin() as uow, pytest.raises(PartitionWorkerMismatch) as error:
        uow.complete_step_partition(zeta.id, zeta.version, stranger)
    assert (error.value.partition_id, error.value.worker_step_execution_id) == (zeta.id, stranger)


@pytest.mark.parametrize("worker_status", [S.STARTING, S.STARTED, S.STOPPING])
def test_completing_before_the_worker_is_runtime_terminal_is_aggregation_incomplete(
    repo, clock, contract, worker_status
):
    worker = contract.workers["worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    if worker_status is not S.STARTING:
        run_worker(repo, clock, worker, S.STARTED)
    if worker_status is S.STOPPING:
        run_worker(repo, clock, worker, S.STOPPING)
    with repo.begin() as uow, pytest.raises(PartitionAggregationIncomplete) as error:
        uow.complete_step_partition(zeta.id, zeta.version, worker)
    assert (error.value.step_execution_id, error.value.status) == (
        contract.parent.id,
        worker_status,
    )
    assert current(repo, zeta) == zeta


def test_an_unknown_worker_completes_its_partition_as_unknown(repo, clock, contract):
    worker = contract.workers["worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    run_worker(repo, clock, worker, S.UNKNOWN, counts=counts(2))
    completed = complete(repo, zeta, worker)
    assert (completed.status, completed.exit_code, completed.counts) == (
        S.UNKNOWN,
        "UNKNOWN",
        counts(2),
    )


@pytest.mark.parametrize("status", [S.STARTING, S.COMPLETED, S.FAILED])
def test_completing_a_partition_that_is_not_started_is_not_allowed(repo, clock, contract, status):
    worker = contract.workers["worker"].id
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    if status is not S.STARTING:
        zeta = assign(repo, zeta, worker)
        run_worker(repo, clock, worker, status, status.value)
        zeta = complete(repo, zeta, worker)
    with repo.begin() as uow, pytest.raises(PartitionUpdateNotAllowed) as error:
        uow.complete_step_partition(zeta.id, zeta.version, worker)
    assert (error.value.id, error.value.status) == (zeta.id, status)


def test_10_6_a_completed_partition_is_never_reassigned_a_failed_one_restarts_clean(
    repo, clock, contract
):
    partitions = plan(repo, contract.parent.id, "zeta", "alpha")
    worker = contract.workers["worker"].id
    retry = contract.workers["retry-worker"].id
    restarted = contract.workers["restarted-worker"].id
    zeta = assign(repo, partitions["zeta"], worker)
    alpha = assign(repo, partitions["alpha"], retry)
    run_worker(repo, clock, worker, S.COMPLETED, "COMPLETED", counts(1))
    run_worker(repo, clock, retry, S.FAILED, "FAILED", counts(7))
    zeta, alpha = complete(repo, zeta, worker), complete(repo, alpha, retry)
    with repo.begin() as uow:
        with pytest.raises(PartitionUpdateNotAllowed) as error:
            uow.assign_step_partition(zeta.id, zeta.version, worker)
        assert (error.value.id, error.value.status) == (zeta.id, S.COMPLETED)
        alpha = uow.assign_step_partition(alpha.id, alpha.version, restarted)
        with pytest.raises(PartitionPlanExists) as exists:
            uow.create_step_partition_plan(contract.parent.id, entries("zeta", "alpha"))
        assert exists.value.step_execution_id == contract.parent.id
    assert (alpha.status, alpha.worker_step_execution_id) == (S.STARTED, restarted)
    assert (alpha.exit_code, alpha.counts, alpha.version) == ("UNKNOWN", ZERO, 3)


@pytest.mark.parametrize("outcome", [S.STOPPED, S.FAILED])
def test_a_stopped_or_failed_partition_may_be_retried_with_a_new_worker(
    repo, clock, contract, outcome
):
    worker, retry = contract.workers["worker"].id, contract.workers["retry-worker"].id
    zeta = assign(repo, plan(repo, contract.parent.id, "zeta")["zeta"], worker)
    run_worker(repo, clock, worker, outcome, outcome.value, counts(4))
    retried = assign(repo, complete(repo, zeta, worker), retry)
    assert (retried.status, retried.worker_step_execution_id, retried.counts) == (
        S.STARTED,
        retry,
        ZERO,
    )


def test_assigning_a_started_partition_is_not_allowed(repo, contract):
    zeta = assign(
        repo, plan(repo, contract.parent.id, "zeta")["zeta"], contract.workers["worker"].id
    )
    with repo.begin() as uow, pytest.raises(PartitionUpdateNotAllowed) as error:
        uow.assign_step_partition(zeta.id, zeta.version, contract.workers["retry-worker"].id)
    assert error.value.status is S.STARTED


def test_assignment_with_a_version_ahead_is_version_ahead_and_marks_the_execution(repo, contract):
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    with pytest.raises(VersionAhead) as error, repo.begin() as uow:
        uow.assign_step_partition(zeta.id, 5, contract.workers["worker"].id)
    assert (error.value.expected, error.value.actual) == (5, 0)
    with repo.begin() as uow:
        assert uow.recovery_evidence(contract.parent.job_execution_id).lost_write


def test_assignment_needs_a_started_parent(repo, clock):
    family = make_family(repo, clock, "worker", parent_path=())
    zeta = plan(repo, family.parent.id, "zeta")["zeta"]
    with repo.begin() as uow, pytest.raises(PartitionParentNotActive) as error:
        uow.assign_step_partition(zeta.id, 0, family.workers["worker"].id)
    assert (error.value.step_execution_id, error.value.status) == (family.parent.id, S.STARTING)


def test_a_worker_of_another_job_execution_or_the_parent_itself_is_a_mismatch(
    repo, clock, contract
):
    stranger = make_family(repo, clock, "stranger", job="other_job").workers["stranger"].id
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    for worker in (stranger, contract.parent.id):
        with repo.begin() as uow, pytest.raises(PartitionWorkerMismatch) as error:
            uow.assign_step_partition(zeta.id, 0, worker)
        assert (error.value.partition_id, error.value.worker_step_execution_id) == (zeta.id, worker)


def test_missing_rows_are_not_found(repo, contract):
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    with repo.begin() as uow:
        with pytest.raises(StepPartitionNotFound) as missing_partition:
            uow.assign_step_partition(zeta.id + 1000, 0, contract.workers["worker"].id)
        assert missing_partition.value.id == zeta.id + 1000
        with pytest.raises(StepPartitionNotFound):
            uow.complete_step_partition(zeta.id + 1000, 0, contract.workers["worker"].id)
        with pytest.raises(StepExecutionNotFound) as missing_worker:
            uow.assign_step_partition(zeta.id, 0, 999_999)
        assert missing_worker.value.id == 999_999
        for operation in (
            lambda: uow.create_step_partition_plan(999_999, entries("a")),
            lambda: uow.step_partition_plan(999_999),
            lambda: uow.aggregate_step_partitions(999_999, 0),
            lambda: uow.restart_step_partition_plan(999_999, contract.parent.id),
            lambda: uow.restart_step_partition_plan(contract.parent.id, 999_999),
        ):
            with pytest.raises(StepExecutionNotFound):
                operation()


def test_a_step_without_a_plan_reads_an_empty_plan(repo, contract):
    assert read_plan(repo, contract.workers["worker"].id) == []


# -- 10b. plan validation ----------------------------------------------------------------


def test_10_7_duplicate_keys_reject_the_whole_plan(repo, clock):
    family = make_family(repo, clock, parent_path=())
    with repo.begin() as uow:
        with pytest.raises(DuplicatePartitionKey):
            uow.create_step_partition_plan(family.parent.id, entries("same", "other", "same"))
        assert uow.step_partition_plan(family.parent.id) == []


@pytest.mark.adapter
def test_an_empty_or_oversized_plan_is_refused_before_any_statement(repo, contract):
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        with pytest.raises(EmptyPartitionPlan):
            uow.create_step_partition_plan(contract.parent.id, [])
        with pytest.raises(PartitionPlanTooLarge) as error:
            uow.create_step_partition_plan(
                contract.parent.id, entries(*(f"k{i:04}" for i in range(1025)))
            )
    assert error.value.max == 1024
    assert queries.captured_queries == []
    assert read_plan(repo, contract.parent.id) == []


def test_partition_keys_are_1_to_128_bytes():
    PartitionPlanEntry("é" * 64)
    with pytest.raises(NameTooLong):
        PartitionPlanEntry("é" * 64 + "x")


def test_a_partition_context_is_at_most_4_kib(repo, contract):
    def envelope(size: int) -> StateEnvelope:
        base = StateEnvelope("s", 1, {"p": ""})
        padding = size - len(base.canonical())
        return StateEnvelope("s", 1, {"p": "x" * padding})

    assert len(envelope(4096).canonical()) == 4096
    with repo.begin() as uow, pytest.raises(InvalidEnvelope) as error:
        uow.create_step_partition_plan(
            contract.parent.id, [PartitionPlanEntry("big", envelope(4097))]
        )
    assert error.value.kind == EnvelopeKind.PARTITION_CONTEXT.value
    with repo.begin() as uow:
        (created,) = uow.create_step_partition_plan(
            contract.parent.id, [PartitionPlanEntry("fits", envelope(4096))]
        )
        uow.commit()
    assert created.context == envelope(4096)


@pytest.mark.parametrize(
    "path", [(S.STOPPING,), (S.STOPPED,), (S.FAILED,), (S.COMPLETED,), (S.UNKNOWN,)]
)
def test_a_plan_needs_a_starting_or_started_parent(repo, clock, path):
    family = make_family(repo, clock, parent_path=(S.STARTED, *path))
    with repo.begin() as uow, pytest.raises(PartitionParentNotActive) as error:
        uow.create_step_partition_plan(family.parent.id, entries("a"))
    assert (error.value.step_execution_id, error.value.status) == (family.parent.id, path[-1])


# -- 10c. aggregation ----------------------------------------------------------------------


@pytest.fixture
def aggregation(repo, clock):
    """Scenario 10c: plan [zeta, alpha]; both workers FAILED; alpha completed, zeta STARTED."""
    family = make_family(repo, clock, "aggregate-worker-a", "aggregate-worker-z")
    worker_a = family.workers["aggregate-worker-a"].id
    worker_z = family.workers["aggregate-worker-z"].id
    partitions = plan(repo, family.parent.id, "zeta", "alpha")
    zeta = assign(repo, partitions["zeta"], worker_z)
    alpha = assign(repo, partitions["alpha"], worker_a)
    run_worker(repo, clock, worker_a, S.FAILED, "ALPHA_FAILED", failure_id=901)
    run_worker(repo, clock, worker_z, S.FAILED, "ZETA_FAILED", failure_id=902)
    alpha = complete(repo, alpha, worker_a)
    return family, zeta, alpha


def test_10_8_an_active_child_blocks_aggregation_and_leaves_the_parent_unchanged(repo, aggregation):
    family, zeta, _ = aggregation
    with repo.begin() as uow, pytest.raises(PartitionAggregationIncomplete) as error:
        uow.aggregate_step_partitions(family.parent.id, family.parent.version)
    assert (error.value.step_execution_id, error.value.status) == (family.parent.id, S.STARTED)
    assert step(repo, family.parent.id) == family.parent
    complete(repo, zeta, zeta.worker_step_execution_id)


def test_10_9_to_10_11_aggregate_is_a_key_ordered_fold_rollback_discards_commit_applies(
    repo, clock, aggregation
):
    family, zeta, _ = aggregation
    complete(repo, zeta, zeta.worker_step_execution_id)
    original = family.parent.version
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        provisional = uow.aggregate_step_partitions(family.parent.id, original)
        uow.rollback()
    assert (provisional.status, provisional.exit_code, provisional.counts) == (
        S.FAILED,
        "ALPHA_FAILED",
        ZERO,
    )
    assert step(repo, family.parent.id) == family.parent
    with repo.begin() as uow:
        aggregated = uow.aggregate_step_partitions(family.parent.id, original)
        uow.commit()
    assert aggregated == step(repo, family.parent.id)
    assert (aggregated.status, aggregated.exit_code, aggregated.version) == (
        S.FAILED,
        "ALPHA_FAILED",
        original + 1,
    )
    assert aggregated.failure == FailureSummary(FailureCategory.USER_COMPONENT, 901)
    assert aggregated.ended_at == clock.now()
    # 10.11: a retry with the original version returns the committed parent.
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        assert uow.aggregate_step_partitions(family.parent.id, original) == aggregated
        with pytest.raises(StaleVersion) as error:
            uow.aggregate_step_partitions(family.parent.id, original - 1)
        assert (error.value.expected, error.value.actual) == (original - 1, original + 1)
    assert step(repo, family.parent.id) == aggregated


def test_10_12_a_terminal_parent_freezes_its_children(repo, aggregation):
    family, zeta, alpha = aggregation
    zeta = complete(repo, zeta, zeta.worker_step_execution_id)
    with repo.begin() as uow:
        uow.aggregate_step_partitions(family.parent.id, family.parent.version)
        uow.commit()
    with repo.begin() as uow:
        with pytest.raises(PartitionParentNotActive) as error:
            uow.assign_step_partition(alpha.id, alpha.version + 1, alpha.worker_step_execution_id)
        assert (error.value.step_execution_id, error.value.status) == (family.parent.id, S.FAILED)
        with pytest.raises(PartitionParentNotActive):
            uow.complete_step_partition(zeta.id, zeta.version, zeta.worker_step_execution_id)


def test_a_retry_after_the_parent_moved_otherwise_is_stale_version(repo, clock, aggregation):
    family, zeta, _ = aggregation
    complete(repo, zeta, zeta.worker_step_execution_id)
    with repo.begin() as uow:
        uow.transition_step_execution(
            family.parent.id,
            family.parent.version,
            LifecycleTransition(
                S.FAILED, failure=FailureSummary(FailureCategory.USER_COMPONENT, 5)
            ),
        )
        uow.commit()
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.aggregate_step_partitions(family.parent.id, family.parent.version)


def partitioned_outcomes(
    repo: Repository,
    clock: FixedClock,
    outcomes: dict[str, tuple[BatchStatus, ExecutionCounts]],
    parent_path: Sequence[BatchStatus] = (S.STARTED,),
) -> Family:
    """A committed plan whose partitions all completed with the given outcomes."""
    family = make_family(repo, clock, *(f"w-{k}" for k in outcomes))
    partitions = plan(repo, family.parent.id, *outcomes)
    for partition_key, (status, chunk) in outcomes.items():
        worker = family.workers[f"w-{partition_key}"].id
        partition = assign(repo, partitions[partition_key], worker)
        run_worker(repo, clock, worker, status, f"{partition_key.upper()}_{status.value}", chunk)
        complete(repo, partition, worker)
    with repo.begin() as uow:
        for target in parent_path[1:]:
            family.parent = uow.transition_step_execution(
                family.parent.id, family.parent.version, LifecycleTransition(target)
            )
        uow.commit()
    return family


def aggregate(repo: Repository, family: Family) -> StepExecution:
    with repo.begin() as uow:
        parent = uow.aggregate_step_partitions(family.parent.id, family.parent.version)
        uow.commit()
    return parent


def test_a_completed_plan_completes_the_parent_with_the_summed_counts(repo, clock):
    family = partitioned_outcomes(
        repo, clock, {"b": (S.COMPLETED, counts(2)), "a": (S.COMPLETED, counts(1))}
    )
    parent = aggregate(repo, family)
    assert (parent.status, parent.exit_code, parent.counts) == (
        S.COMPLETED,
        "A_COMPLETED",
        counts(3),
    )
    assert parent.failure is None


def test_an_unknown_child_makes_the_parent_unknown(repo, clock):
    family = partitioned_outcomes(
        repo,
        clock,
        {"a": (S.FAILED, counts(1)), "m": (S.UNKNOWN, counts(1)), "z": (S.COMPLETED, ZERO)},
    )
    parent = aggregate(repo, family)
    # The exit code of the first UNKNOWN partition in key order; UNKNOWN never ends.
    assert (parent.status, parent.exit_code, parent.ended_at) == (S.UNKNOWN, "M_UNKNOWN", None)
    assert parent.counts == counts(2)
    with repo.begin() as uow:  # the replay also holds for an UNKNOWN parent
        assert uow.aggregate_step_partitions(family.parent.id, family.parent.version) == parent


def test_a_stopping_parent_cannot_become_completed(repo, clock):
    family = partitioned_outcomes(
        repo, clock, {"a": (S.COMPLETED, ZERO)}, parent_path=(S.STARTED, S.STOPPING)
    )
    with repo.begin() as uow, pytest.raises(IllegalTransition) as error:
        uow.aggregate_step_partitions(family.parent.id, family.parent.version)
    assert (error.value.from_status, error.value.to_status) == (S.STOPPING, S.COMPLETED)
    assert step(repo, family.parent.id) == family.parent


def test_a_stopping_parent_may_aggregate_to_stopped(repo, clock):
    family = partitioned_outcomes(
        repo,
        clock,
        {"a": (S.COMPLETED, ZERO), "b": (S.STOPPED, ZERO)},
        parent_path=(S.STARTED, S.STOPPING),
    )
    assert aggregate(repo, family).status is S.STOPPED


def test_counts_above_the_bigint_bound_are_count_exhausted(repo, clock):
    family = partitioned_outcomes(
        repo,
        clock,
        {"a": (S.COMPLETED, ExecutionCounts(read=MAX_I64)), "b": (S.COMPLETED, counts(1))},
    )
    with repo.begin() as uow, pytest.raises(CountExhausted):
        uow.aggregate_step_partitions(family.parent.id, family.parent.version)
    assert step(repo, family.parent.id) == family.parent


def test_aggregating_a_step_without_a_plan_is_partition_state_corrupt(repo, contract):
    with repo.begin() as uow, pytest.raises(PartitionStateCorrupt):
        uow.aggregate_step_partitions(contract.parent.id, contract.parent.version)


def test_aggregation_needs_a_started_or_stopping_parent(repo, clock):
    family = make_family(repo, clock, parent_path=())
    plan(repo, family.parent.id, "a")
    with repo.begin() as uow, pytest.raises(PartitionParentNotActive) as error:
        uow.aggregate_step_partitions(family.parent.id, 0)
    assert error.value.status is S.STARTING


def test_aggregation_with_a_stale_version_is_stale_version(repo, aggregation):
    family, _, _ = aggregation
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.aggregate_step_partitions(family.parent.id, family.parent.version - 1)
    with repo.begin() as uow, pytest.raises(VersionAhead):
        uow.aggregate_step_partitions(family.parent.id, family.parent.version + 3)


# -- stored state ----------------------------------------------------------------------------


TAMPERED = '{"payload":{"range":"tampered"},"schema":"contract.partition","schema_version":1}'
OVERSIZED = StateEnvelope("s", 1, {"p": "x" * 5000}).canonical().decode()


@pytest.mark.adapter
@pytest.mark.parametrize(
    "tamper",
    [
        {"context": TAMPERED},
        {"context_checksum": "0" * 64},
        {"context": "not json", "context_checksum": hashlib.sha256(b"not json").hexdigest()},
        {"context": OVERSIZED, "context_checksum": hashlib.sha256(OVERSIZED.encode()).hexdigest()},
    ],
    ids=["payload", "checksum", "malformed", "above-4-KiB"],
)
def test_a_tampered_stored_context_is_partition_state_corrupt(repo, clock, contract, tamper):
    partitions = plan(repo, contract.parent.id, "zeta", "alpha")
    models.StepPartition.objects.filter(pk=partitions["zeta"].id).update(**tamper)
    with repo.begin() as uow:
        with pytest.raises(PartitionStateCorrupt):
            uow.step_partition_plan(contract.parent.id)
        with pytest.raises(PartitionStateCorrupt):
            uow.assign_step_partition(partitions["zeta"].id, 0, contract.workers["worker"].id)
    # A restart carrying the plan fails closed too (whole plan or nothing); taking
    # over state that does not verify is fault_state_corrupt (contract §2.4.5).
    target = _restart_attempt_parent(repo, clock, contract)
    with repo.begin() as uow:
        with pytest.raises(FaultStateCorrupt):
            uow.restart_step_partition_plan(contract.parent.id, target.id)
        assert uow.step_partition_plan(target.id) == []


# -- restart -----------------------------------------------------------------------------------


def _restart_attempt_parent(
    repo: Repository, clock: FixedClock, family: Family, *, fail_job: bool = True
) -> StepExecution:
    """Fail the family's job execution (unless told not to) and start a new attempt's parent."""
    execution = family.execution
    if fail_job:
        execution = move(repo, repo_get(repo, execution.id), S.FAILED, clock=clock)
    with repo.begin() as uow:
        attempt = uow.create_job_execution(execution.job_instance_id)
        attempt = uow.transition_job_execution(attempt.id, 0, LifecycleTransition(S.STARTED))
        # A parent that COMPLETED (the budget test aggregates it) runs again only
        # when asked (contract §2.3.2): the test carries its plan all the same.
        parent = uow.create_step_execution(attempt.id, "partitioned", allow_start_if_complete=True)
        uow.commit()
    return parent


def repo_get(repo: Repository, execution_id: int) -> JobExecution:
    with repo.begin() as uow:
        return uow.get_job_execution(execution_id)


def test_restart_carries_completed_partitions_and_resets_every_other_one(repo, clock):
    family = make_family(repo, clock, "w-a", "w-b", "w-c", "w-d")
    partitions = plan(repo, family.parent.id, "d", "c", "b", "a")
    outcomes = {"a": S.COMPLETED, "b": S.FAILED, "c": S.UNKNOWN, "d": S.STOPPED}
    for partition_key, status in outcomes.items():
        worker = family.workers[f"w-{partition_key}"].id
        partition = assign(repo, partitions[partition_key], worker)
        run_worker(repo, clock, worker, status, f"{partition_key}_done", counts(1))
        complete(repo, partition, worker)
    target = _restart_attempt_parent(repo, clock, family)
    with repo.begin() as uow:
        carried = uow.restart_step_partition_plan(family.parent.id, target.id)
        with pytest.raises(PartitionPlanNotCommitted):
            uow.assign_step_partition(carried[1].id, 0, target.id)
        uow.commit()
    assert [(p.key, p.ordinal) for p in carried] == [("d", 1), ("c", 2), ("b", 3), ("a", 4)]
    assert read_plan(repo, target.id) == sorted(carried, key=lambda p: p.key)
    by_key = {p.key: p for p in carried}
    assert (by_key["a"].status, by_key["a"].exit_code, by_key["a"].counts) == (
        S.COMPLETED,
        "a_done",
        counts(1),
    )
    assert by_key["a"].worker_step_execution_id == family.workers["w-a"].id
    for partition_key in "bcd":
        partition = by_key[partition_key]
        assert (partition.status, partition.worker_step_execution_id) == (S.STARTING, None)
        assert (partition.exit_code, partition.counts) == ("UNKNOWN", ZERO)
    for partition in carried:
        assert (partition.version, partition.step_execution_id) == (0, target.id)
        assert partition.context == CONTEXT


def test_restart_refusals_in_their_order(repo, clock):
    family = make_family(repo, clock)
    plan(repo, family.parent.id, "zeta")
    other = make_family(repo, clock, job="other_job")
    with repo.begin() as uow:
        other_node = uow.create_step_execution(family.execution.id, "elsewhere")
        uow.commit()
    # Another node, or the same node of another instance: not a restart of this step.
    for target in (other_node.id, other.parent.id):
        with repo.begin() as uow, pytest.raises(PartitionRestartMismatch):
            uow.restart_step_partition_plan(family.parent.id, target)
    # The source job execution must be STOPPED or FAILED (it is STARTED).
    with repo.begin() as uow, pytest.raises(NotRestartable) as error:
        uow.restart_step_partition_plan(family.parent.id, family.parent.id)
    assert error.value.status is S.STARTED
    target = _restart_attempt_parent(repo, clock, family)
    with repo.begin() as uow:
        uow.restart_step_partition_plan(family.parent.id, target.id)
        uow.commit()
    with repo.begin() as uow, pytest.raises(PartitionPlanExists) as exists:
        uow.restart_step_partition_plan(family.parent.id, target.id)
    assert exists.value.step_execution_id == target.id


def test_restart_from_a_source_without_plan_is_restart_state_not_found(repo, clock):
    family = make_family(repo, clock)
    target = _restart_attempt_parent(repo, clock, family)
    with repo.begin() as uow, pytest.raises(RestartStateNotFound) as error:
        uow.restart_step_partition_plan(family.parent.id, target.id)
    assert (error.value.execution_id, error.value.step_name) == (
        target.job_execution_id,
        "partitioned",
    )


@pytest.mark.parametrize("path", [(S.STOPPING,), (S.COMPLETED,)])
def test_restart_needs_a_starting_or_started_target(repo, clock, path):
    family = make_family(repo, clock)
    plan(repo, family.parent.id, "a")
    target = _restart_attempt_parent(repo, clock, family)
    with repo.begin() as uow:
        target = uow.transition_step_execution(target.id, 0, LifecycleTransition(S.STARTED))
        for status in path:
            target = uow.transition_step_execution(
                target.id, target.version, LifecycleTransition(status)
            )
        uow.commit()
    with repo.begin() as uow, pytest.raises(PartitionParentNotActive) as error:
        uow.restart_step_partition_plan(family.parent.id, target.id)
    assert (error.value.step_execution_id, error.value.status) == (target.id, path[-1])


def test_10_16_end_to_end_a_restart_reruns_only_the_unfinished_partitions(repo, clock):
    """A partitioned step fails with alpha and gamma COMPLETED and beta FAILED; the job
    restarts, the plan is carried over, only beta runs again, and the parent's totals are
    alpha's and gamma's carried counts plus beta's worker (which takes over its earlier
    attempt's counts, as a restarted step does, contract §2.3.2)."""
    names = {k: f"__worker_{k}" for k in ("alpha", "beta", "gamma")}
    first = make_family(repo, clock, *names.values())
    partitions = plan(repo, first.parent.id, "gamma", "alpha", "beta")
    first_outcomes = {
        "alpha": (S.COMPLETED, counts(1)),
        "beta": (S.FAILED, counts(10)),
        "gamma": (S.COMPLETED, counts(100)),
    }
    for partition_key, (status, chunk) in first_outcomes.items():
        worker = first.workers[names[partition_key]].id
        partition = assign(repo, partitions[partition_key], worker)
        run_worker(repo, clock, worker, status, f"{partition_key.upper()}_{status.value}", chunk)
        complete(repo, partition, worker)
    failed_parent = aggregate(repo, first)
    assert (failed_parent.status, failed_parent.exit_code) == (S.FAILED, "BETA_FAILED")
    move(repo, repo_get(repo, first.execution.id), S.FAILED, clock=clock)

    # The relaunch: a new attempt, a new parent step, the plan carried over.
    with repo.begin() as uow:
        attempt = uow.create_job_execution(first.execution.job_instance_id)
        attempt = uow.transition_job_execution(attempt.id, 0, LifecycleTransition(S.STARTED))
        parent = uow.create_step_execution(attempt.id, "partitioned")
        parent = uow.transition_step_execution(parent.id, 0, LifecycleTransition(S.STARTED))
        carried = uow.restart_step_partition_plan(first.parent.id, parent.id)
        uow.commit()
    assert attempt.restart_of_id == first.execution.id
    unfinished = [p for p in read_plan(repo, parent.id) if p.status is S.STARTING]
    assert [p.key for p in unfinished] == ["beta"]
    ran = []
    for partition in unfinished:
        with repo.begin() as uow:
            worker = uow.create_step_execution(attempt.id, names[partition.key])
            uow.commit()
        assert worker.counts == counts(10)  # taken over from the failed attempt
        partition = assign(repo, partition, worker.id)
        run_worker(repo, clock, worker.id, S.COMPLETED, "BETA_COMPLETED", counts(1000))
        complete(repo, partition, worker.id)
        ran.append(worker.id)
    with repo.begin() as uow:
        aggregated = uow.aggregate_step_partitions(parent.id, parent.version)
        uow.commit()
    assert (aggregated.status, aggregated.exit_code) == (S.COMPLETED, "ALPHA_COMPLETED")
    assert aggregated.counts == counts(1 + 100 + 10 + 1000)
    final = {p.key: p for p in read_plan(repo, parent.id)}
    assert all(p.status is S.COMPLETED for p in final.values())
    assert final["alpha"].worker_step_execution_id == first.workers[names["alpha"]].id
    assert final["gamma"].worker_step_execution_id == first.workers[names["gamma"]].id
    assert final["beta"].worker_step_execution_id == ran[0]
    assert len(carried) == 3


# -- query budgets --------------------------------------------------------------------------


def _keys(size: int) -> list[str]:
    return [f"part-{i:04}" for i in range(size)]


def _budget(repo: Repository, clock: FixedClock, size: int) -> dict[str, list[str]]:
    """Statements of each whole-plan operation for a plan of ``size`` partitions."""
    family = make_family(repo, clock, job=f"budget_{size}")
    with repo.begin() as uow:
        sql = {
            "create": sql_of(
                lambda: uow.create_step_partition_plan(family.parent.id, entries(*_keys(size)))
            )
        }
        uow.commit()
    with repo.begin() as uow:
        sql["read"] = sql_of(lambda: uow.step_partition_plan(family.parent.id))
    # Every partition COMPLETED by one worker each, set up set-based to keep the test fast.
    with repo.begin() as uow:
        workers = [uow.create_step_execution(family.execution.id, f"w{i}") for i in range(size)]
        uow.commit()
    for partition, worker in zip(read_plan(repo, family.parent.id), workers, strict=True):
        models.StepPartition.objects.filter(pk=partition.id).update(
            worker_step_execution_id=worker.id,
            status="COMPLETED",
            exit_code="COMPLETED",
            read_count=1,
        )
    with repo.begin() as uow:
        sql["aggregate"] = sql_of(
            lambda: uow.aggregate_step_partitions(family.parent.id, family.parent.version)
        )
        uow.commit()
    move(repo, repo_get(repo, family.execution.id), S.FAILED, clock=clock)
    target = _restart_attempt_parent(repo, clock, family, fail_job=False)
    with repo.begin() as uow:
        sql["restart"] = sql_of(
            lambda: uow.restart_step_partition_plan(family.parent.id, target.id)
        )
        uow.commit()
    assert len(read_plan(repo, target.id)) == size
    assert step(repo, family.parent.id).counts.read == size
    return sql


@pytest.mark.adapter
def test_whole_plan_operations_take_as_many_statements_for_1024_partitions_as_for_1(repo, clock):
    one, full = _budget(repo, clock, 1), _budget(repo, clock, 1024)
    assert {name: len(sql) for name, sql in one.items()} == {
        "create": 3,
        "read": 1,
        "aggregate": 4,
        "restart": 4,
    }
    assert {name: len(sql) for name, sql in full.items()} == {
        name: len(sql) for name, sql in one.items()
    }
    assert full["create"][-1].startswith("INSERT")
    assert full["restart"][-1].startswith("INSERT")


@pytest.mark.adapter
def test_assign_is_four_statements_and_complete_is_three(repo, clock, contract):
    """The parent and the worker are locked together, in id order (one statement:
    the global lock order of step rows), then the partition."""
    worker = contract.workers["worker"].id
    zeta = plan(repo, contract.parent.id, "zeta")["zeta"]
    with repo.begin() as uow:
        assign_sql = sql_of(lambda: uow.assign_step_partition(zeta.id, 0, worker))
        uow.commit()
    run_worker(repo, clock, worker, S.COMPLETED, "COMPLETED", counts(1))
    with repo.begin() as uow:
        complete_sql = sql_of(lambda: uow.complete_step_partition(zeta.id, 1, worker))
        uow.commit()
    assert [s.split()[0] for s in assign_sql] == ["SELECT"] * 3 + ["UPDATE"]
    assert [s.split()[0] for s in complete_sql] == ["SELECT"] * 2 + ["UPDATE"]
    for both in (assign_sql[0], complete_sql[0]):
        assert both.startswith('SELECT "ob_step_execution"."id" AS "id"')
        assert "ORDER BY 1 ASC" in both
    if on_postgres():
        # Step rows are read with their execution's claimant: only they are locked.
        for locking in (*assign_sql[:2], *complete_sql[:2]):
            assert locking.endswith(
                ("FOR NO KEY UPDATE", 'FOR NO KEY UPDATE OF "ob_step_execution"')
            ), locking


@pytest.mark.adapter
def test_aggregation_locks_the_partitions_in_key_byte_order(repo, clock):
    family = partitioned_outcomes(repo, clock, {"b": (S.COMPLETED, ZERO), "B": (S.COMPLETED, ZERO)})
    with repo.begin() as uow:
        sql = sql_of(lambda: uow.aggregate_step_partitions(family.parent.id, family.parent.version))
    lock = sql[1]
    assert "ob_step_partition" in lock
    if on_postgres():
        assert 'COLLATE "C"' in lock
        assert lock.endswith("FOR NO KEY UPDATE")


@pytest.mark.adapter
@pytest.mark.postgres
def test_byte_order_holds_under_a_linguistic_database_collation(repo, clock):
    """The test cluster's collation (C.UTF-8) happens to be byte order; production
    databases often are not. Switch the column to ICU's root collation (inside the
    test transaction, rolled back afterwards) and check reads and the fold still go by
    bytes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE ob_step_partition ALTER COLUMN partition_key "
            'TYPE varchar(128) COLLATE "und-x-icu"'
        )
    keys = ["a", "B", "é", "Z", "_"]
    family = partitioned_outcomes(repo, clock, {k: (S.COMPLETED, ZERO) for k in keys})
    database_order = list(
        models.StepPartition.objects.filter(step_execution_id=family.parent.id)
        .order_by("partition_key")
        .values_list("partition_key", flat=True)
    )
    byte_order = ["B", "Z", "_", "a", "é"]
    assert database_order != byte_order
    assert [p.key for p in read_plan(repo, family.parent.id)] == byte_order
    assert aggregate(repo, family).exit_code == "B_COMPLETED"
