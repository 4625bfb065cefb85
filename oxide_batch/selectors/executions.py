"""An execution as the API and the commands show it: the domain value with
its extras (stop, owner, activity, lease, definition) as the API answers
it, or as an :class:`~oxide_batch.domain.evidence.ExecutionView` (the
commands, the dashboard). One query each, ``.values()`` rows, no COUNT.

What the domain value lacks is read here, the derived facts (newest step
write, owner recorded, last activity) from :mod:`oxide_batch.facts`. Database
faults are mapped to the repository's typed errors by the API's exception
handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import QuerySet

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import JobExecutionNotFound
from oxide_batch.domain.evidence import (
    ExecutionView,
    granted_ttl,
    lease_expiry,
    lost_write_view,
)
from oxide_batch.domain.execution import JobExecution
from oxide_batch.domain.worker import WorkerIdentity, worker_data
from oxide_batch.facts import last_activity_of, newest_step_write, owner_recorded, owner_recorded_of
from oxide_batch.repository.control import claimant_name, execution_view_from_row
from oxide_batch.repository.port import UnitOfWork
from oxide_batch.repository.records import (
    CONTROL_COLUMNS,
    JOB_EXECUTION_COLUMNS,
    WORKER_COLUMNS,
    Row,
    job_execution_from_row,
)

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
    "lost_write",
    "lost_write_resolution",
    "lease_ttl",
    *WORKER_COLUMNS,
    "owner_user_id",
)


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
    # contract §2.5.14: ``{expected_version, stored_version, recorded_at, resolved_at}``.
    lost_write: dict[str, Any] | None = None
    # Who runs it (decision 310): ``{host, pid, name, client, user}`` or ``None``.
    worker: dict[str, Any] | None = None

    @property
    def stop_requested(self) -> bool:
        return self.stop_requested_at is not None


@dataclass(frozen=True)
class ExecutionRecord:
    execution: JobExecution
    extras: ExecutionExtras


def executions() -> QuerySet[Any, dict[str, Any]]:
    """Every execution as ``.values()`` rows with its extras (one query, a join
    on the definition and a subquery for the newest step write); compose
    filters, then order."""
    rows: QuerySet[Any, dict[str, Any]] = models.JobExecution.objects.annotate(
        owner_recorded=owner_recorded(),
        newest_step_write_at=newest_step_write(),
        owner_name=claimant_name(DEFAULT_DB_ALIAS),
    ).values(*JOB_EXECUTION_COLUMNS, *EXTRA_COLUMNS, "owner_name")
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
    activity = last_activity_of(
        row["last_activity_at"], execution.updated_at, row["newest_step_write_at"]
    )
    # The TTL the claim was granted, not this process's setting (contract §2.5.3).
    ttl = granted_ttl(row.get("lease_ttl"), batch_settings.LEASE_TTL)
    expires = lease_expiry(execution.status, owner_recorded, activity, ttl)
    return ExecutionExtras(
        stop_requested_at=row["stop_requested_at"],
        owner_recorded=owner_recorded,
        last_observed_at=row["last_observed_at"],
        last_activity_at=activity,
        definition=definition,
        lease=None if expires is None else LeaseRef(int(ttl.total_seconds()), expires),
        lost_write=lost_write_view(row.get("lost_write"), row.get("lost_write_resolution")),
        worker=worker_data(WorkerIdentity.from_row(row), row.get("owner_name")),
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


def with_extras(
    execution: JobExecution, uow: UnitOfWork | None = None, user: Any = None
) -> ExecutionRecord:
    """The extras of an execution a repository call just returned: from the row
    that call locked and wrote (``uow.execution_image``) when it read them
    there, else one query in the caller's unit of work (so it sees that write).
    ``user``: the request's, whose username the image's claimant is when it
    claimed it (a runtime write is its claimant's); another claimant's name
    costs the query."""
    image = uow.execution_image(execution.id) if uow is not None else None
    row: Row | None = None
    if image is not None:
        claimant = image.get("owner_user_id")
        if claimant is None or (user is not None and claimant == user.pk):
            name = None if claimant is None else user.get_username()
            row = {**image, "owner_recorded": owner_recorded_of(image), "owner_name": name}
    if row is None:
        row = (
            models.JobExecution.objects.filter(pk=execution.id)
            .annotate(
                owner_recorded=owner_recorded(),
                newest_step_write_at=newest_step_write(),
                owner_name=claimant_name(DEFAULT_DB_ALIAS),
            )
            .values(*EXTRA_COLUMNS, "owner_name")
            .first()
        )
    if row is None:
        raise JobExecutionNotFound(id=execution.id)
    return ExecutionRecord(execution, extras_from_row(row, execution))


def execution_exists(execution_id: int) -> bool:
    return models.JobExecution.objects.filter(pk=execution_id).exists()


# -- views (the commands, the dashboard) ---------------------------------------------


def views(queryset: QuerySet[models.JobExecution]) -> QuerySet[Any, dict[str, Any]]:
    """Rows for :class:`ExecutionView` with the newest step write, so a view's
    ``activity_at`` is contract §2.5.3's activity."""
    rows: QuerySet[Any, dict[str, Any]] = queryset.annotate(
        newest_step_write_at=newest_step_write()
    ).values(*CONTROL_COLUMNS, "newest_step_write_at")
    return rows


def execution_view(execution_id: int) -> ExecutionView:
    """One execution with its stop, owner and activity evidence (one query);
    ``JobExecutionNotFound``."""
    row = views(models.JobExecution.objects.filter(pk=execution_id)).first()
    if row is None:
        raise JobExecutionNotFound(id=execution_id)
    return execution_view_from_row(row)


def instance_execution_views(job_instance_id: int) -> list[ExecutionView]:
    """The attempts of an instance in attempt order, as views (one query; an
    unknown instance has none)."""
    rows = views(models.JobExecution.objects.filter(job_instance_id=job_instance_id))
    return [execution_view_from_row(row) for row in rows.order_by("attempt")]


def job_name_of_execution(execution_id: int) -> str:
    """The job name of an execution (one query; empty when it is gone)."""
    name = (
        models.JobExecution.objects.filter(pk=execution_id)
        .values_list("job_name", flat=True)
        .first()
    )
    return name or ""
