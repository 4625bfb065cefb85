"""What the confirmation page says about each row after the POST: applied /
replayed / nothing to change with what the row is now (new status, what it was,
the decision with its resolved steps and whether an override made it, links),
or refused with the error code and what it means; a row only the override
would have recovered, when it was not ticked, that nothing was done to it.

Every row is run first (:func:`attempt`), then said (:func:`say`): a row
refused because it changed since the page loaded (``stale_version``,
``recovery_evidence_stale``) is described from the snapshot the page then
shows again (:func:`snapshot_now`), so the message and the page state one value
per fact. What an applied row is now comes from the service's result (what
the action wrote), never from a second read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.contrib import messages
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.base import change_url
from oxide_batch.admin.display import human
from oxide_batch.domain.errors import OxideBatchError, RecoveryEvidenceStale, StaleVersion
from oxide_batch.domain.operator import OperatorAction
from oxide_batch.services.audit import Outcome
from oxide_batch.services.retention import RetentionResult


@dataclass(frozen=True)
class Attempt:
    """One row's service call: its result, or the refusal."""

    pk: int
    label: str
    result: Any = None
    error: OxideBatchError | None = None

    @property
    def stale(self) -> bool:
        """Refused because the row changed since the page loaded."""
        return isinstance(self.error, StaleVersion | RecoveryEvidenceStale)


def attempt(pk: int, label: str, run: Callable[[], Any]) -> Attempt:
    """Run one row's service call, keeping a refusal rather than raising it."""
    try:
        return Attempt(pk, label, result=run())
    except OxideBatchError as error:
        return Attempt(pk, label, error=error)


def say(request: HttpRequest, done: Attempt, row_now: Callable[[], str] | None = None) -> None:
    """Say what happened to one row — the new state, what it was, the decision
    (with links) — or why not, in words; a stale row says what it is now
    (``row_now``, from the snapshot the page shows)."""
    if done.error is not None:
        messages.error(
            request, f"{done.label}: refused: {done.error.code} — {refusal(done.error, row_now)}"
        )
        return
    result = done.result
    if result.outcome is Outcome.REPLAYED:
        messages.info(request, format_html("{}: replayed — {}", done.label, row_outcome(result)))
    elif result.changed:
        messages.success(request, format_html("{}: applied — {}", done.label, row_outcome(result)))
    else:
        messages.info(
            request, format_html("{}: nothing to change — {}", done.label, row_outcome(result))
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
            f" (the page showed version {error.expected}); nothing was done to it — the page "
            f"below shows it as it is now: decide again{replayed}"
        )
    if isinstance(error, RecoveryEvidenceStale):
        return (
            f"the evidence changed since the page loaded{now}; nothing was done to it — the "
            f"page below shows the new proposal: decide again{replayed}"
        )
    return f"{error.message}{replayed}"


def snapshot_now(row: Mapping[str, Any] | None) -> str:
    """What an execution is now, for a stale refusal, from the confirmation
    row the page shows again (the same read): version, status, and for a row
    with a proposal its last activity (contract §2.5.3's, as the page and the case file
    show it: absolute UTC) and inactivity at the proposal's instant."""
    if row is None:
        return "it no longer exists (purged)"
    text = f"it is now version {row['version']}, status {row['status']}"
    proposal = row.get("proposal_object")
    if proposal is not None:
        activity = proposal.evidence.activity_at.astimezone(UTC)
        text += (
            f", last activity {activity:%Y-%m-%d %H:%M:%S} UTC "
            f"(inactive for {human(proposal.inactive_for)})"
        )
    if row.get("stop_requested_at") is not None:
        by = f" by {row['stop_requested_by']}" if row.get("stop_requested_by") else ""
        text += f", stop requested{by}"
    return text
