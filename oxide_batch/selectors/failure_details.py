"""Reads of failures' details (contract §2, "Failure detail"): the one of an
execution or a step, and the newest of each execution of a list — each one
query on an index of ``ob_failure_detail``, never a read per row."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Case, CharField, OuterRef, QuerySet, Subquery, When
from django.db.models.functions import Substr

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


# What a list cell shows of a message: its first line, read from this much.
MESSAGE_HEAD_CHARS = 300
# The exception types the list's filter offers: those of the newest details.
TYPE_CHOICES_FROM = 500


def _own_detail() -> QuerySet[models.FailureDetail]:
    return models.FailureDetail.objects.filter(
        job_execution_id=OuterRef("pk"), step_execution_id=None
    ).order_by("-id")


def failure_detail_annotations(*, with_message: bool) -> dict[str, Any]:
    """The newest own detail of each execution row of a list, as annotations
    (a scalar subquery on ``ob_detail_execution``, for a failed row only — a
    page's rows, never the count): ``failure_type`` and, for a reader who may
    see it, ``failure_message_head`` (the message's first characters)."""

    def when_failed(values: QuerySet[Any]) -> Case:
        return Case(
            When(failure_category__isnull=False, then=Subquery(values[:1])),
            default=None,
            output_field=CharField(),
        )

    annotations: dict[str, Any] = {"failure_type": when_failed(_own_detail().values("type"))}
    if with_message:
        head = _own_detail().annotate(head=Substr("message", 1, MESSAGE_HEAD_CHARS))
        annotations["failure_message_head"] = when_failed(head.values("head"))
    return annotations


def with_failure_type(queryset: QuerySet[Any], failure_type: str) -> QuerySet[Any]:
    """The executions one of whose failures (their own or a step's) has the
    exception type ``failure_type`` (exact): a range on ``ob_detail_type``."""
    matching = models.FailureDetail.objects.filter(type=failure_type)
    return queryset.filter(pk__in=matching.values("job_execution_id"))


def recent_failure_types() -> list[str]:
    """The exception types of the newest details, sorted (one bounded query)."""
    newest = models.FailureDetail.objects.order_by("-id").values_list("type", flat=True)
    return sorted({found for found in newest[:TYPE_CHOICES_FROM] if found})


NEWEST_FAILURES_SHOWN = 5


def newest_failures(cutoff: datetime, *, with_message: bool) -> list[dict[str, Any]]:
    """The newest executions that failed at or after ``cutoff`` (at most
    ``NEWEST_FAILURES_SHOWN``, on ``ob_execution_failed``), each with its
    failure's type (and message head, :func:`failure_detail_annotations`) —
    the dashboard's "newest failures". One query."""
    rows = (
        models.JobExecution.objects.filter(failed_at__gte=cutoff)
        .annotate(**failure_detail_annotations(with_message=with_message))
        .order_by("-failed_at", "-id")
        .values(
            "id",
            "job_name",
            "attempt",
            "failure_category",
            "failed_at",
            "failure_type",
            # Where its text is (the log link, decision 316): the row's own columns.
            "failure_id",
            "recovery_decision_id",
            "worker_host",
            "started_at",
            "ended_at",
            *(["failure_message_head"] if with_message else []),
        )[:NEWEST_FAILURES_SHOWN]
    )
    return list(rows)
