"""What failed and what became of it (the console's triage and the
dashboard's categories)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.recovery import FAILURE_ID_GIVEN
from oxide_batch.domain.status import BatchStatus

FAILED_WITHIN = timedelta(hours=24)


def failed_since(cutoff: datetime) -> QuerySet[models.JobExecution]:
    """The executions that failed at or after ``cutoff`` (``failed_at``: set when
    an execution ends FAILED — by its runtime or a recovery — and kept when an
    abandon follows), whatever their status is now. A range on the partial
    index ``ob_execution_failed``. Unordered."""
    return models.JobExecution.objects.filter(failed_at__gte=cutoff)


def later_attempt() -> QuerySet[models.JobExecution]:
    """The later attempts of the instance of the execution in ``OuterRef``,
    newest first (the unique ``(job_instance, attempt)`` index)."""
    return models.JobExecution.objects.filter(
        job_instance_id=OuterRef("job_instance_id"), attempt__gt=OuterRef("attempt")
    ).order_by("-attempt")


def _operator_abandon() -> QuerySet[models.OperatorRequest]:
    """The operator's applied abandon of the execution in ``OuterRef`` (the
    ``ob_operator_execution`` index), newest first."""
    return models.OperatorRequest.objects.filter(
        job_execution_id=OuterRef("pk"), action="ABANDON", outcome="APPLIED", changed=True
    ).order_by("-id")


def failure_id_given() -> Subquery:
    """Whether the failure a recovery decision wrote on a row (its
    ``recovery_decision_id``) carries an id the operator gave — a key of their
    logs — rather than one the server generated (the decision's record says;
    ``None`` without a decision or for one recorded before it did). One scalar
    subquery on the decision's primary key, evaluated for a page's rows only."""
    return Subquery(
        models.RecoveryDecision.objects.filter(pk=OuterRef("recovery_decision_id")).values(
            f"evidence__{FAILURE_ID_GIVEN}"
        )[:1]
    )


def failure_fate_annotations() -> dict[str, Any]:
    """What became of a failure, as annotations of an execution queryset (one
    scalar subquery each, evaluated for a failed row only — a list's page,
    never the paginator's count): the newest later attempt of its instance
    (``later_id``, ``later_attempt``, ``later_status``) and the operator's
    abandon (``abandoned_by``, ``abandoned_at``, ``abandon_reason``). Read by
    :func:`oxide_batch.admin.display.fate`."""

    def when_failed(queryset: QuerySet[Any], column: str, field: Any) -> Case:
        return Case(
            When(failed_at__isnull=False, then=Subquery(queryset.values(column)[:1])),
            default=None,
            output_field=field,
        )

    later, abandon = later_attempt(), _operator_abandon()
    return {
        "later_id": when_failed(later, "id", BigIntegerField()),
        "later_attempt": when_failed(later, "attempt", IntegerField()),
        "later_status": when_failed(later, "status", CharField()),
        "abandoned_by": when_failed(abandon, "actor", CharField()),
        "abandoned_at": when_failed(abandon, "requested_at", DateTimeField()),
        "abandon_reason": when_failed(abandon, "reason_code", CharField()),
    }


def recent_failures_by_category(
    *, now: datetime, within: timedelta = FAILED_WITHIN
) -> list[dict[str, Any]]:
    """``[{failure_category, n, still_failed, abandoned, rerun}]`` of the
    executions that failed within ``within`` of ``now`` (:func:`failed_since`:
    an abandon that followed keeps them here), with what became of them, each
    failure counted once (``still_failed + abandoned + rerun == n``): abandoned
    since (whether or not a later attempt followed), else followed by a later
    attempt of its instance, else still FAILED. One query."""
    rerun = Exists(later_attempt())
    abandoned = Q(status=BatchStatus.ABANDONED.value)
    rows = (
        failed_since(now - within)
        .values("failure_category")
        .annotate(
            n=Count("id"),
            still_failed=Count("id", filter=Q(status=BatchStatus.FAILED.value) & ~Q(rerun)),
            abandoned=Count("id", filter=abandoned),
            rerun=Count("id", filter=Q(rerun) & ~abandoned),
        )
        .order_by("-n", "failure_category")
    )
    return list(rows)
