"""The console's list pages: what each adds to its model admin's queryset, and
the facts a page computes from a row of it. A ``ModelAdmin.get_queryset``
passes its queryset here; the list's filters, ordering and pagination compose
on what comes back, so the count stays the paginator's one plain query.

Every annotation is a scalar subquery, not a join: the paginator's count skips
it, and it is evaluated for the page's rows only.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, F, OuterRef, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.status import UNRESOLVED_STATUSES
from oxide_batch.facts import last_activity_of, newest_step_write, owner_recorded
from oxide_batch.selectors.failures import failure_fate_annotations, failure_id_given


def execution_list(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """The executions' list and change page: the owner flag (never the token),
    the instance's parameters, the newest step write (contract §2.5.3: a
    step's runtime write is activity — never the steps' ``updated_at``, which a
    recovery moves), what became of a failure and whether its id was given,
    the claimant's username (``owner_name``) and the actor of the recovery
    decision that resolved it (``recovery_actor``)."""
    annotated: QuerySet[Any] = queryset.defer("owner_token").annotate(
        owner_recorded=owner_recorded(),
        instance_parameters=Subquery(
            models.JobInstance.objects.filter(pk=OuterRef("job_instance_id")).values(
                "identifying_parameters"
            )[:1]
        ),
        newest_step_write=newest_step_write(),
        **failure_fate_annotations(),
        failure_id_given=failure_id_given(),
        owner_name=owner_name(),
        recovery_actor=Subquery(
            models.RecoveryDecision.objects.filter(pk=OuterRef("recovery_decision_id")).values(
                "operator_reference"
            )[:1]
        ),
    )
    return annotated


def owner_name() -> Subquery:
    """The username of the account that claimed the execution in
    ``OuterRef``'s row (``owner_user_id``: an id, not a foreign key — the row
    outlives the account, and then this is ``None``)."""
    user_model: Any = get_user_model()
    return Subquery(
        user_model.objects.filter(pk=OuterRef("owner_user_id")).values(user_model.USERNAME_FIELD)[
            :1
        ]
    )


def owner_names(ids: Collection[int]) -> dict[int, str | None]:
    """The claimant's username of each execution in ``ids`` that has one
    recorded (one query; ``None`` when the account is gone)."""
    rows = (
        models.JobExecution.objects.filter(pk__in=list(ids), owner_user_id__isnull=False)
        .annotate(owner_name=owner_name())
        .values_list("pk", "owner_name")
    )
    return {int(pk): name for pk, name in rows}


def execution_activity(row: Any) -> datetime:
    """The last activity (contract §2.5.3) of a row of :func:`execution_list`."""
    return last_activity_of(row.last_activity_at, row.updated_at, row.newest_step_write)


def step_list(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """The steps' list and change page, without the payloads: the execution's
    status (a step of a finished execution never reads "running") and whether
    the failure's id was given."""
    annotated: QuerySet[Any] = queryset.defer("checkpoint", "context").annotate(
        execution_status=Subquery(
            models.JobExecution.objects.filter(pk=OuterRef("job_execution_id")).values("status")[:1]
        ),
        failure_id_given=failure_id_given(),
    )
    return annotated


def partition_list(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """The partitions' list and change page, without the context payload."""
    return queryset.defer("context")


def token_list(queryset: QuerySet[models.ApiToken]) -> QuerySet[models.ApiToken]:
    """The API tokens' list, with each token's user in the same query."""
    return queryset.select_related("user")


# -- the confirmation pages of the actions ------------------------------------------


def execution_action_rows(ids: list[int]) -> list[Any]:
    """The selected executions as an action's confirmation page shows them, by
    id (one query; an id with no row is left out)."""
    rows = (
        models.JobExecution.objects.filter(pk__in=ids)
        .order_by("pk")
        .values(
            "id",
            "job_name",
            "attempt",
            "status",
            "version",
            "stop_requested_at",
            "stop_requested_by",
        )
    )
    return list(rows)


def instance_action_rows(ids: list[int]) -> list[Any]:
    """The selected instances with their hold, by id (one query)."""
    rows = (
        models.JobInstance.objects.filter(pk__in=ids)
        .order_by("pk")
        .values("id", "job_name", "hold_actor", "hold_reason_code", "hold_placed_at")
    )
    return list(rows)


# The unfinished steps named per row; the rest are counted.
STEPS_SHOWN = 10
UNFINISHED = sorted(status.value for status in UNRESOLVED_STATUSES)


def unfinished_steps(execution_ids: Collection[int]) -> dict[int, tuple[list[dict[str, Any]], int]]:
    """The unfinished steps (STARTING, STARTED, STOPPING, UNKNOWN) of each
    execution, the first :data:`STEPS_SHOWN` by id with how many there are in
    all — what a recovery resolves to FAILED (one query for every row)."""
    if not execution_ids:
        return {}
    found = (
        models.StepExecution.objects.filter(
            job_execution_id__in=list(execution_ids), status__in=UNFINISHED
        )
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("job_execution_id")], order_by=F("id").asc()),
            total=Window(Count("id"), partition_by=[F("job_execution_id")]),
        )
        .filter(rank__lte=STEPS_SHOWN)
        .order_by("job_execution_id", "id")
        .values("id", "job_execution_id", "step_name", "status", "total")
    )
    steps: dict[int, tuple[list[dict[str, Any]], int]] = {}
    for step in found:
        shown, _ = steps.get(step["job_execution_id"], ([], 0))
        shown.append(step)
        steps[step["job_execution_id"]] = (shown, step["total"])
    return steps


#: The console's search prefixes for who runs an execution (decision 311).
WORKER_SEARCH = {"host:": "worker_host", "worker:": "worker_name"}


def worker_search(queryset: QuerySet[Any], term: str) -> QuerySet[Any] | None:
    """``host:worker-3`` / ``worker:loader-2`` → the executions run on that
    host / by that worker name (exact, on the partial indexes
    ``ob_execution_worker_host`` / ``ob_execution_worker_name``, newest first
    as the list orders); ``None`` for any other term."""
    for prefix, column in WORKER_SEARCH.items():
        if term.startswith(prefix):
            value = term.removeprefix(prefix).strip()
            return queryset.filter(**{column: value}) if value else queryset.none()
    return None
