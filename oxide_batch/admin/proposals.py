"""A recovery proposal as the confirmation page shows it: eligibility in words
(why, or until when and the override), the owner's lease, inactivity against
the threshold (or the lease) as durations, the evidence times relative and
absolute (UTC), the latest step by name with its status badge, the markers,
and a short prefix of the evidence digest (the full digest is posted back).

One value per fact: "last activity" is contract §2.5.3's activity
(``evidence.activity_at``, the later of the execution's own runtime write and
its newest step write — what the case file and the API call last activity),
and every relative time is read at the proposal's own clock instant (its
activity plus its inactivity), so "inactive for 15m 34s" and "last activity
15 min ago" are one reading.

Also what a recovery will do to a row (:func:`recovery_outcome`): the status
it ends in for each disposition and the unfinished steps that end FAILED
either way (contract §2.5.6), read for all rows in one query
(:func:`oxide_batch.selectors.console.unfinished_steps`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.applicable import recovery_overridable
from oxide_batch.admin.base import link
from oxide_batch.admin.display import badge, human, when
from oxide_batch.admin.eligibility import lease, verdict
from oxide_batch.domain.evidence import LatestStep, RecoveryProposal
from oxide_batch.domain.status import FailureCategory

DIGEST_SHOWN = 12


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def latest_step_display(step: LatestStep | None) -> SafeString:
    """``load (#12) [STARTED], version 4, checkpoint reader.position v2, 80 bytes``."""
    if step is None:
        return format_html("{}", "none")
    checkpoint = step.checkpoint
    if checkpoint is None:
        stored = format_html("{}", "no checkpoint")
    elif not checkpoint.intact:
        stored = format_html(
            "checkpoint of {} bytes that <strong>does not verify</strong>", checkpoint.size
        )
    else:
        stored = format_html(
            "checkpoint {} v{}, {} bytes",
            checkpoint.schema,
            checkpoint.schema_version,
            checkpoint.size,
        )
    return format_html(
        "{} ({}) {}, version {}, {}",
        step.step_name or "unnamed step",
        link("stepexecution", step.id),
        badge(step.status.value),
        step.version,
        stored,
    )


# What the confirmation page says about a row that is not stale yet.
OVERRIDE_BELOW = (
    "If its worker is gone, tick the override below and say why: it is then recovered "
    "now (a worker alive after all is fenced: its next write is refused)."
)


def proposal_instant(proposal: RecoveryProposal) -> datetime:
    """The clock instant the proposal was computed at: its activity plus its
    inactivity (inactivity is never negative, so a clock behind the evidence
    reads as the activity itself)."""
    return proposal.evidence.activity_at + proposal.inactive_for


def proposal_display(proposal: RecoveryProposal) -> dict[str, Any]:
    evidence = proposal.evidence
    rule = "lease" if proposal.rule == "lease" else "threshold"
    now = proposal_instant(proposal)
    return {
        "eligible": proposal.eligible,
        "overridable": recovery_overridable(proposal),
        "verdict": verdict(proposal, now, advice=OVERRIDE_BELOW),
        "lease": lease(proposal, now),
        "inactive": f"inactive for {human(proposal.inactive_for)} "
        f"({rule} {human(proposal.threshold)})",
        "last_activity": when(evidence.activity_at, now),
        "newest_step_write": when(evidence.newest_step_write_at, now)
        if evidence.newest_step_write_at is not None
        else "none",
        "last_observed": when(evidence.last_observed_at, now)
        if evidence.last_observed_at is not None
        else "never",
        "latest_step": latest_step_display(evidence.latest_step),
        "markers": (
            f"unknown commit {_yes(evidence.unknown_commit)}, "
            f"owner recorded {_yes(evidence.owner_recorded)}, "
            f"stop requested {_yes(evidence.stop_requested_at is not None)}, "
            f"completed partition {_yes(evidence.completed_partition)}, "
            f"committed flow decision {_yes(evidence.committed_flow_decision)}"
        ),
        "unknown_commit": evidence.unknown_commit,
        "digest": proposal.evidence_digest[:DIGEST_SHOWN],
    }


def recovery_outcome(
    pk: int, proposal: RecoveryProposal, steps: list[dict[str, Any]], total: int
) -> dict[str, SafeString]:
    """What a recovery of execution ``pk`` does (contract §2.5.6): the status it ends
    in with each disposition, and the unfinished steps that end FAILED with
    either — with MARK_FAILED carrying the chosen category, with ABANDON
    STALE_RECOVERED (UNKNOWN_COMMIT when the row carries the marker)."""
    steps_category = (
        FailureCategory.UNKNOWN_COMMIT
        if proposal.unknown_commit
        else FailureCategory.STALE_RECOVERED
    )
    if not steps:
        resolved = format_html("{}", "No unfinished step: only the execution changes.")
    else:
        named = format_html_join(
            ", ",
            "{} ({}) {}",
            ((s["step_name"], link("stepexecution", s["id"]), badge(s["status"])) for s in steps),
        )
        more = total - len(steps)
        one = total == 1
        resolved = format_html(
            "Either way its {} unfinished step{} end{} <strong>FAILED</strong> now, carrying "
            "the chosen category with MARK_FAILED, {} with ABANDON (a worker still writing "
            "to {} is refused): {}{}",
            total,
            "" if one else "s",
            "s" if one else "",
            steps_category.value,
            "it" if one else "them",
            named,
            format_html(" and {} more", more) if more else "",
        )
    return {
        "MARK_FAILED": format_html(
            "With MARK_FAILED: #{} ends <strong>FAILED</strong> with the category you choose "
            "(it may be restarted).",
            pk,
        ),
        "ABANDON": format_html(
            "With ABANDON: #{} ends <strong>ABANDONED</strong> (its instance never runs again).",
            pk,
        ),
        "steps": resolved,
    }
