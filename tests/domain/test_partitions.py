"""Partition keys, plans and the key-ordered aggregation (contract §2.4, contract 10.7, 10.13)."""

from __future__ import annotations

import itertools

import pytest

from oxide_batch.domain import BatchStatus, ExecutionCounts
from oxide_batch.domain.errors import (
    CountExhausted,
    DuplicatePartitionKey,
    EmptyName,
    EmptyPartitionPlan,
    InvalidEnvelope,
    NameTooLong,
    PartitionAggregationIncomplete,
    PartitionPlanTooLarge,
)
from oxide_batch.domain.partitions import (
    PartitionPlanEntry,
    StepPartition,
    aggregate_partitions,
    key_bytes,
    validate_partition_key,
    validate_plan,
)
from oxide_batch.domain.state import PARTITION_CONTEXT_LIMITS, EnvelopeKind, StateEnvelope

S = BatchStatus
MAX_I64 = 2**63 - 1
PARENT = 7
_ids = itertools.count(1)


def child(
    key: str,
    status: BatchStatus,
    exit_code: str = "UNKNOWN",
    counts: ExecutionCounts | None = None,
    *,
    worker: int | None = None,
) -> StepPartition:
    pid = next(_ids)
    return StepPartition(
        id=pid,
        job_instance_id=1,
        step_execution_id=PARENT,
        key=key,
        ordinal=1,
        status=status,
        exit_code=exit_code,
        counts=counts or ExecutionCounts(),
        version=2,
        worker_step_execution_id=None if status is S.STARTING else (worker or 100 + pid),
    )


ALPHA = child("alpha", S.FAILED, "ALPHA_FAILED", ExecutionCounts(1, 2, 3, 4, 5, 6), worker=11)
ZETA = child("zeta", S.FAILED, "ZETA_FAILED", ExecutionCounts(10, 20, 30, 40, 50, 60), worker=12)


# -- 10.13 aggregation rules ------------------------------------------------------------


@pytest.mark.parametrize(
    "children", [[ALPHA, ZETA], [ZETA, ALPHA]], ids=["alpha-first", "zeta-first"]
)
def test_10_13_the_aggregate_is_a_key_ordered_fold_independent_of_input_order(children):
    aggregate = aggregate_partitions(PARENT, children)
    assert (aggregate.status, aggregate.exit_code) == (S.FAILED, "ALPHA_FAILED")
    assert aggregate.counts == ExecutionCounts(11, 22, 33, 44, 55, 66)
    assert aggregate.selected_worker_step_execution_id == 11


def test_10_13_an_unknown_child_makes_the_aggregate_unknown():
    middle = child("middle", S.UNKNOWN, "UNKNOWN")
    for children in itertools.permutations([ALPHA, ZETA, middle]):
        aggregate = aggregate_partitions(PARENT, children)
        assert (aggregate.status, aggregate.exit_code) == (S.UNKNOWN, "UNKNOWN")
        assert aggregate.selected_worker_step_execution_id == middle.worker_step_execution_id


def test_10_13_counts_above_the_bigint_bound_are_count_exhausted():
    big = child("a", S.COMPLETED, counts=ExecutionCounts(read=MAX_I64))
    one = child("b", S.COMPLETED, counts=ExecutionCounts(read=1))
    with pytest.raises(CountExhausted):
        aggregate_partitions(PARENT, [big, one])
    at_bound = child("c", S.COMPLETED, counts=ExecutionCounts(read=MAX_I64 - 1))
    assert aggregate_partitions(PARENT, [at_bound, one]).counts.read == MAX_I64


@pytest.mark.parametrize("status", [S.STARTING, S.STARTED, S.STOPPING, S.ABANDONED])
def test_10_13_a_child_that_is_not_runtime_terminal_is_aggregation_incomplete(status):
    with pytest.raises(PartitionAggregationIncomplete) as error:
        aggregate_partitions(PARENT, [ALPHA, child("m", status)])
    assert (error.value.step_execution_id, error.value.status) == (PARENT, status)


def test_severity_is_completed_stopped_failed_unknown():
    ladder = [S.COMPLETED, S.STOPPED, S.FAILED, S.UNKNOWN]
    for rank, status in enumerate(ladder):
        children = [child(f"k{i}", s, f"E{i}") for i, s in enumerate(ladder[: rank + 1])]
        assert aggregate_partitions(PARENT, children).status is status


def test_the_exit_code_is_the_first_in_key_byte_order_with_the_aggregate_status():
    # "Z" (0x5A) sorts before "a" (0x61) in bytes, not in a linguistic collation.
    lower = child("a", S.STOPPED, "LOWER")
    upper = child("Z", S.STOPPED, "UPPER")
    done = child("0", S.COMPLETED, "DONE")
    assert aggregate_partitions(PARENT, [lower, done, upper]).exit_code == "UPPER"


def test_an_empty_aggregation_is_refused():
    with pytest.raises(EmptyPartitionPlan):
        aggregate_partitions(PARENT, [])


# -- plans and keys ------------------------------------------------------------------------


def test_a_plan_has_1_to_1024_entries_with_distinct_keys():
    validate_plan([PartitionPlanEntry(f"k{i}") for i in range(1024)])
    with pytest.raises(EmptyPartitionPlan):
        validate_plan([])
    with pytest.raises(PartitionPlanTooLarge) as error:
        validate_plan([PartitionPlanEntry(f"k{i}") for i in range(1025)])
    assert error.value.max == 1024
    with pytest.raises(DuplicatePartitionKey):
        validate_plan(
            [PartitionPlanEntry("same"), PartitionPlanEntry("x"), PartitionPlanEntry("same")]
        )


def test_keys_are_distinct_byte_for_byte_without_normalisation():
    validate_plan([PartitionPlanEntry("\u00e9"), PartitionPlanEntry("e\u0301")])
    assert key_bytes("\u00e9") != key_bytes("e\u0301")


@pytest.mark.parametrize("key", ["k", " spaced ", "tab\tand\nnewline", "\x00", "é" * 64, "x" * 128])
def test_a_key_is_1_to_128_utf8_bytes_and_nothing_else_is_checked(key):
    assert validate_partition_key(key) == key


def test_an_empty_or_long_key_is_refused():
    with pytest.raises(EmptyName):
        validate_partition_key("")
    with pytest.raises(NameTooLong) as error:
        validate_partition_key("é" * 64 + "x")
    assert error.value.max_bytes == 128
    with pytest.raises(NameTooLong):
        PartitionPlanEntry("x" * 129)


def test_an_entry_never_shows_its_key_or_context():
    entry = PartitionPlanEntry("secret-range", StateEnvelope("s", 1, {"token": "hidden"}))
    assert "secret" not in repr(entry)
    assert "hidden" not in repr(entry)


def test_a_partition_context_is_at_most_4_kib():
    base = StateEnvelope("s", 1, {"p": ""})
    padding = 4096 - len(base.canonical())

    def raw(extra: int) -> dict[str, object]:
        return {"schema": "s", "schema_version": 1, "payload": {"p": "x" * (padding + extra)}}

    fits = StateEnvelope.from_json(
        raw(0), kind=EnvelopeKind.PARTITION_CONTEXT, limits=PARTITION_CONTEXT_LIMITS
    )
    assert len(fits.canonical()) == 4096
    with pytest.raises(InvalidEnvelope) as error:
        StateEnvelope.from_json(
            raw(1), kind=EnvelopeKind.PARTITION_CONTEXT, limits=PARTITION_CONTEXT_LIMITS
        )
    assert error.value.kind == "partition context"
