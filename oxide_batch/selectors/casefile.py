"""What an execution's case file reads besides its row and its proposal:
the steps of its timeline, its recovery decisions, its operators' stop and
abandon requests and its instance's hold records — one bounded query each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef

from oxide_batch import models  # noqa: TID251 (the model layer)

TIMELINE_STEPS = 50


TIMELINE_DECISIONS = 5


TIMELINE_REQUESTS = 10


TIMELINE_HOLDS = 10


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
    requests = list(
        models.OperatorRequest.objects.filter(
            job_execution_id=obj.pk,
            action__in=("STOP", "ABANDON"),
            outcome="APPLIED",
            changed=True,
        ).order_by("-id")[:TIMELINE_REQUESTS]
    )
    holds = list(
        models.RetentionRecord.objects.filter(
            job_instance_id=obj.job_instance_id,
            action__in=("HOLD", "RELEASE_HOLD"),
            outcome="APPLIED",
            changed=True,
            applied_at__gte=obj.created_at,
        ).order_by("-id")[:TIMELINE_HOLDS]
    )
    return CaseRecords(steps, decisions, requests, holds)


def timeline_steps(execution_id: int) -> list[models.StepExecution]:
    """The steps of the execution in creation order, partition workers left
    out (their partitions are on the step's page), at most :data:`TIMELINE_STEPS`."""
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    return list(
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .exclude(Exists(is_worker))
        .order_by("id")
        .only(
            "id",
            "step_name",
            "status",
            "created_at",
            "started_at",
            "ended_at",
            "last_activity_at",
            "recovery_decision_id",
        )[:TIMELINE_STEPS]
    )
