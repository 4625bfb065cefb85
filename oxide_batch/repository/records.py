"""Rows ↔ domain values. The adapter reads ``values()`` dicts, never model instances."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from oxide_batch.domain.execution import (
    COUNT_FIELDS,
    SKIP_COUNT_FIELDS,
    STEP_COUNT_FIELDS,
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureSummary,
    JobExecution,
    JobInstance,
    StepExecution,
    failed_at_after,
    stopping_at_after,
)
from oxide_batch.domain.parameters import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.domain.recovery import RecoveryDecision
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity

Row = Mapping[str, Any]

#: The worker identity's columns (decision 310), on executions and steps alike.
WORKER_COLUMNS = ("worker_host", "worker_pid", "worker_name", "worker_client")

METADATA_COLUMNS = (
    "id",
    "status",
    "exit_code",
    "failure_category",
    "failure_id",
    "created_at",
    "started_at",
    "ended_at",
    "updated_at",
    "version",
    "read_count",
    "processed_count",
    "written_count",
    "filtered_count",
    "committed_count",
    "rolled_back_count",
)
JOB_EXECUTION_COLUMNS = (
    *METADATA_COLUMNS,
    "job_instance_id",
    "job_name",
    "attempt",
    "restart_of_id",
    "definition_id",
    "upgrade_id",
    "recovery_decision_id",
)
# A job execution as its control operations and the API's answers read it.
CONTROL_COLUMNS = (
    *JOB_EXECUTION_COLUMNS,
    "stop_requested_at",
    "stop_requested_by",
    "owner_token",
    "owner_user_id",
    "last_observed_at",
    "last_activity_at",
    "failed_at",
    "stopping_at",
    # The lost-write marker and its resolution (contract §2.5.14): the API shows them.
    "lost_write",
    "lost_write_resolution",
    # The lease TTL the claim was granted (contract §2.5.3).
    "lease_ttl",
    # Who runs it (decision 310), written with the claim.
    *WORKER_COLUMNS,
)
#: A step's skip counts (decision 400): on the step row, not the execution's.
SKIP_COUNT_COLUMNS = tuple(f"{name}_count" for name in SKIP_COUNT_FIELDS)
STEP_EXECUTION_COLUMNS = (
    *METADATA_COLUMNS,
    *SKIP_COUNT_COLUMNS,
    "job_instance_id",
    "job_execution_id",
    "step_name",
    "node_id",
    "recovery_decision_id",
    "last_activity_at",
    *WORKER_COLUMNS,
)
INSTANCE_COLUMNS = ("id", "job_name", "identifying_parameters", "created_at")
DECISION_COLUMNS = (
    "id",
    "job_execution_id",
    "execution_version",
    "prior_status",
    "resulting_status",
    "reason_code",
    "operator_reference",
    "evidence_digest",
    "decided_at",
    "resolved_step_ids",
    "eligibility",
    "override_note",
    "evidence",
)


def parameters_to_json(key: JobInstanceKey) -> list[dict[str, Any]]:
    return [
        {
            "name": parameter.name,
            "type": parameter.type.value,
            # Integers as decimal strings: u64 values survive any JSON reader.
            "value": str(parameter.value)
            if parameter.type in (ParameterType.I64, ParameterType.U64)
            else parameter.value,
        }
        for parameter in key.parameters
    ]


def _parameter_from_json(item: Row) -> JobParameter:
    type_ = ParameterType(item["type"])
    value = item["value"]
    if type_ in (ParameterType.I64, ParameterType.U64):
        value = int(value)
    return JobParameter(item["name"], type_, value)


def instance_from_row(row: Row) -> JobInstance:
    key = JobInstanceKey.of(
        row["job_name"], (_parameter_from_json(item) for item in row["identifying_parameters"])
    )
    return JobInstance(id=row["id"], key=key, created_at=row["created_at"])


# Enum members by value: ``BatchStatus(value)`` does the same lookup through the
# enum machinery (and still runs for a value that is not here, to raise the same).
_STATUSES: Mapping[Any, BatchStatus] = {status.value: status for status in BatchStatus}
_CATEGORIES: Mapping[Any, FailureCategory] = {
    category.value: category for category in FailureCategory
}
_COUNT_COLUMNS = tuple(f"{name}_count" for name in COUNT_FIELDS)
_STEP_COUNT_COLUMNS = tuple(f"{name}_count" for name in STEP_COUNT_FIELDS)


def _metadata(row: Row, count_columns: tuple[str, ...] = _COUNT_COLUMNS) -> ExecutionMetadata:
    failure = None
    category = row["failure_category"]
    if category is not None:
        failure = FailureSummary(
            _CATEGORIES.get(category) or FailureCategory(category), row["failure_id"]
        )
    status = row["status"]
    return ExecutionMetadata(
        status=_STATUSES.get(status) or BatchStatus(status),
        exit_code=row["exit_code"],
        timestamps=ExecutionTimestamps(row["created_at"], row["started_at"], row["ended_at"]),
        counts=ExecutionCounts(*[row[column] for column in count_columns]),
        failure=failure,
    )


def job_execution_from_row(row: Row) -> JobExecution:
    return JobExecution(
        id=row["id"],
        metadata=_metadata(row),
        version=row["version"],
        updated_at=row["updated_at"],
        job_instance_id=row["job_instance_id"],
        job_name=row["job_name"],
        attempt=row["attempt"],
        definition_id=row["definition_id"],
        restart_of_id=row["restart_of_id"],
        upgrade_id=row["upgrade_id"],
        recovery_decision_id=row["recovery_decision_id"],
    )


def step_execution_from_row(row: Row) -> StepExecution:
    return StepExecution(
        id=row["id"],
        metadata=_metadata(row, _STEP_COUNT_COLUMNS),
        version=row["version"],
        updated_at=row["updated_at"],
        job_instance_id=row["job_instance_id"],
        job_execution_id=row["job_execution_id"],
        step_name=row["step_name"],
        node_id=row["node_id"],
        recovery_decision_id=row["recovery_decision_id"],
        last_activity_at=row.get("last_activity_at"),
        worker=WorkerIdentity.from_row(row),
    )


def metadata_columns(
    metadata: ExecutionMetadata, version: int, updated_at: datetime, *, step: bool = False
) -> dict[str, Any]:
    """The columns a lifecycle write sets (everything but identity); a
    ``step``'s skip counts too."""
    failure = metadata.failure
    columns: dict[str, Any] = {
        "status": metadata.status.value,
        "exit_code": metadata.exit_code,
        "failure_category": failure.category.value if failure else None,
        "failure_id": failure.failure_id if failure else None,
        "created_at": metadata.timestamps.created_at,
        "started_at": metadata.timestamps.started_at,
        "ended_at": metadata.timestamps.ended_at,
        "updated_at": updated_at,
        "version": version,
    }
    counts = metadata.counts.as_step_dict() if step else metadata.counts.as_dict()
    columns.update({f"{name}_count": value for name, value in counts.items()})
    return columns


