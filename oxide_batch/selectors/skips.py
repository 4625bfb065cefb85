"""Reads of the skip ledger (contract §2.3.3 "Skips"): a step's skipped items,
an execution's, each one query on an index of ``ob_skip`` (the step's name
by a join on the step's primary key), and the counts the console shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.skips import SkipPhase, SkipRecord
from oxide_batch.domain.status import FailureCategory

SKIP_COLUMNS = (
    "id",
    "step_execution_id",
    "step_execution__step_name",
    "job_execution_id",
    "phase",
    "item",
    "chunk",
    "category",
    "type",
    "message",
    "type_truncated",
    "message_truncated",
    "recorded_at",
)


def step_skips(step_execution_id: int) -> QuerySet[Any]:
    """A step's ledger rows (``values()``), on ``ob_skip_step``."""
    rows: QuerySet[Any] = models.Skip.objects.filter(step_execution_id=step_execution_id).values(
        *SKIP_COLUMNS
    )
    return rows


def execution_skips(job_execution_id: int) -> QuerySet[Any]:
    """An execution's ledger rows, all its steps' (``values()``), on ``ob_skip_execution``."""
    rows: QuerySet[Any] = models.Skip.objects.filter(job_execution_id=job_execution_id).values(
        *SKIP_COLUMNS
    )
    return rows


def skip_from_row(row: Mapping[str, Any]) -> SkipRecord:
    detail = None
    if row["type"] is not None or row["message"] is not None:
        detail = FailureDetail(
            type=row["type"],
            message=row["message"],
            type_truncated=row["type_truncated"],
            message_truncated=row["message_truncated"],
        )
    return SkipRecord(
        id=row["id"],
        step_execution_id=row["step_execution_id"],
        step_name=row["step_execution__step_name"],
        job_execution_id=row["job_execution_id"],
        phase=SkipPhase(row["phase"]),
        item=row["item"],
        chunk=row["chunk"],
        category=FailureCategory(row["category"]),
        detail=detail,
        recorded_at=row["recorded_at"],
    )


def execution_skip_count(job_execution_id: int) -> int:
    """How many items the execution's steps skipped: one COUNT on ``ob_skip_execution``."""
    return models.Skip.objects.filter(job_execution_id=job_execution_id).count()
