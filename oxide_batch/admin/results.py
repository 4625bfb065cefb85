"""What the confirmation page says about each row after the POST: applied /
replayed / nothing to change with what the row is now (new status, what it was,
the decision with its resolved steps and whether an override made it, links),
or refused with the error code and what it means — a stale row says what it is
now; a row only the override would have recovered, when it was not ticked,
that nothing was done to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import change_url
from oxide_batch.admin.display import human
from oxide_batch.domain.errors import OxideBatchError, RecoveryEvidenceStale, StaleVersion
from oxide_batch.domain.operator import OperatorAction
from oxide_batch.services.audit import Outcome
from oxide_batch.services.retention import RetentionResult


def report_row(
    request: HttpRequest,
    label: str,
    run: Callable[[], Any],
    row_now: Callable[[], str] | None = None,
) -> None:
    """Run one row's service call and say what happened to it — the new state,
    what it was, the decision (with links) — or why not, in words; a stale row
    says what it is now (``row_now``)."""
    try:
        result = run()
    except OxideBatchError as error:
        messages.error(request, f"{label}: refused: {error.code} — {refusal(error, row_now)}")
        return
    if result.outcome is Outcome.REPLAYED:
        messages.info(request, format_html("{}: replayed — {}", label, row_outcome(result)))
    elif result.changed:
        messages.success(request, format_html("{}: applied — {}", label, row_outcome(result)))
    else:
        messages.info(
            request, format_html("{}: nothing to change — {}", label, row_outcome(result))
        )


def report_left_out(request: HttpRequest, label: str) -> None:
    """A row only the override would have recovered, left as it was."""
    messages.info(
        request,
        f"{label}: not recovered — it is not stale yet and the override was not ticked; "
        "nothing was done to it",
    )


def row_outcome(result: Any) -> SafeString:
    """What a row is now: ``FAILED (was STARTED) — decision #12, 2 steps resolved``
    for an execution, the hold for an instance."""
    if isinstance(result, RetentionResult):
        hold = result.hold
        if hold is not None:
            return format_html("held ({}) by {}", hold.reason_code, hold.actor)
        return format_html("{}", "no hold")
    execution = result.execution
    record = result.record
    if execution is None:  # a replay after the purge
        return format_html("{}", "the execution has since been purged")
    now = format_html(
        '<a href="{}">{}</a>', change_url("jobexecution", execution.id), execution.status.value
    )
    if record.prior_status is not None and record.prior_status != execution.status:
        now = format_html("{} (was {})", now, record.prior_status.value)
    if record.action is OperatorAction.STOP and execution.status.is_active:
        now = format_html(
            "{}, stop requested: the runtime stops at its next control observation", now
        )
    decision = result.decision
    if decision is not None:
        resolved = len(decision.resolved_step_ids)
        now = format_html(
            '{} — <a href="{}">decision #{}</a>{}, {} unfinished step{} resolved to FAILED',
            now,
            change_url("recoverydecision", decision.id),
            decision.id,
            " (an operator override, with its note)" if decision.overridden else "",
            resolved,
            "" if resolved == 1 else "s",
        )
    return now


def refusal(error: OxideBatchError, row_now: Callable[[], str] | None = None) -> str:
    """A refusal in words for the operator (the code stays in front)."""
    replayed = (
        " (this refusal was recorded for the same request earlier; nothing was done again)"
        if getattr(error, "replayed", False)
        else ""
    )
    now = f": {row_now()}" if row_now is not None else ""
    if isinstance(error, StaleVersion):
        return (
            f"the row changed since the page loaded{now or f': it is now version {error.actual}'}"
            f" (the page showed version {error.expected}); reload and decide again{replayed}"
        )
    if isinstance(error, RecoveryEvidenceStale):
        return (
            f"the evidence changed since the page loaded{now}; reload to see the new "
            f"proposal{replayed}"
        )
    return f"{error.message}{replayed}"


def execution_now(pk: int) -> str:
    """What an execution is now, for a stale refusal (one query, only then)."""
    row = (
        models.JobExecution.objects.filter(pk=pk)
        .values("status", "version", "last_activity_at", "stop_requested_at")
        .first()
    )
    if row is None:
        return "it no longer exists"
    text = f"it is now version {row['version']}, status {row['status']}"
    if row["last_activity_at"] is not None:
        text += f", last activity {human(timezone.now() - row['last_activity_at'])} ago"
    if row["stop_requested_at"] is not None:
        text += ", stop requested"
    return text