def changed_columns(before: Row, after: Mapping[str, Any]) -> dict[str, Any]:
    """Only what differs, so an UPDATE writes no more than it must."""
    return {column: value for column, value in after.items() if before.get(column) != value}


def execution_columns(
    row: Row, metadata: ExecutionMetadata, version: int, now: datetime
) -> dict[str, Any]:
    """What a job execution's move writes: the columns that change,
    ``failed_at`` the first time it moves to FAILED (a transition's or a
    recovery's) and ``stopping_at`` the first time it moves to STOPPING."""
    return changed_columns(
        row,
        {
            **metadata_columns(metadata, version, now),
            "failed_at": failed_at_after(row["failed_at"], metadata.status, now),
            "stopping_at": stopping_at_after(row["stopping_at"], metadata.status, now),
        },
    )


def decision_from_row(row: Row) -> RecoveryDecision:
    return RecoveryDecision(
        id=row["id"],
        job_execution_id=row["job_execution_id"],
        execution_version=row["execution_version"],
        prior_status=BatchStatus(row["prior_status"]),
        resulting_status=BatchStatus(row["resulting_status"]),
        reason_code=row["reason_code"],
        operator_reference=row["operator_reference"],
        evidence_digest=bytes.fromhex(row["evidence_digest"]),
        decided_at=row["decided_at"],
        resolved_step_ids=tuple(row["resolved_step_ids"] or ()),
        eligibility=row.get("eligibility"),
        override_note=row.get("override_note"),
        evidence=row.get("evidence"),
    )
