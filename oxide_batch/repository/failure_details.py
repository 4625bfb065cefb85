"""A failure's detail in the Django adapter: what a failing transition keeps of
what its runtime sent (contract §2, "Failure detail"; decisions 300-306).

The transition that records the failure writes it, in its own transaction:
one INSERT, only when something is kept. Its locking read then carries the
instance's identifying parameters (``statements.PARAMETERS_EXTRA``), whose
hidden values are scrubbed from the text — no statement of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.failure_detail import (
    DetailLevel,
    FailureDetail,
    hidden_values,
    kept_detail,
)
from oxide_batch.domain.scrub import Scrubber
from oxide_batch.repository.statements import PARAMETERS_EXTRA


def detail_to_keep(failure: FailureSummary | None) -> FailureSummary | None:
    """``failure`` when it carries a detail this deployment keeps (else ``None``:
    the transition is the one it always was)."""
    if failure is None or failure.detail is None:
        return None
    if batch_settings.FAILURE_DETAIL is DetailLevel.OFF:
        return None
    return failure


def scrubbed_detail(failure: FailureSummary, parameters: Any) -> FailureDetail | None:
    """What is stored of ``failure``'s detail, scrubbed of the hidden values of
    ``parameters`` (the instance's stored identifying parameters)."""
    scrubber = Scrubber(
        hidden_values=hidden_values(parameters or [], batch_settings.VISIBLE_PARAMETERS),
        patterns=batch_settings.FAILURE_REDACT,
    )
    return kept_detail(failure.detail, batch_settings.FAILURE_DETAIL, scrubber)


def insert_failure_detail(
    using: str,
    row: Mapping[str, Any],
    failure: FailureSummary,
    *,
    job_execution_id: int,
    step_execution_id: int | None,
    now: datetime,
) -> FailureDetail | None:
    """Keep ``failure``'s detail for the row a transition just wrote (locked
    with ``PARAMETERS_EXTRA``): one INSERT when anything is kept, none otherwise."""
    detail = scrubbed_detail(failure, row.get(PARAMETERS_EXTRA))
    if detail is None:
        return None
    models.FailureDetail.objects.using(using).create(
        job_instance_id=row["job_instance_id"],
        job_execution_id=job_execution_id,
        step_execution_id=step_execution_id,
        failure_id=failure.failure_id,
        type=detail.type,
        message=detail.message,
        traceback=detail.traceback,
        type_truncated=detail.type_truncated,
        message_truncated=detail.message_truncated,
        traceback_truncated=detail.traceback_truncated,
        recorded_at=now,
    )
    return detail


DETAIL_COLUMNS = (
    "type",
    "message",
    "traceback",
    "type_truncated",
    "message_truncated",
    "traceback_truncated",
)


def detail_from_row(row: Mapping[str, Any]) -> FailureDetail:
    return FailureDetail(*(row[column] for column in DETAIL_COLUMNS))


def read_failure_detail(
    using: str, job_execution_id: int, step_execution_id: int | None
) -> FailureDetail | None:
    """The newest kept detail of an execution's own failure (``step_execution_id``
    ``None``) or of one of its steps' — one statement, on an index."""
    rows = models.FailureDetail.objects.using(using).filter(job_execution_id=job_execution_id)
    if step_execution_id is None:
        rows = rows.filter(step_execution_id__isnull=True)
    else:
        rows = rows.filter(step_execution_id=step_execution_id)
    row = rows.order_by("-id").values(*DETAIL_COLUMNS).first()
    return None if row is None else detail_from_row(row)
