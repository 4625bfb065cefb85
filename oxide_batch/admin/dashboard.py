"""The dashboard: executions by status per day, unresolved executions with a
one-click path to the recover confirmation, recent failures by category, the
step timeline of one execution and the partition grid of a partitioned step.
Every query is bounded and indexed (see :mod:`oxide_batch.selectors`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from oxide_batch import selectors
from oxide_batch.admin import svg
from oxide_batch.admin.actions import EXECUTION_ACTIONS, action_url
from oxide_batch.admin.base import can, can_view, change_url
from oxide_batch.admin.display import badge, human, when
from oxide_batch.domain.failures import failure_help

UNRESOLVED_SHOWN = 20


def dashboard_view(site: admin.AdminSite, request: HttpRequest) -> HttpResponse:
    if not (can_view(request) or request.user.has_perm("oxide_batch.view_jobexecution")):
        raise PermissionDenied
    now = timezone.now()
    stale_after: timedelta = settings.OXIDE_BATCH_RECOVERY_STALE_AFTER
    days = [
        (now - timedelta(days=offset)).date()
        for offset in range(selectors.CONSOLE_WINDOW_DAYS - 1, -1, -1)
    ]
    by_day = selectors.executions_by_day(now=now)
    unresolved = selectors.unresolved_executions(
        now=now, inactive_for=stale_after, limit=UNRESOLVED_SHOWN
    )
    operate = can(request, EXECUTION_ACTIONS["recover"].permission)
    unresolved_rows = [
        {
            "id": view.id,
            "link": change_url("jobexecution", view.id),
            "badge": badge(view.status.value),
            "version": view.version,
            "recover": action_url(EXECUTION_ACTIONS["recover"], [view.id]) if operate else None,
            "job": view.execution.job_name,
            "attempt": view.execution.attempt,
            "activity": when(view.last_activity_at, now),
            "owner": "owner recorded" if view.owner_recorded else "no owner",
        }
        for view in unresolved
    ]
    failures = [
        {**row, "help": failure_help(row["failure_category"] or "")}
        for row in selectors.recent_failures_by_category(now=now)
    ]
    execution_id = _int(request.GET.get("execution")) or (
        unresolved[0].id if unresolved else selectors.latest_partitioned_execution()
    )
    steps: list[dict[str, Any]] = []
    grid: Any = None
    step_id = _int(request.GET.get("step"))
    if execution_id is not None:
        steps = selectors.step_timeline(execution_id)
        if step_id is None:
            step_id = selectors.partitioned_step_of(execution_id)
    if step_id is None:
        grid_execution = selectors.latest_partitioned_execution()
        step_id = selectors.partitioned_step_of(grid_execution) if grid_execution else None
    if step_id is not None:
        grid = svg.partition_grid(
            selectors.partition_grid(step_id), link=lambda pk: change_url("steppartition", pk)
        )
    context = {
        **site.each_context(request),
        "title": "Batch dashboard",
        "now": when(now, now),
        "stale_after": human(stale_after),
        "bars": svg.status_bars(by_day, days=days),
        "unresolved": unresolved_rows,
        "failures": failures,
        "execution_id": execution_id,
        "timeline": svg.timeline(steps, now=now, link=lambda pk: change_url("stepexecution", pk))
        if execution_id is not None
        else None,
        "step_id": step_id,
        "grid": grid,
    }
    return TemplateResponse(request, "admin/oxide_batch/dashboard.html", context)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and int(text) > 0 else None
