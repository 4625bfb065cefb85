"""Why a recovery is or was allowed, in words, for the console (contract §2.5.4, §2.5.5).

An active execution with an owner holds a lease (``OXIDE_BATCH_LEASE_TTL``
after its latest activity) and is eligible once it expired; one without an
owner keeps the inactivity rule (``OXIDE_BATCH_RECOVERY_STALE_AFTER``); UNKNOWN
is always eligible. Before that, only the operator's override (with a note)
recovers it. These renderers read a proposal or a decision already in hand:
none runs a query. Times read relative and absolute (UTC), to the second.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.html import format_html, format_html_join
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


NOT_RECORDED_EVIDENCE = "evidence not recorded (decided before schema 6)"


def recorded_evidence(recorded: Any, decided_at: datetime) -> SafeString:
    """The evidence a recovery decision was taken on (``RecoveryDecision.evidence``,
    :meth:`~oxide_batch.domain.evidence.RecoveryProposal.recorded`), each time
    absolute (UTC) and how long before the decision it was: the activity the
    rule read, the execution's own activity, the newest step write, the owner's
    last observation, the stop request, the lease expiry, the rule, and the
    inactivity against its threshold. A decision of an older schema has none,
    and says so; a malformed record reads as not recorded, never a 500."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("evidence"), dict):
        return format_html("{}", NOT_RECORDED_EVIDENCE)
    facts: dict[str, Any] = recorded["evidence"]
    rule = recorded.get("rule")
    latest_step = facts.get("latest_step")
    step = (
        format_html(
            "#{} {} (version {})",
            latest_step.get("id"),
            latest_step.get("status"),
            latest_step.get("version"),
        )
        if isinstance(latest_step, dict)
        else format_html("{}", "none")
    )
    markers = facts.get("markers")
    raised = (
        ", ".join(name.replace("_", " ") for name, on in markers.items() if on)
        if isinstance(markers, dict)
        else ""
    )
    lines: list[tuple[str, Any]] = [
        ("status", format_html("{}", facts.get("status", "?"))),
        ("last activity (what the rule read)", _at(recorded.get("last_activity_at"), decided_at)),
        ("the execution's own activity", _at(facts.get("last_activity_at"), decided_at)),
        ("newest step write", _at(facts.get("newest_step_write_at"), decided_at)),
        ("latest step", step),
        (
            "owner",
            format_html("{}", "recorded" if facts.get("owner_recorded") else "none recorded"),
        ),
        ("owner's last observation", _at(facts.get("last_observed_at"), decided_at)),
        ("stop requested", _at(facts.get("stop_requested_at"), decided_at, none="no stop")),
        (
            "lease expiry",
            _at(recorded.get("lease_expires_at"), decided_at, none="no lease (no owner recorded)"),
        ),
        ("rule", format_html("{}", RULES.get(str(rule), "none: not an active execution"))),
        ("inactivity", _inactivity(recorded)),
        ("markers", format_html("{}", raised or "none raised")),
    ]
    return format_html(
        '<dl class="ob-facts ob-evidence-recorded">{}</dl>',
        format_html_join(
            "", '<div class="ob-fact"><dt>{}</dt><dd>{}</dd></div>', ((k, v) for k, v in lines)
        ),
    )


RULES = {
    "lease": "lease (an owner was recorded: eligible once its lease expired)",
    "inactivity": "inactivity (no owner recorded: eligible after the stale threshold)",
}


def _instant(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _at(text: Any, decided_at: datetime, *, none: str = "none recorded") -> SafeString:
    """A recorded instant: absolute UTC, and how long before the decision."""
    moment = _instant(text)
    if moment is None:
        return format_html("{}", none)
    gap = decided_at - moment
    relative = (
        f"{human_short(gap)} before the decision"
        if gap >= timedelta(0)
        else f"{human_short(-gap)} after the decision"
    )
    utc = moment.astimezone(UTC)
    return format_html(
        '<time datetime="{}">{}</time> <small class="ob-rel">({})</small>',
        utc.isoformat(),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        relative,
    )


def _inactivity(recorded: dict[str, Any]) -> SafeString:
    inactive, threshold = recorded.get("inactive_seconds"), recorded.get("threshold_seconds")
    if not isinstance(inactive, int) or not isinstance(threshold, int):
        return format_html("{}", "not recorded")
    over = "over" if inactive > threshold else "within"
    return format_html(
        "inactive {}, {} the {} threshold",
        human_short(timedelta(seconds=inactive)),
        over,
        human_short(timedelta(seconds=threshold)),
    )
