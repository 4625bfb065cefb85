"""Why a recovery is or was allowed, in words, for the console (SPEC §11).

An active execution with an owner holds a lease (``OXIDE_BATCH_LEASE_TTL``
after its latest activity) and is eligible once it expired; one without an
owner keeps the inactivity rule (``OXIDE_BATCH_RECOVERY_STALE_AFTER``); UNKNOWN
is always eligible. Before that, only the operator's override (with a note)
recovers it. These renderers read a proposal or a decision already in hand:
none runs a query. Times read relative and absolute (UTC), to the second.
"""

from __future__ import annotations

from datetime import datetime

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from oxide_batch.admin.applicable import recovery_overridable, recovery_why_not
from oxide_batch.admin.display import human_short, when, when_absolute
from oxide_batch.domain.evidence import Eligibility, RecoveryProposal

OVERRIDE_ADVICE = (
    "If its worker is gone, recover it now with the override on the recover page "
    "(a note is required; a worker alive after all is fenced: its next write is refused)."
)

# Why a recorded decision was allowed (``RecoveryDecision.eligibility``).
DECISION_WORDS = {
    Eligibility.UNKNOWN_STATUS.value: "its outcome was unknown (UNKNOWN)",
    Eligibility.INACTIVE.value: "no owner, inactive longer than the stale threshold",
    Eligibility.LEASE_EXPIRED.value: "the owner's lease had expired",
    Eligibility.OPERATOR_OVERRIDE.value: "operator override before it was stale",
}
NOT_RECORDED = "not recorded for this decision (it predates the record)"
# A note quoted beside other columns is cut (the decision's page shows it whole).
NOTE_MAX = 160


def lease(proposal: RecoveryProposal, now: datetime) -> SafeString:
    """The case file's lease line: held until / expired at (an owned active
    execution), else why there is none and which rule decides instead."""
    expires = proposal.lease_expires_at
    ttl = human_short(proposal.lease_ttl)
    if expires is not None:
        return format_html(
            "{} {} <small>— the owner's lease runs {} after its latest activity</small>",
            "held until" if expires > now else "expired at",
            when_absolute(expires, now),
            ttl,
        )
    if proposal.rule == "inactivity":
        return format_html(
            "none — no owner recorded, so the inactivity rule applies: eligible after {} "
            "without activity",
            human_short(proposal.threshold),
        )
    return format_html("{}", "none — only an active execution holds a lease")


def verdict(
    proposal: RecoveryProposal, now: datetime, *, advice: str = OVERRIDE_ADVICE
) -> SafeString:
    """Eligible and why (the lease expired at …; inactive over the threshold;
    UNKNOWN), or not and until when, with ``advice`` (the override) for one
    that is not stale yet."""
    evidence = proposal.evidence
    eligibility = proposal.eligibility
    if eligibility is Eligibility.LEASE_EXPIRED and proposal.lease_expires_at is not None:
        why = format_html(
            "the owner's lease expired at {}: inactive {}, over the {} lease",
            when_absolute(proposal.lease_expires_at, now),
            human_short(proposal.inactive_for),
            human_short(proposal.threshold),
        )
    elif eligibility is Eligibility.INACTIVE:
        why = format_html(
            "no owner recorded: inactive {}, over the {} threshold (last activity {})",
            human_short(proposal.inactive_for),
            human_short(proposal.threshold),
            when(evidence.activity_at, now),
        )
    elif eligibility is Eligibility.UNKNOWN_STATUS:
        why = format_html("{}", "its outcome is unknown (UNKNOWN): an operator decides")
    elif recovery_overridable(proposal):
        return _not_stale(proposal, now, advice)
    else:
        return format_html("<strong>{}</strong>", recovery_why_not(proposal) or "not eligible")
    return format_html('<strong class="ob-eligible">eligible for recovery</strong> — {}', why)


def _not_stale(proposal: RecoveryProposal, now: datetime, advice: str) -> SafeString:
    status = proposal.evidence.status.value
    until = proposal.evidence.activity_at + proposal.threshold
    if proposal.rule == "lease":
        head = format_html("not eligible: lease held until {}", when_absolute(until, now))
        detail = format_html(
            "the execution is still active ({}) and its owner was last active {} ago (lease {})",
            status,
            human_short(proposal.inactive_for),
            human_short(proposal.threshold),
        )
    else:
        head = format_html(
            "not eligible: inactive for only {} of the {} threshold",
            human_short(proposal.inactive_for),
            human_short(proposal.threshold),
        )
        detail = format_html(
            "the execution is still active ({}), no owner recorded; stale after {}",
            status,
            when_absolute(until, now),
        )
    return format_html("<strong>{}</strong> — {}. {}", head, detail, advice)


def decision_reason(
    eligibility: str | None, override_note: str | None, *, note: int | None = NOTE_MAX
) -> SafeString:
    """Why a recorded recovery was allowed; an override says so (a badge with
    the word, not only its colour) and quotes the operator's note, cut to
    ``note`` characters (``0``: left out, for a page that shows it whole)."""
    words = DECISION_WORDS.get(eligibility or "", eligibility or NOT_RECORDED)
    if eligibility == Eligibility.OPERATOR_OVERRIDE.value:
        words = format_html('<span class="ob-badge ob-warn">OVERRIDE</span> {}', words)
    if not override_note or note == 0:
        return format_html("{}", words)
    quoted = override_note if note is None else Truncator(override_note).chars(note)
    return format_html('{} — note: <q class="ob-note">{}</q>', words, quoted)
