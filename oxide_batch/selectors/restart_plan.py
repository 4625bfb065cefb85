"""What a restart will do, read (issue 40): the rows
:func:`~oxide_batch.domain.restart_plan.restart_plan` decides from, in three
queries whatever the number of attempts and steps — the execution with its
definition's manifest, the instance's latest attempt with its unresolved
lost-write marker, and the newest row per step name across the attempts with
its node's start count — and, for a restart attempt's case file, the steps it
skipped (one query)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    Subquery,
)

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.definitions import FLOW_FORMATS
from oxide_batch.domain.errors import JobExecutionNotFound
from oxide_batch.domain.execution import STEP_COUNT_FIELDS, ExecutionCounts
from oxide_batch.domain.restart_plan import (
    EarlierStep,
    PlannedStep,
    PlanRefusal,
    RestartPlan,
    restart_plan,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.plans import stored_plan
from oxide_batch.repository.records import JOB_EXECUTION_COLUMNS, job_execution_from_row

#: At most this many steps in a plan (partition workers are steps too); the
#: plan says when more were left off.
PLAN_STEPS = 500
#: At most this many skipped steps on a restart attempt's case file.
SKIPPED_STEPS = 200
# A step's counts, its skip counts too: what a resumed step takes over (decision 400).
COUNT_COLUMNS = tuple(f"{name}_count" for name in STEP_COUNT_FIELDS)
FLOW_COLUMNS = ("definition__manifest_format", "definition__manifest")


#: A restart is planned step by step only for these (any other is refused whole).
PLANNED_STATUSES = frozenset({BatchStatus.FAILED, BatchStatus.STOPPED})


@dataclass(frozen=True)
class PlanRead:
    """A plan with what the read left off (``more``: steps beyond :data:`PLAN_STEPS`)."""

    plan: RestartPlan
    more: bool


def execution_restart_plan(execution_id: int) -> PlanRead:
    """The restart plan of execution ``execution_id`` (``JobExecutionNotFound``):
    three queries (two when the execution is not a FAILED or STOPPED latest
    attempt: its plan is refused whole)."""
    row = (
        models.JobExecution.objects.filter(pk=execution_id)
        .values(*JOB_EXECUTION_COLUMNS, *FLOW_COLUMNS)
        .first()
    )
    if row is None:
        raise JobExecutionNotFound(id=execution_id)
    execution = job_execution_from_row(row)
    attempts = models.JobExecution.objects.filter(job_instance_id=execution.job_instance_id)
    latest_row = (
        attempts.order_by("-attempt")
        # As the launch reads it: an attempt whose lost write no operator resolved.
        .annotate(
            lost_write_of=Subquery(
                attempts.filter(models.UNRESOLVED_LOST_WRITE).order_by("id").values("id")[:1]
            )
        )
        .values(*JOB_EXECUTION_COLUMNS, "lost_write_of")
        .first()
    )
    assert latest_row is not None, "an execution is an attempt of its instance"
    latest = job_execution_from_row(latest_row)
    earlier: list[EarlierStep] = []
    starts: dict[str, int] = {}
    more = False
    if latest.id == execution.id and latest.status in PLANNED_STATUSES:
        earlier, starts, more = newest_steps(execution.job_instance_id)
    flow = None
    if row["definition__manifest_format"] in FLOW_FORMATS:
        flow = stored_plan(row["definition__manifest"])
    plan = restart_plan(
        execution=execution,
        latest=latest,
        lost_write_of=latest_row["lost_write_of"],
        earlier=earlier,
        flow=flow,
        starts=starts,
    )
    return PlanRead(plan, more=more)


def newest_steps(instance_id: int) -> tuple[list[EarlierStep], dict[str, int], bool]:
    """The newest row per step name across the instance's attempts (what a
    restarted step takes over, contract §2.3.2), in creation order, without
    payloads; the start count of each row's node; whether rows were left off
    beyond :data:`PLAN_STEPS`. One query."""
    steps = models.StepExecution.objects.filter(job_instance_id=instance_id)
    newest = steps.values("step_name").annotate(newest=Max("id")).values("newest")
    starts = (
        steps.filter(node_id=OuterRef("node_id"))
        .order_by()
        .values("node_id")
        .annotate(starts=Count("id"))
        .values("starts")
    )
    unfinished_partition = models.StepPartition.objects.filter(
        worker_step_execution_id=OuterRef("pk")
    ).exclude(status=BatchStatus.COMPLETED.value)
    rows = list(
        models.StepExecution.objects.filter(pk__in=Subquery(newest))
        .annotate(
            attempt=F("job_execution__attempt"),
            has_checkpoint=ExpressionWrapper(
                Q(checkpoint__isnull=False), output_field=BooleanField()
            ),
            partition_rerun=Exists(unfinished_partition),
            starts=Subquery(starts),
        )
        .order_by("id")
        .values(
            "id",
            "job_execution_id",
            "attempt",
            "step_name",
            "node_id",
            "status",
            "has_checkpoint",
            "partition_rerun",
            "starts",
            *COUNT_COLUMNS,
        )[: PLAN_STEPS + 1]
    )
    more = len(rows) > PLAN_STEPS
    rows = rows[:PLAN_STEPS]
    return (
        [_earlier(row) for row in rows],
        {row["node_id"]: row["starts"] or 0 for row in rows},
        more,
    )


def _earlier(row: dict[str, Any]) -> EarlierStep:
    return EarlierStep(
        id=row["id"],
        job_execution_id=row["job_execution_id"],
        attempt=row["attempt"],
        step_name=row["step_name"],
        node_id=row["node_id"],
        status=BatchStatus(row["status"]),
        counts=ExecutionCounts(*(row[column] for column in COUNT_COLUMNS)),
        has_checkpoint=bool(row["has_checkpoint"]),
        partition_rerun=bool(row["partition_rerun"]),
    )


SKIPPED_STATUSES = (BatchStatus.COMPLETED.value, BatchStatus.ABANDONED.value)


def skipped_steps(obj: Any) -> tuple[list[dict[str, Any]], bool]:
    """The steps a restart attempt (``obj``: a job execution row with
    ``job_instance_id``, ``attempt`` and ``restart_of_id``) did not run because
    an earlier attempt COMPLETED (or ABANDONED) them: the newest row per step
    name of the earlier attempts, in that status, with no row of that name in
    this attempt — partition workers left out (their partitions are carried
    with their parent). Each with the attempt and execution that completed it,
    oldest first; at most :data:`SKIPPED_STEPS` (and whether more were left
    off). One query; none for a first attempt."""
    if obj.restart_of_id is None:
        return [], False
    earlier = models.StepExecution.objects.filter(
        job_instance_id=obj.job_instance_id, job_execution__attempt__lt=obj.attempt
    )
    newest = earlier.values("step_name").annotate(newest=Max("id")).values("newest")
    ran = models.StepExecution.objects.filter(job_execution_id=obj.pk).values("step_name")
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    rows = list(
        models.StepExecution.objects.filter(pk__in=Subquery(newest), status__in=SKIPPED_STATUSES)
        .exclude(step_name__in=Subquery(ran))
        .exclude(Exists(is_worker))
        .annotate(attempt=F("job_execution__attempt"))
        .order_by("id")
        .values("id", "step_name", "status", "job_execution_id", "attempt", "ended_at")[
            : SKIPPED_STEPS + 1
        ]
    )
    return rows[:SKIPPED_STEPS], len(rows) > SKIPPED_STEPS


def plan_document(read: PlanRead) -> dict[str, Any]:
    """The plan as JSON — the API's answer and ``batch_show --json``'s
    ``restart_plan``, one shape. No payload value is in it (only whether a
    checkpoint is taken over)."""
    plan = read.plan
    return {
        "execution_id": plan.execution_id,
        "restartable": plan.restartable,
        "refusal": _refusal_json(plan.refusal),
        "assumes": "the same definition",
        "steps": [_step_json(step) for step in plan.steps],
        "steps_left_off": read.more,
        "unreached": [_step_json(step) for step in plan.unreached],
    }


def _refusal_json(refusal: PlanRefusal | None) -> dict[str, str] | None:
    return None if refusal is None else {"code": refusal.code, "detail": refusal.detail}


def _step_json(step: PlannedStep) -> dict[str, Any]:
    source = step.source
    return {
        "step_name": step.step_name,
        "node_id": step.node_id,
        "action": step.action.value,
        "reason": step.reason,
        "refusal": _refusal_json(step.refusal),
        "from_step_execution_id": None if source is None else source.id,
        "from_execution_id": None if source is None else source.job_execution_id,
        "from_attempt": None if source is None else source.attempt,
        "status": None if source is None else source.status.value,
        "checkpoint": step.checkpoint,
        "counts": None
        if step.counts is None
        else {name: getattr(step.counts, name) for name in STEP_COUNT_FIELDS},
    }
