"""Step partitions: plans, keys, and the key-ordered aggregation (contract §2.4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oxide_batch.domain.errors import (
    DuplicatePartitionKey,
    EmptyName,
    EmptyPartitionPlan,
    NameTooLong,
    PartitionAggregationIncomplete,
    PartitionPlanTooLarge,
)
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus

MAX_PARTITIONS = 1024
MAX_PARTITION_KEY_BYTES = 128
S = BatchStatus
# What a worker must have reached before its partition can be completed/aggregated.
RUNTIME_TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.STOPPED, S.UNKNOWN})
SEVERITY = {S.COMPLETED: 0, S.STOPPED: 1, S.FAILED: 2, S.UNKNOWN: 3}
# A partition may be (re)assigned from these: first run, or a retry.
RETRYABLE = frozenset({S.FAILED, S.STOPPED})


def validate_partition_key(key: str) -> str:
    """1–128 UTF-8 bytes; compared byte for byte, nothing else is checked."""
    if not isinstance(key, str) or not key:
        raise EmptyName(kind="partition key")
    if len(key.encode("utf-8")) > MAX_PARTITION_KEY_BYTES:
        raise NameTooLong(kind="partition key", max_bytes=MAX_PARTITION_KEY_BYTES)
    return key


def key_bytes(key: str) -> bytes:
    return key.encode("utf-8")


@dataclass(frozen=True, repr=False)
class PartitionPlanEntry:
    key: str
    context: StateEnvelope | None = None

    def __post_init__(self) -> None:
        validate_partition_key(self.key)

    def __repr__(self) -> str:
        return "PartitionPlanEntry(key=<redacted>, context=<redacted>)"


def validate_plan(entries: Sequence[PartitionPlanEntry]) -> None:
    """1–1024 entries with distinct keys, else the typed error; checked before any write."""
    if not entries:
        raise EmptyPartitionPlan()
    if len(entries) > MAX_PARTITIONS:
        raise PartitionPlanTooLarge(max=MAX_PARTITIONS)
    if len({key_bytes(entry.key) for entry in entries}) != len(entries):
        raise DuplicatePartitionKey()


@dataclass(frozen=True)
class StepPartition:
    id: int
    job_instance_id: int
    step_execution_id: int
    key: str
    ordinal: int
    status: BatchStatus
    exit_code: str
    counts: ExecutionCounts
    version: int
    worker_step_execution_id: int | None
    # How many times a claim gave it to a new worker after a failed one, in
    # this attempt (issue 43, decision 464).
    retries: int = 0


@dataclass(frozen=True)
class PartitionAggregate:
    status: BatchStatus
    exit_code: str
    counts: ExecutionCounts
    selected_worker_step_execution_id: int


def aggregate_partitions(
    step_execution_id: int, partitions: Iterable[StepPartition]
) -> PartitionAggregate:
    """The parent's outcome: the most severe status (COMPLETED < STOPPED < FAILED <
    UNKNOWN), the exit code of the first partition in key byte order with that
    status, and the summed counts (``CountExhausted`` past 2^63−1).

    Every partition must have a worker and a runtime-terminal status, else
    ``PartitionAggregationIncomplete``. The result does not depend on input order.
    """
    ordered = sorted(partitions, key=lambda p: key_bytes(p.key))
    if not ordered:
        raise EmptyPartitionPlan()
    for partition in ordered:
        if partition.worker_step_execution_id is None or partition.status not in RUNTIME_TERMINAL:
            raise PartitionAggregationIncomplete(
                step_execution_id=step_execution_id, status=partition.status
            )
    status = max((p.status for p in ordered), key=SEVERITY.__getitem__)
    selected = next(p for p in ordered if p.status is status)
    counts = ExecutionCounts()
    for partition in ordered:
        counts = counts.plus(partition.counts)
    assert selected.worker_step_execution_id is not None
    return PartitionAggregate(status, selected.exit_code, counts, selected.worker_step_execution_id)
