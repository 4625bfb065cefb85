"""Reads of failures' details (contract §2, "Failure detail"): the one of an
execution or a step, and the newest of each execution of a list — each one
query on an index of ``ob_failure_detail``, never a read per row."""

from __future__ import annotations

from collections.abc import Iterable

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.repository.failure_details import DETAIL_COLUMNS, detail_from_row


def failure_detail(
    job_execution_id: int, step_execution_id: int | None = None
) -> FailureDetail | None:
    """The newest kept detail of the execution's own failure (or of its step's)."""
    rows = models.FailureDetail.objects.filter(
        job_execution_id=job_execution_id, step_execution_id=step_execution_id
    )
    row = rows.order_by("-id").values(*DETAIL_COLUMNS).first()
    return None if row is None else detail_from_row(row)


def execution_failure_details(job_execution_ids: Iterable[int]) -> dict[int, FailureDetail]:
    """The newest kept detail of each execution's own failure, by execution id
    (absent: none) — one query for a page of executions."""
    ids = sorted(set(job_execution_ids))
    if not ids:
        return {}
    rows = (
        models.FailureDetail.objects.filter(job_execution_id__in=ids, step_execution_id=None)
        .order_by("job_execution_id", "-id")
        .values("job_execution_id", *DETAIL_COLUMNS)
    )
    found: dict[int, FailureDetail] = {}
    for row in rows:
        found.setdefault(row["job_execution_id"], detail_from_row(row))
    return found
