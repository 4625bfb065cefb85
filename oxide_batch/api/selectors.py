"""Read-only selectors of the API: one query each, ``.values()`` rows, no COUNT.

Writes never happen here (they go through the repository's units of work).
What the domain values lack — an execution's stop/owner/observation columns
and its definition, an instance's hold — is read here. Database faults are
mapped to the repository's typed errors by the API's exception handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Q, QuerySet, Subquery

from oxide_batch import models  # noqa: TID251  (read-only selectors)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import (
    JobExecutionNotFound,
    JobInstanceNotFound,
    StepExecutionNotFound,
)
from oxide_batch.domain.evidence import latest_activity, lease_expiry
from oxide_batch.domain.execution import JobExecution, JobInstance, StepExecution
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.repository.audit import RECORD_COLUMNS, record_from_row
from oxide_batch.repository.control import newest_step_write
from oxide_batch.repository.port import UnitOfWork
from oxide_batch.repository.records import (
    INSTANCE_COLUMNS,
    JOB_EXECUTION_COLUMNS,
    STEP_EXECUTION_COLUMNS,
    Row,
    instance_from_row,
    job_execution_from_row,
    step_execution_from_row,
)
from oxide_batch.repository.retention import RECORD_COLUMNS as RETENTION_RECORD_COLUMNS
from oxide_batch.repository.retention import retention_record_from_row as retention_record_from_row

EXTRA_COLUMNS = (
    "stop_requested_at",
    "last_observed_at",
    "last_activity_at",
    "newest_step_write_at",
    "owner_recorded",
    "definition__job_name",
    "definition__revision",
    "definition__manifest_format",
    "definition__manifest_digest",
)
HOLD_COLUMNS = ("hold_actor", "hold_reason_code", "hold_placed_at")


@dataclass(frozen=True)
class DefinitionRef:
    revision: str
    format: int
    digest: str


@dataclass(frozen=True)
class LeaseRef:
    """An owner's lease (contract §2.5.3): its TTL and when it expires."""

    ttl_seconds: int
    expires_at: datetime


@dataclass(frozen=True)
class ExecutionExtras:
    """What the API shows of an execution beyond the domain value.

    ``last_activity_at`` is contract §2.5.3's activity: the latest runtime write, owner
    observation or step write (a chunk commit moves it; ``updated_at``, the
    row's last versioned write, does not). ``lease`` is the owner's lease while
    the execution is active and an owner is recorded (``None`` otherwise)."""

    stop_requested_at: datetime | None
    owner_recorded: bool
    last_observed_at: datetime | None
    last_activity_at: datetime
    definition: DefinitionRef | None
    lease: LeaseRef | None = None

    @property
    def stop_requested(self) -> bool:
        return self.stop_requested_at is not None


@dataclass(frozen=True)
class ExecutionRecord:
    execution: JobExecution
    extras: ExecutionExtras


@dataclass(frozen=True)
class HoldRef:
    actor: str
    reason_code: str
    placed_at: datetime


@dataclass(frozen=True)
class InstanceRecord:
    instance: JobInstance
    hold: HoldRef | None


# -- executions ---------------------------------------------------------------------


def _owner_recorded() -> ExpressionWrapper[Any]:
    # Only whether a token is recorded: the token itself is never read.
    return ExpressionWrapper(Q(owner_token__isnull=False), output_field=BooleanField())


def executions() -> QuerySet[Any, dict[str, Any]]:
    """Every execution as ``.values()`` rows with its extras (one query, a join
    on the definition and a subquery for the newest step write); compose
    filters, then order."""
    rows: QuerySet[Any, dict[str, Any]] = models.JobExecution.objects.annotate(
        owner_recorded=_owner_recorded(), newest_step_write_at=newest_step_write()
    ).values(*JOB_EXECUTION_COLUMNS, *EXTRA_COLUMNS)
    return rows


def extras_from_row(row: Row, execution: JobExecution) -> ExecutionExtras:
    definition = None
    if row["definition__job_name"] is not None:  # the legacy definition shows as null
        definition = DefinitionRef(
            revision=row["definition__revision"],
            format=row["definition__manifest_format"],
            digest=row["definition__manifest_digest"],
        )
    owner_recorded = bool(row["owner_recorded"])
    # NULL only for a row written outside the adapter: its updated_at.
    activity = latest_activity(
        row["last_activity_at"] or execution.updated_at, row["newest_step_write_at"]
    )
    ttl = batch_settings.LEASE_TTL
    expires = lease_expiry(execution.status, owner_recorded, activity, ttl)
    return ExecutionExtras(
        stop_requested_at=row["stop_requested_at"],
        owner_recorded=owner_recorded,
        last_observed_at=row["last_observed_at"],
        last_activity_at=activity,
        definition=definition,
        lease=None if expires is None else LeaseRef(int(ttl.total_seconds()), expires),
    )


def execution_record_from_row(row: Row) -> ExecutionRecord:
    execution = job_execution_from_row(row)
    return ExecutionRecord(execution, extras_from_row(row, execution))


