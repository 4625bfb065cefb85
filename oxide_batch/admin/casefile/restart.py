"""What a restart will do, and what a restart attempt skipped (issue 40): the
case file of a FAILED or STOPPED execution shows its restart plan (step →
action → why, each linked to the earlier step it was decided from); the case
file of a restart attempt lists the steps it did not run because an earlier
attempt COMPLETED (or ABANDONED) them, each linked to the row that did.

Bounded: the plan is three queries
(:func:`~oxide_batch.selectors.restart_plan.execution_restart_plan`), the
skipped steps one (:func:`~oxide_batch.selectors.restart_plan.skipped_steps`).
"""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.base import link, table
from oxide_batch.admin.display import badge
from oxide_batch.domain.restart_plan import PlannedStep
from oxide_batch.selectors.restart_plan import (
    PLAN_STEPS,
    SKIPPED_STEPS,
    execution_restart_plan,
    skipped_steps,
)

PLANNED = frozenset({"FAILED", "STOPPED"})
PLAN_HEADERS = ("Step", "Action", "Why", "Decided from")


def restart_facts(obj: Any) -> list[tuple[str, SafeString]]:
    """The case file's restart facts of the execution ``obj``: its plan when it
    is FAILED or STOPPED, the steps it skipped when it is a restart attempt."""
    facts: list[tuple[str, SafeString]] = []
    if obj.restart_of_id is not None:
        facts.append(("Skipped", _skipped(obj)))
    if obj.status in PLANNED:
        facts.append(("Restart plan", _plan(obj.pk)))
    return facts


def _plan(execution_id: int) -> SafeString:
    read = execution_restart_plan(execution_id)
    plan = read.plan
    if plan.refusal is None:
        verdict = format_html(
            "{}", "A restart would be accepted. The next attempt (same definition) would:"
        )
    else:
        verdict = format_html(
            "A restart is refused now (<code>{}</code>): {}",
            plan.refusal.code,
            plan.refusal.detail,
        )
    rows = [_row(step) for step in (*plan.steps, *plan.unreached)]
    more = (
        format_html("<p>Only the first {} steps are shown (batch_show --json).</p>", PLAN_STEPS)
        if read.more
        else format_html("{}", "")
    )
    if not rows:
        if plan.refusal is None:
            verdict = format_html(
                "{}",
                "A restart would be accepted. This attempt recorded no step, so the "
                "next attempt (same definition) runs every step afresh.",
            )
        return format_html("<p>{}</p>", verdict)
    return format_html(
        '<div class="ob-restart ob-plan"><p>{}</p>{}{}</div>',
        verdict,
        table(PLAN_HEADERS, rows),
        more,
    )


def _row(step: PlannedStep) -> tuple[SafeString, ...]:
    name = format_html("{}", step.step_name)
    if step.node_id != step.step_name:
        name = format_html("{} <small>(node {})</small>", step.step_name, step.node_id)
    action = format_html("<strong>{}</strong>", step.action.value)
    reason = format_html("{}", step.reason)
    if step.refusal is not None:
        reason = format_html("{} (<code>{}</code>)", step.reason, step.refusal.code)
    source = step.source
    if source is None:
        return name, action, reason, format_html("{}", "—")
    earlier = format_html(
        "{} of {} {}",
        link("stepexecution", source.id, f"step #{source.id}"),
        link("jobexecution", source.job_execution_id, f"attempt {source.attempt}"),
        badge(source.status.value),
    )
    return name, action, reason, earlier


def _skipped(obj: Any) -> SafeString:
    rows, more = skipped_steps(obj)
    if not rows:
        return format_html("{}", "No step skipped: this attempt ran (or will run) every step.")
    cells = [
        (
            format_html("{}", row["step_name"]),
            badge(row["status"]),
            format_html(
                "{} of {}",
                link("stepexecution", row["id"], f"step #{row['id']}"),
                link("jobexecution", row["job_execution_id"], f"attempt {row['attempt']}"),
            ),
        )
        for row in rows
    ]
    note = (
        format_html("<p>Only the first {} are shown.</p>", SKIPPED_STEPS)
        if more
        else format_html("{}", "")
    )
    return format_html(
        '<div class="ob-restart"><p>{}</p>{}{}</div>',
        "Not run by this attempt: an earlier attempt completed (or abandoned) them.",
        table(("Step", "Status", "Done by"), cells),
        note,
    )
