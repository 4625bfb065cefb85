"""Rows of ``ob_step_partition`` ↔ domain values, and the one-statement plan insert."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Field

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import (
    CountExhausted,
    FaultStateCorrupt,
    InvalidEnvelope,
    PartitionStateCorrupt,
)
from oxide_batch.domain.execution import COUNT_FIELDS, UNKNOWN_EXIT_CODE, ExecutionCounts
from oxide_batch.domain.partitions import MAX_PARTITIONS, StepPartition
from oxide_batch.domain.state import (
    PARTITION_CONTEXT_LIMITS,
    EnvelopeKind,
    StateEnvelope,
    StoredState,
    StoredStateCorrupt,
    load_stored,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.records import Row

S = BatchStatus
PARTITION_CONTEXT = EnvelopeKind.PARTITION_CONTEXT
COUNT_COLUMNS = tuple(f"{name}_count" for name in COUNT_FIELDS)
ZERO_COUNTS = dict.fromkeys(COUNT_COLUMNS, 0)
PARTITION_COLUMNS = (
    "id",
    "job_instance_id",
    "step_execution_id",
    "worker_step_execution_id",
    "partition_key",
    "ordinal",
    "status",
    "exit_code",
    "version",
    *COUNT_COLUMNS,
    "retries",
)
CONTEXT_COLUMNS = ("context", "context_checksum")
# What a new partition row sets, in INSERT column order.
INSERT_COLUMNS = (
    "job_instance_id",
    "step_execution_id",
    "worker_step_execution_id",
    "partition_key",
    "ordinal",
    "status",
    "exit_code",
    "version",
    *COUNT_COLUMNS,
    *CONTEXT_COLUMNS,
    "retries",
)
# A partition's parent and its worker, locked together (what either check reads).
# A claimed worker's own owner token too (issue 43, decision 462).
STEP_LOCK_COLUMNS = (
    "id",
    "status",
    "exit_code",
    "job_execution_id",
    *COUNT_COLUMNS,
    "owner_token",
)


@dataclass(frozen=True)
class StepPartitionWithContext(StepPartition):
    """A partition with its verified context envelope (the worker's input).

    The domain's ``StepPartition`` has no context field yet; this adds it
    without changing the domain value (``isinstance(p, StepPartition)`` holds).
    """

    # Envelopes hold a dict payload: leave the context out of the hash.
    context: StateEnvelope | None = field(default=None, hash=False)


def partition_context(envelope: StateEnvelope | None) -> StoredState | None:
    """The stored form of a plan entry's context, within the 4 KiB / depth-16 bounds."""
    if envelope is None:
        return None
    bounded = StateEnvelope.from_json(
        envelope.as_json(), kind=PARTITION_CONTEXT, limits=PARTITION_CONTEXT_LIMITS
    )
    return StoredState.of(bounded)


def load_context(row: Row) -> StateEnvelope | None:
    """The verified context of a row; ``PartitionStateCorrupt`` when it does not verify."""
    text, checksum = row["context"], row["context_checksum"]
    if text is None and checksum is None:
        return None
    if text is None or checksum is None:
        raise PartitionStateCorrupt()
    try:
        envelope = load_stored(text, checksum, kind=PARTITION_CONTEXT)
        return StateEnvelope.from_json(
            envelope.as_json(), kind=PARTITION_CONTEXT, limits=PARTITION_CONTEXT_LIMITS
        )
    except (StoredStateCorrupt, InvalidEnvelope):
        raise PartitionStateCorrupt() from None


def carried_context(row: Row) -> StoredState | None:
    """The stored context a restarted plan takes over from ``row``, verified, as stored.

    Taking over state verifies it (contract §2.4.5): a context that does not verify →
    ``FaultStateCorrupt``, like a restarted step's checkpoint. A verified context
    is canonical, so its text and checksum are copied unchanged.
    """
    try:
        envelope = load_context(row)
    except PartitionStateCorrupt:
        raise FaultStateCorrupt() from None
    return None if envelope is None else StoredState(row["context"], row["context_checksum"])


def partition_from_row(row: Row, context: StateEnvelope | None = None) -> StepPartition:
    """Decode a row, failing closed (``PartitionStateCorrupt``) on a broken invariant."""
    try:
        status = BatchStatus(row["status"])
        counts = ExecutionCounts(*(row[column] for column in COUNT_COLUMNS))
    except (ValueError, CountExhausted):
        raise PartitionStateCorrupt() from None
    unassigned = row["worker_step_execution_id"] is None
    if (status is S.STARTING) != unassigned or not 1 <= row["ordinal"] <= MAX_PARTITIONS:
        raise PartitionStateCorrupt()
    return StepPartitionWithContext(
        id=row["id"],
        job_instance_id=row["job_instance_id"],
        step_execution_id=row["step_execution_id"],
        key=row["partition_key"],
        ordinal=row["ordinal"],
        status=status,
        exit_code=row["exit_code"] or UNKNOWN_EXIT_CODE,
        counts=counts,
        version=row["version"],
        worker_step_execution_id=row["worker_step_execution_id"],
        retries=row.get("retries", 0),
        context=context,
    )


def read_partition(row: Row) -> StepPartition:
    """A row read with its context columns: the partition with its verified context."""
    return partition_from_row(row, load_context(row))


def concrete_field(attname: str) -> Field[Any, Any]:
    column = models.StepPartition._meta.get_field(attname)
    assert isinstance(column, Field)
    return column


def counts_columns(counts: ExecutionCounts) -> dict[str, int]:
    return {f"{name}_count": value for name, value in counts.as_dict().items()}


def new_row(
    job_instance_id: int,
    parent_id: int,
    key: str,
    ordinal: int,
    context: StoredState | None,
    carried: StepPartition | None = None,
) -> Row:
    """The INSERT values of one partition: unassigned STARTING, or ``carried`` as is."""
    return {
        "job_instance_id": job_instance_id,
        "step_execution_id": parent_id,
        "worker_step_execution_id": carried.worker_step_execution_id if carried else None,
        "partition_key": key,
        "ordinal": ordinal,
        "status": (carried.status if carried else S.STARTING).value,
        "exit_code": carried.exit_code if carried else UNKNOWN_EXIT_CODE,
        "version": 0,
        **(counts_columns(carried.counts) if carried else ZERO_COUNTS),
        "context": context.text if context else None,
        "context_checksum": context.checksum if context else None,
        "retries": 0,  # a new attempt's plan: no retry yet
    }


def insert_partitions(connection: Any, rows: list[Row]) -> dict[int, int]:
    """One multi-row ``INSERT … RETURNING``; the new ids by ordinal.

    Ordinals are unique within a plan, so the returned rows are matched by
    ordinal rather than by position (row order of RETURNING is unspecified).
    """
    meta = models.StepPartition._meta
    quote = connection.ops.quote_name
    targets = [concrete_field(name) for name in INSERT_COLUMNS]
    columns = ", ".join(quote(target.column) for target in targets)
    placeholders = "(" + ", ".join(["%s"] * len(targets)) + ")"
    params = [
        target.get_db_prep_save(row[name], connection)
        for row in rows
        for name, target in zip(INSERT_COLUMNS, targets, strict=True)
    ]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) "  # nosec B608 # quoted model identifiers
        f"VALUES {', '.join([placeholders] * len(rows))} "
        f"RETURNING {quote('id')}, {quote('ordinal')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    return {int(ordinal): int(pk) for pk, ordinal in returned}
