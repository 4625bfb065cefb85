"""A recovery proposal as the confirmation page shows it: eligibility in words
(why, or until when and the override), the owner's lease, inactivity against
the threshold (or the lease) as durations, the evidence times relative and
absolute (UTC), the latest step by name with its status badge, the markers,
and a short prefix of the evidence digest (the full digest is posted back)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.applicable import recovery_overridable
from oxide_batch.admin.base import link
from oxide_batch.admin.display import badge, human, when
from oxide_batch.admin.eligibility import lease, verdict
from oxide_batch.domain.evidence import LatestStep, RecoveryProposal

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


def proposal_display(proposal: RecoveryProposal, now: datetime) -> dict[str, Any]:
    evidence = proposal.evidence
    rule = "lease" if proposal.rule == "lease" else "threshold"
    return {
        "eligible": proposal.eligible,
        "overridable": recovery_overridable(proposal),
        "verdict": verdict(proposal, now, advice=OVERRIDE_BELOW),
        "lease": lease(proposal, now),
        "inactive": f"inactive for {human(proposal.inactive_for)} "
        f"({rule} {human(proposal.threshold)})",
        "last_activity": when(evidence.last_activity_at, now),
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
