"""What an execution's case file reads besides its row and its proposal:
the steps of its timeline, its recovery decisions, its operators' stop and
abandon requests and its instance's hold records — one bounded query each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Exists, OuterRef

from oxide_batch import models  # noqa: TID251 (the model layer)

TIMELINE_STEPS = 50


TIMELINE_DECISIONS = 5


TIMELINE_REQUESTS = 10


TIMELINE_HOLDS = 10

R = TypeVar("R", models.OperatorRequest, models.RetentionRecord)


@dataclass(frozen=True)
class CaseRecords:
    steps: list[models.StepExecution]
    decisions: list[models.RecoveryDecision]
    requests: list[models.OperatorRequest]
    holds: list[models.RetentionRecord]


def case_records(obj: Any) -> CaseRecords:
    """The records of the execution ``obj`` (a row of
    :func:`~oxide_batch.selectors.console.execution_list`): four queries."""
    steps = timeline_steps(obj.pk)
    decisions = list(
        models.RecoveryDecision.objects.filter(job_execution_id=obj.pk).order_by("id")[
            :TIMELINE_DECISIONS
        ]
    )
    requests = applied_changes(
        models.OperatorRequest,
        ("STOP", "ABANDON"),
        TIMELINE_REQUESTS,
        job_execution_id=obj.pk,
    )
    holds = applied_changes(
        models.RetentionRecord,
        ("HOLD", "RELEASE_HOLD"),
        TIMELINE_HOLDS,
        job_instance_id=obj.job_instance_id,
        applied_at__gte=obj.created_at,
    )
    return CaseRecords(steps, decisions, requests, holds)


def applied_changes(model: type[R], actions: tuple[str, ...], limit: int, **where: Any) -> list[R]:
    """The newest audited requests of ``model`` among ``actions`` that were
    applied and changed something (a no-op or a refusal is no event on a
    timeline), narrowed by ``where``: at most ``limit``, newest first."""
    return list(
        model.objects.filter(action__in=actions, outcome="APPLIED", changed=True, **where).order_by(
            "-id"
        )[:limit]
    )


def timeline_steps(execution_id: int) -> list[models.StepExecution]:
    """The steps of the execution in creation order, partition workers left
    out (their partitions are on the step's page), at most :data:`TIMELINE_STEPS`."""
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    return list(
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .exclude(Exists(is_worker))
        .order_by("id")
        .only(*models.STEP_TIMELINE, "last_activity_at", "recovery_decision_id")[:TIMELINE_STEPS]
    )


CASE_NOTIFICATIONS = 20


def execution_notifications(execution_id: int) -> list[dict[str, Any]]:
    """The notification events of the execution, oldest first, each with its
    deliveries (rule, state, attempts, last error) — an event no rule wanted
    comes once with no delivery: one query (a LEFT JOIN), at most
    :data:`CASE_NOTIFICATIONS` + 1 rows (the last says more were left off)."""
    rows = (
        models.NotificationEvent.objects.filter(job_execution_id=execution_id)
        .order_by("id", "deliveries__id")
        .values(
            "id",
            "kind",
            "occurred_at",
            "dispatched_at",
            "deliveries__id",
            "deliveries__state",
            "deliveries__attempts",
            "deliveries__last_error",
            "deliveries__rule__name",
        )[: CASE_NOTIFICATIONS + 1]
    )
    return [dict(row) for row in rows]
