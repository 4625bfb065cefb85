"""Step executions as the API shows them (without their payloads)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import StepExecutionNotFound
from oxide_batch.domain.execution import StepExecution
from oxide_batch.repository.records import STEP_EXECUTION_COLUMNS, Row, step_execution_from_row


def steps() -> QuerySet[Any, dict[str, Any]]:
    """Step rows without their payload columns."""
    rows: QuerySet[Any, dict[str, Any]] = models.StepExecution.objects.values(
        *STEP_EXECUTION_COLUMNS
    )
    return rows


def step_from_row(row: Row) -> StepExecution:
    return step_execution_from_row(row)


def step_record(step_id: int) -> StepExecution:
    """One step without its payloads (one query); ``StepExecutionNotFound``."""
    row = steps().filter(pk=step_id).first()
    if row is None:
        raise StepExecutionNotFound(id=step_id)
    return step_from_row(row)


def step_exists(step_id: int) -> bool:
    return models.StepExecution.objects.filter(pk=step_id).exists()
