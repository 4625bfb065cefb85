"""What the console's change pages show beside their row: its linked rows
(an execution's steps, flow decisions and operator requests; an instance's
attempts; a step's partitions) and the audit rows a record names. One
bounded, indexed query each: a linked list reads ``limit`` rows (the page
asks one more than it shows, to say there are more)."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, Q, Sum

from oxide_batch import models  # noqa: TID251 (the model layer)

COUNTS = models.COUNT_COLUMNS
OPERATOR_REQUESTS_SHOWN = 20


# -- an execution's page --------------------------------------------------------------


def step_totals(execution_id: int) -> dict[str, Any]:
    """The counts of the execution's steps summed, each record once: a
    partition worker's counts are in its partition and, once aggregated, in
    the manager step, so worker steps are left out. ``None`` for a count no
    step has."""
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    return (
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .exclude(Exists(is_worker))
        .aggregate(**{c: Sum(c) for c in COUNTS})
    )


def execution_steps(execution_id: int, *, limit: int) -> list[models.StepExecution]:
    """The execution's steps in creation order, without their payloads."""
    return list(
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .order_by("id")
        .only("id", "step_name", "status", *COUNTS, "started_at", "ended_at", "version")[:limit]
    )


def flow_decisions(execution_id: int, *, limit: int) -> list[models.FlowDecision]:
    """The execution's flow decisions in sequence order."""
    return list(
        models.FlowDecision.objects.filter(job_execution_id=execution_id)
        .order_by("sequence")
        .only("id", *models.FLOW_TRANSITION)[:limit]
    )


def operator_requests(
    execution_id: int, *, limit: int = OPERATOR_REQUESTS_SHOWN
) -> list[models.OperatorRequest]:
    """The execution's operator requests, newest first."""
    return list(
        models.OperatorRequest.objects.filter(job_execution_id=execution_id).order_by("-id")[:limit]
    )


# -- an instance's page and a step's page ----------------------------------------------


def attempts(instance_id: int, *, limit: int) -> list[models.JobExecution]:
    """The instance's executions, newest attempt first."""
    return list(
        models.JobExecution.objects.filter(job_instance_id=instance_id)
        .order_by("-attempt")
        .only("id", "attempt", "status", "created_at", "started_at", "ended_at", "version")[:limit]
    )


def partitions(step_id: int, *, limit: int) -> list[models.StepPartition]:
    """The step's partitions by ordinal, without their context."""
    return list(
        models.StepPartition.objects.filter(step_execution_id=step_id)
        .order_by("ordinal")
        .only(
            "id",
            "partition_key",
            "ordinal",
            "status",
            *COUNTS,
            "version",
            "retries",
            "worker_step_execution_id",
        )[:limit]
    )


#: What the step page shows of a partition's workers (issue 43).
PARTITION_WORKER_COLUMNS = (
    "id",
    "claimed_partition_id",
    "status",
    "worker_host",
    "worker_pid",
    "last_activity_at",
    "updated_at",
    "lease_ttl",
)


def partition_workers(partition_ids: list[int], current_ids: list[int]) -> list[dict[str, Any]]:
    """The worker steps of these partitions, in id order: every claimed one,
    current and earlier (``ob_step_claimed_partition``), and the current
    worker of each (a local pool's has no claim) — one query for the page."""
    if not partition_ids and not current_ids:
        return []
    return list(
        models.StepExecution.objects.filter(
            Q(claimed_partition_id__in=partition_ids) | Q(pk__in=current_ids)
        )
        .order_by("id")
        .values(*PARTITION_WORKER_COLUMNS)
    )


def stored_checkpoint(step_id: int) -> dict[str, Any]:
    """The step's stored checkpoint text and checksum (``{}`` without a row)."""
    return dict(
        models.StepExecution.objects.filter(pk=step_id)
        .values("checkpoint", "checkpoint_checksum")
        .first()
        or {}
    )


# -- the audit pages ----------------------------------------------------------------


def recover_request_id(execution_id: int, execution_version: int) -> int | None:
    """The applied RECOVER request that made the decision on the execution at
    that version (a recovery applies once per execution and version; the
    ``ob_operator_execution`` index)."""
    found: int | None = (
        models.OperatorRequest.objects.filter(
            job_execution_id=execution_id,
            action="RECOVER",
            outcome="APPLIED",
            observed_version=execution_version,
        )
        .order_by("id")
        .values_list("id", flat=True)
        .first()
    )
    return found


def decision_of(execution_id: int, execution_version: int) -> dict[str, Any] | None:
    """The decision an applied recovery of the execution at that version wrote
    (its unique key): ``{id, eligibility, override_note}``."""
    found: dict[str, Any] | None = (
        models.RecoveryDecision.objects.filter(
            job_execution_id=execution_id, execution_version=execution_version
        )
        .values("id", "eligibility", "override_note")
        .first()
    )
    return found