def execution_record(execution_id: int) -> ExecutionRecord:
    """One execution with its extras (one query); ``JobExecutionNotFound``."""
    row = executions().filter(pk=execution_id).first()
    if row is None:
        raise JobExecutionNotFound(id=execution_id)
    return execution_record_from_row(row)


def with_extras(execution: JobExecution, uow: UnitOfWork | None = None) -> ExecutionRecord:
    """The extras of an execution a repository call just returned: from the row
    that call locked and wrote (``uow.execution_image``) when it read them
    there, else one query in the caller's unit of work (so it sees that write)."""
    image = uow.execution_image(execution.id) if uow is not None else None
    row: Row | None
    if image is not None:
        row = {**image, "owner_recorded": image["owner_token"] is not None}
    else:
        row = (
            models.JobExecution.objects.filter(pk=execution.id)
            .annotate(owner_recorded=_owner_recorded(), newest_step_write_at=newest_step_write())
            .values(*EXTRA_COLUMNS)
            .first()
        )
    if row is None:
        raise JobExecutionNotFound(id=execution.id)
    return ExecutionRecord(execution, extras_from_row(row, execution))


def job_name_of(path_key: str, pk: int) -> str | None:
    """The job name of the object a path names (``instance_id``,
    ``execution_id``, ``step_id``, ``partition_id``), or ``None`` when there is
    none: one indexed read (a join for a step). Job names never change."""
    rows: Any
    if path_key == "instance_id":
        rows = models.JobInstance.objects.filter(pk=pk).values_list("job_name", flat=True)
    elif path_key == "execution_id":
        rows = models.JobExecution.objects.filter(pk=pk).values_list("job_name", flat=True)
    elif path_key == "step_id":
        rows = models.StepExecution.objects.filter(pk=pk).values_list(
            "job_execution__job_name", flat=True
        )
    elif path_key == "partition_id":
        rows = models.StepPartition.objects.filter(pk=pk).values_list(
            "job_instance__job_name", flat=True
        )
    else:
        raise ValueError(f"not a path id: {path_key}")
    found: str | None = rows.first()
    return found


def instance_exists(instance_id: int) -> bool:
    return models.JobInstance.objects.filter(pk=instance_id).exists()


def execution_exists(execution_id: int) -> bool:
    return models.JobExecution.objects.filter(pk=execution_id).exists()


# -- instances ----------------------------------------------------------------------


def instances() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.JobInstance.objects.values(
        *INSTANCE_COLUMNS, *HOLD_COLUMNS
    )
    return rows


def instance_record_from_row(row: Row) -> InstanceRecord:
    hold = None
    if row["hold_placed_at"] is not None:
        hold = HoldRef(row["hold_actor"], row["hold_reason_code"], row["hold_placed_at"])
    return InstanceRecord(instance_from_row(row), hold)


def instance_record(instance_id: int) -> InstanceRecord:
    """One instance with its hold (one query); ``JobInstanceNotFound``."""
    row = instances().filter(pk=instance_id).first()
    if row is None:
        raise JobInstanceNotFound(id=instance_id)
    return instance_record_from_row(row)


# -- steps --------------------------------------------------------------------------


def steps() -> QuerySet[Any, dict[str, Any]]:
    """Step rows without their payload columns."""
    rows: QuerySet[Any, dict[str, Any]] = models.StepExecution.objects.values(
        *STEP_EXECUTION_COLUMNS
    )
    return rows


def step_from_row(row: Row) -> StepExecution:
    return step_execution_from_row(row)


def step(step_id: int) -> StepExecution:
    """One step without its payloads (one query); ``StepExecutionNotFound``."""
    row = steps().filter(pk=step_id).first()
    if row is None:
        raise StepExecutionNotFound(id=step_id)
    return step_from_row(row)


# -- audit (append-only; newest first by id through the keyset pagination) ----------

RECOVERY_DECISION_COLUMNS = (
    "id",
    "job_instance_id",
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
)


def recovery_decisions() -> QuerySet[Any, dict[str, Any]]:
    """Decisions with ``operation_id``: the one APPLIED RECOVER request of the same
    execution at the observed version (a recovery applies once per execution and
    version), by a subquery on ``ob_operator_execution``; null without one."""
    request = models.OperatorRequest.objects.filter(
        job_execution_id=OuterRef("job_execution_id"),
        action="RECOVER",
        outcome="APPLIED",
        observed_version=OuterRef("execution_version"),
    ).order_by("id")
    rows: QuerySet[Any, dict[str, Any]] = models.RecoveryDecision.objects.annotate(
        operation_id=Subquery(request.values("operation_id")[:1])
    ).values(*RECOVERY_DECISION_COLUMNS, "operation_id")
    return rows


def operator_requests() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.OperatorRequest.objects.values(*RECORD_COLUMNS)
    return rows


def operator_record_from_row(row: Row) -> OperatorRecord:
    return record_from_row(dict(row))


def retention_records() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.RetentionRecord.objects.values(
        *RETENTION_RECORD_COLUMNS
    )
    return rows
