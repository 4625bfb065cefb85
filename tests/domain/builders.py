"""Builders for the pure-domain tests: instants, metadata and executions in a given status.

The setup follows contract scenario 2.1: created at 100 s, started at 101 s unless
STARTING, ended at 102 s when finished, failure (USER_COMPONENT, 41) when FAILED.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureCategory,
    FailureSummary,
    JobExecution,
)

S = BatchStatus
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_I64 = 2**63 - 1

# Written out here (contract §2) rather than read from the code under test.
FINISHED = frozenset({S.STOPPED, S.FAILED, S.COMPLETED, S.ABANDONED})
UNRESOLVED = frozenset({S.STARTING, S.STARTED, S.STOPPING, S.UNKNOWN})
CUSTOM_EXIT = "CUSTOM_EXIT"


def at(seconds: float) -> datetime:
    """A timezone-aware UTC instant ``seconds`` after the epoch."""
    return EPOCH + timedelta(seconds=seconds)


def failure(failure_id: int = 41) -> FailureSummary:
    return FailureSummary(FailureCategory.USER_COMPONENT, failure_id)


def metadata_in(
    status: BatchStatus,
    *,
    exit_code: str = CUSTOM_EXIT,
    counts: ExecutionCounts | None = None,
    failure_summary: FailureSummary | None = None,
) -> ExecutionMetadata:
    """Metadata in ``status`` with the timestamps of contract scenario 2.1."""
    started = None if status is S.STARTING else at(101)
    ended = at(102) if status in FINISHED else None
    if failure_summary is None and status is S.FAILED:
        failure_summary = failure(41)
    return ExecutionMetadata(
        status=status,
        exit_code=exit_code,
        timestamps=ExecutionTimestamps(at(100), started, ended),
        counts=counts or ExecutionCounts(),
        failure=failure_summary,
    )


def job_execution(
    status: BatchStatus,
    *,
    execution_id: int = 31,
    instance_id: int = 30,
    version: int = 0,
    attempt: int = 1,
    metadata: ExecutionMetadata | None = None,
) -> JobExecution:
    """Job execution ``execution_id`` of instance ``instance_id`` in ``status``."""
    metadata = metadata or metadata_in(status)
    return JobExecution(
        id=execution_id,
        metadata=metadata,
        version=version,
        updated_at=metadata.timestamps.ended_at or at(101),
        job_instance_id=instance_id,
        job_name="daily_import",
        attempt=attempt,
        definition_id=1,
    )
