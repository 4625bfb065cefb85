"""The dashboard: executions by status per day, unresolved executions with a
one-click path to the recover confirmation, recent failures by category, the
step timeline of one execution and the partition grid of a partitioned step.
Every query is bounded and indexed (see :mod:`oxide_batch.selectors.dashboard`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin import svg
from oxide_batch.admin.actions.selection import action_url
from oxide_batch.admin.applicable import EXECUTION_ACTIONS
from oxide_batch.admin.base import can, can_view, can_view_payload, change_url, parse_id
from oxide_batch.admin.display import LogPlace, ago, badge, human, logs_url, when
from oxide_batch.admin.failure_detail import failure_line
from oxide_batch.conf import batch_settings
from oxide_batch.domain.failures import failure_help
from oxide_batch.roles import VIEW_BATCH, perm
from oxide_batch.selectors.console import owner_names
from oxide_batch.selectors.dashboard import (
    CONSOLE_WINDOW_DAYS,
    executions_by_day,
    latest_partitioned_execution,
    partition_grid,
    partitioned_step_of,
    step_timeline,
)
from oxide_batch.selectors.failure_details import newest_failures
from oxide_batch.selectors.failures import FAILED_WITHIN, recent_failures_by_category
from oxide_batch.selectors.unresolved import unresolved_executions

#: The failure-category filter's value for failures recorded without one.
NO_CATEGORY = "none"

UNRESOLVED_SHOWN = 20
# An operator turns the periodic reload on (``?refresh=60``) and off: a page that
# reloads by itself, with no way to stop it, fails WCAG 2.2.1 (axe: meta-refresh).
REFRESH_SECONDS = 60


def dashboard_view(site: admin.AdminSite, request: HttpRequest) -> HttpResponse:
    if not (can_view(request) or request.user.has_perm("oxide_batch.view_jobexecution")):
        # The full permission name: the console's 403 page names it.
        raise PermissionDenied(perm(VIEW_BATCH))
    now = timezone.now()
    stale_after = batch_settings.RECOVERY_STALE_AFTER
    days = [
        (now - timedelta(days=offset)).date() for offset in range(CONSOLE_WINDOW_DAYS - 1, -1, -1)
    ]
    by_day = executions_by_day(now=now)
    unresolved = unresolved_executions(
        now=now,
        inactive_for=stale_after,
        limit=UNRESOLVED_SHOWN,
        lease_ttl=batch_settings.LEASE_TTL,
    )
    operate = can(request, EXECUTION_ACTIONS["recover"].permission)
    claimants = owner_names([view.id for view in unresolved if view.owner_recorded])
    unresolved_rows = [
        {
            "id": view.id,
            "link": change_url("jobexecution", view.id),
            "badge": badge(view.status.value),
            "version": view.version,
            "recover": action_url(EXECUTION_ACTIONS["recover"], [view.id]) if operate else None,
            "job": view.execution.job_name,
            "attempt": view.execution.attempt,
            "activity": when(view.activity_at, now),
            "owner": _owner(view.owner_recorded, view.id, claimants),
            "stop": _stop(view.stop_requested_at, now),
        }
        for view in unresolved
    ]
    changelist = reverse("admin:oxide_batch_jobexecution_changelist")
    failures = [
        {
            **row,
            "help": failure_help(row["failure_category"] or ""),
            "url": changelist
            + "?"
            + urlencode(
                {
                    "triage": "failed24h",
                    "failure_category": row["failure_category"] or NO_CATEGORY,
                }
            ),
        }
        for row in recent_failures_by_category(now=now)
    ]
    payload_reader = can_view_payload(request)
    newest = [
        {
            **row,
            "link": change_url("jobexecution", row["id"]),
            "failed": when(row["failed_at"], now),
            "why": failure_line(row["failure_type"], row.get("failure_message_head")),
            "logs": _newest_failure_logs(row),
        }
        for row in newest_failures(now - FAILED_WITHIN, with_message=payload_reader)
    ]
    execution_id = _int(request.GET.get("execution")) or (
        unresolved[0].id if unresolved else latest_partitioned_execution()
    )
    steps: list[dict[str, Any]] = []
    grid: Any = None
    step_id = _int(request.GET.get("step"))
    if execution_id is not None:
        steps = step_timeline(execution_id)
        if step_id is None:
            step_id = partitioned_step_of(execution_id)
    if step_id is None:
        grid_execution = latest_partitioned_execution()
        step_id = partitioned_step_of(grid_execution) if grid_execution else None
    if step_id is not None:
        grid = svg.partition_grid(
            partition_grid(step_id), link=lambda pk: change_url("steppartition", pk)
        )
    auto_refresh = request.GET.get("refresh") == str(REFRESH_SECONDS)
    context = {
        **site.each_context(request),
        "title": "Batch dashboard",
        "as_of": _as_of(now),
        "stale_after": human(stale_after),
        "lease_ttl": human(batch_settings.LEASE_TTL),
        "refresh_seconds": REFRESH_SECONDS if auto_refresh else None,
        "refresh_url": _query(request, refresh=str(REFRESH_SECONDS) if auto_refresh else None),
        "refresh_on_url": _query(request, refresh=str(REFRESH_SECONDS)),
        "refresh_off_url": _query(request, refresh=None),
        "bars": svg.status_bars(by_day, days=days),
        "unresolved": unresolved_rows,
        "failures": failures,
        "newest_failures": newest,
        "execution_id": execution_id,
        "timeline": svg.timeline(steps, now=now, link=lambda pk: change_url("stepexecution", pk))
        if execution_id is not None
        else None,
        "step_id": step_id,
        "grid": grid,
    }
    return TemplateResponse(request, "admin/oxide_batch/dashboard.html", context)


def _owner(recorded: bool, pk: int, claimants: dict[int, str | None]) -> str:
    """Who claimed an unresolved row: the claimant's username."""
    if not recorded:
        return "no owner"
    name = claimants.get(pk)
    return f"user {name}" if name else "owner recorded (account gone)"


def _stop(requested_at: datetime | None, now: datetime) -> SafeString:
    """An unresolved row's stop request: when, and that the runtime has not
    confirmed it (it is still unresolved)."""
    if requested_at is None:
        return format_html("{}", "—")
    return format_html(
        '<span class="ob-badge ob-warn">{}</span> {}', "STOP REQUESTED", ago(requested_at, now)
    )


def _as_of(now: datetime) -> SafeString:
    """``17:39:35 UTC on 2026-12-01``: the moment the page was read, absolute."""
    utc = now.astimezone(UTC)
    return format_html(
        '<time datetime="{}">{}</time> on {}',
        utc.isoformat(timespec="seconds"),
        utc.strftime("%H:%M:%S UTC"),
        utc.date().isoformat(),
    )


def _query(request: HttpRequest, **changes: str | None) -> str:
    """This page's query string with ``changes`` applied (``None`` removes a key)."""
    query = request.GET.copy()
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return f"?{query.urlencode()}" if query else "?"


def _int(text: str | None) -> int | None:
    return parse_id(text)


def _newest_failure_logs(row: dict[str, Any]) -> str | None:
    """ "Open the logs" of a newest failure (decision 316), from its row's own
    columns; ``None`` without a template, or for a failure a recovery decision
    wrote (no log holds its id)."""
    if not row["failure_id"] or row["recovery_decision_id"] is not None:
        return None
    return logs_url(
        row["failure_id"],
        execution_id=row["id"],
        job_name=row["job_name"],
        place=LogPlace(
            host=row["worker_host"], started_at=row["started_at"], ended_at=row["ended_at"]
        ),
    )
