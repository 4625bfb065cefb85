"""The top of an execution's page: a case file an operator reads at 3 a.m.

What the execution is (status, attempt, job, the parameters an operator may
see), whether it is stuck (last activity, inactivity against the recovery
threshold — the owner's lease when one is recorded —, owner, lease and stop
state), and — for an unresolved one — the recovery proposal inline:
eligibility in words (why, or until when and the override), each marker
explained, the evidence, and the one action that applies; for a failure,
what became of it (abandoned, rerun, still failed). Below it a timeline of
what happened, built from the durable timestamps and the audit rows only
(nothing is inferred): the runtime's writes (a step's last write stays, even
after a recovery ended it), and the operators' and the watchdog's acts as
events of their own — each recovery decision, stop request, abandon, and hold
placed or released on the instance — with who and why.

"Last activity" is the runtime's only (contract §2.5.3): the execution's and its
steps' ``last_activity_at``, never a row's ``updated_at`` (a recovery moves
it); with a proposal, exactly the proposal's — and the page reads every
relative time at the proposal's instant, so one fact has one value.

Bounded: the proposal is one unit of work (the repository's evidence read),
the steps one query (at most :data:`TIMELINE_STEPS`, partition workers left
out — their partitions are on the step's page), the decisions, the operator
requests and the instance's hold records one query each (bounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.actions import EXECUTION_ACTIONS, action_url
from oxide_batch.admin.applicable import ActionChoice, action_choices, recovery_overridable
from oxide_batch.admin.base import can, link
from oxide_batch.admin.display import (
    ACTIVE,
    badge,
    fate,
    human_short,
    inactivity,
    latest,
    parameters,
    recorded_by_decision,
    when,
)
from oxide_batch.admin.display import failure as render_failure
from oxide_batch.admin.eligibility import decision_reason, lease, verdict
from oxide_batch.admin.proposals import latest_step_display
from oxide_batch.conf import batch_settings
from oxide_batch.domain.evidence import UNKNOWN_EFFECT, Eligibility, RecoveryProposal
from oxide_batch.domain.status import UNRESOLVED_STATUSES
from oxide_batch.roles import PERMISSIONS
from oxide_batch.services import bootstrap

TIMELINE_STEPS = 50
TIMELINE_DECISIONS = 5
TIMELINE_REQUESTS = 10
TIMELINE_HOLDS = 10
UNRESOLVED = frozenset(status.value for status in UNRESOLVED_STATUSES)

# What each marker of the evidence means for the decision (contract §2.5.4).
MARKERS = {
    "unknown_commit": (
        "Unknown commit",
        "the runtime's last commit has an unknown outcome: its effect may have happened. "
        f"Marking it FAILED needs the reason code {UNKNOWN_EFFECT}; check the target system "
        "first.",
    ),
    "lost_write": (
        "Lost write",
        "a write was refused because it expected a version ahead of the stored one: the "
        "repository lost a write it had acknowledged to the runtime (e.g. a database failover "
        "to a standby that had not received it). What is stored is older than what the runtime "
        "did: it counts as an unknown commit — check the target system, then recover with "
        f"{UNKNOWN_EFFECT} (docs/reliability.md).",
    ),
    "owner_recorded": (
        "Owner recorded",
        "a worker claimed this execution. Make sure that process is gone before recovering, "
        "or it will be fenced (its next write refused) when it comes back.",
    ),
    # Said with how long ago (see _marker_text): "never" would be wrong 0 s after.
    "stop_requested": (
        "Stop requested",
        "an operator asked the runtime to stop; the runtime has not confirmed yet.",
    ),
    "completed_partition": (
        "Completed partition",
        "some partitions completed: a restart keeps them and reruns only the rest.",
    ),
    "committed_flow_decision": (
        "Committed flow decision",
        "the flow already chose its next step; a restart resumes from that decision.",
    ),
}


@dataclass(frozen=True)
class Event:
    at: datetime
    text: SafeString


def proposal_for(obj: Any) -> RecoveryProposal | None:
    """The recovery proposal of an unresolved execution (one unit of work), or
    ``None`` for a finished one — read once per page, shared with the actions."""
    if obj.status not in UNRESOLVED:
        return None
    return bootstrap.operator_service().propose(obj.pk)


def render(request: HttpRequest, obj: Any, proposal: RecoveryProposal | None) -> SafeString:
    """The case file of one execution (``obj``: the change view's object, with
    the list's annotations — ``newest_step_write`` and the failure's fate;
    ``proposal``: :func:`proposal_for` it)."""
    last: datetime | None
    if proposal is not None:
        # The proposal's instant (its inactivity is measured to it): every
        # relative time of the page is read at that one instant.
        last = proposal.evidence.activity_at
        now = last + proposal.inactive_for
    else:
        now = timezone.now()
        last = latest(obj.last_activity_at, getattr(obj, "newest_step_write", None))
    # The owner's lease when one is recorded (contract §2.5.3), else the stale threshold.
    threshold = proposal.threshold if proposal else batch_settings.RECOVERY_STALE_AFTER
    steps = _steps(obj.pk)
    decisions = list(
        models.RecoveryDecision.objects.filter(job_execution_id=obj.pk).order_by("id")[
            :TIMELINE_DECISIONS
        ]
    )
    requests = list(
        models.OperatorRequest.objects.filter(
            job_execution_id=obj.pk,
            action__in=("STOP", "ABANDON"),
            outcome="APPLIED",
            changed=True,
        ).order_by("-id")[:TIMELINE_REQUESTS]
    )
    holds = list(
        models.RetentionRecord.objects.filter(
            job_instance_id=obj.job_instance_id,
            action__in=("HOLD", "RELEASE_HOLD"),
            outcome="APPLIED",
            changed=True,
            applied_at__gte=obj.created_at,
        ).order_by("-id")[:TIMELINE_HOLDS]
    )
    facts: list[tuple[str, SafeString]] = [
        (
            "Status",
            format_html(
                "{} attempt {} of {}",
                badge(obj.status),
                obj.attempt,
                link("jobinstance", obj.job_instance_id, obj.job_name),
            ),
        ),
        ("Parameters", parameters(getattr(obj, "instance_parameters", None))),
        ("Last activity", _last_activity(last, now)),
        ("Inactivity", inactivity(obj.status, last, threshold=threshold, now=now)),
        ("Owner", _owner(obj, now)),
        *([("Lease", lease(proposal, now))] if proposal is not None else []),
        ("Stop", _stop(obj, now)),
    ]
    if obj.failure_category:
        facts.append(
            (
                "Failure",
                render_failure(
                    obj.failure_category,
                    obj.failure_id,
                    execution_id=obj.pk,
                    job_name=obj.job_name,
                    decision_id=recorded_by_decision(obj.recovery_decision_id, obj.failed_at),
                    given=bool(getattr(obj, "failure_id_given", False)),
                ),
            )
        )
    if obj.failed_at is not None:
        facts.append(
            (
                "Since the failure",
                format_html("failed {}; {}", when(obj.failed_at, now), fate(obj, now)),
            )
        )
    lost = getattr(obj, "lost_write", None)
    if isinstance(lost, dict):
        facts.append(("Lost write", _lost_write(lost)))
    if decisions:
        facts.append(("Resolved by", _decisions(decisions)))
    if proposal is not None:
        facts.append(("Recovery", _proposal(request, obj, proposal, now)))
    rows = format_html_join(
        "", '<div class="ob-fact"><dt>{}</dt><dd>{}</dd></div>', ((k, v) for k, v in facts)
    )
    return format_html(
        '<section class="ob-case" aria-labelledby="ob-case-title">'
        '<h2 id="ob-case-title">Case file</h2><dl class="ob-facts">{}</dl>'
        '<h3 id="ob-timeline-title">Timeline <small>(UTC, oldest first)</small></h3>{}</section>',
        rows,
        _timeline(obj, steps, decisions, requests, holds, now),
    )


def _last_activity(last: datetime | None, now: datetime) -> SafeString:
    return format_html(
        "{} <small>(the runtime's: its writes and the owner's observations; "
        "an operator's action never moves it)</small>",
        when(last, now),
    )


def read_only_note(request: HttpRequest | None, choices: list[ActionChoice]) -> SafeString | None:
    """The one sentence a user reads where an action applies that the user may
    not take (and none the user may): which permission acting needs, by its
    name and codename. ``None`` when the user may act, or nothing applies."""
    if request is None:
        return None
    applicable = [choice.spec for choice in choices if choice.applies]
    if not applicable or any(can(request, spec.permission) for spec in applicable):
        return None
    codename = applicable[0].permission
    return format_html(
        '<p class="ob-read-only">Read-only: acting here needs the permission “{}” ({}).</p>',
        PERMISSIONS.get(codename, codename),
        codename,
    )


def _steps(execution_id: int) -> list[models.StepExecution]:
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    return list(
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .exclude(Exists(is_worker))
        .order_by("id")
        .only(
            "id",
            "step_name",
            "status",
            "created_at",
            "started_at",
            "ended_at",
            "last_activity_at",
            "recovery_decision_id",
        )[:TIMELINE_STEPS]
    )


def _owner(obj: Any, now: datetime) -> SafeString:
    owned = bool(getattr(obj, "has_owner", obj.owner_token is not None))
    if not owned:
        return format_html("{}", "no owner recorded")
    if obj.last_observed_at is None:
        return format_html("{}", "owner recorded, never observed since")
    return format_html("owner recorded, last observed {}", when(obj.last_observed_at, now))


def _stop(obj: Any, now: datetime) -> SafeString:
    if obj.stop_requested_at is None:
        return format_html("{}", "no stop requested")
    return format_html(
        "stop requested by {} {}", obj.stop_requested_by or "?", when(obj.stop_requested_at, now)
    )


def _decisions(decisions: list[models.RecoveryDecision]) -> SafeString:
    return format_html_join(
        "<br>",
        "{} — {} → {} ({}) by {}; allowed because: {}",
        (
            (
                link("recoverydecision", d.pk, f"decision #{d.pk}"),
                d.prior_status,
                badge(d.resulting_status),
                d.reason_code,
                d.operator_reference,
                decision_reason(d.eligibility, d.override_note, note=None),
            )
            for d in decisions
        ),
    )


def _proposal(
    request: HttpRequest, obj: Any, proposal: RecoveryProposal, now: datetime
) -> SafeString:
    evidence = proposal.evidence
    flags = {
        "unknown_commit": proposal.unknown_commit,
        "lost_write": evidence.lost_write,
        "owner_recorded": evidence.owner_recorded,
        "stop_requested": evidence.stop_requested_at is not None,
        "completed_partition": evidence.completed_partition,
        "committed_flow_decision": evidence.committed_flow_decision,
    }
    raised = [(MARKERS[k][0], _marker_text(k, evidence, now)) for k, on in flags.items() if on]
    markers = (
        format_html_join("", "<li><strong>{}</strong>: {}</li>", raised)
        if raised
        else format_html("<li>{}</li>", "no marker raised")
    )
    return format_html(
        '<div class="ob-proposal">{}<ul class="ob-markers">{}</ul>'
        "<p>Evidence: latest step {}; newest step write {}; execution activity {}.</p>{}</div>",
        verdict(proposal, now),
        markers,
        latest_step_display(evidence.latest_step),
        when(evidence.newest_step_write_at, now),
        when(evidence.last_activity_at, now),
        _the_action(request, obj, proposal),
    )


def _lost_write(marker: dict[str, Any]) -> SafeString:
    """The lost-write marker (``version_ahead``): when, and the versions."""
    return format_html(
        '<span class="ob-badge ob-warn">LOST WRITE</span> detected {} UTC: a write expected '
        "version {}, the stored row is at {} — the repository lost a write it had "
        "acknowledged. It counts as an unknown commit: check the target system, then recover "
        f"with {UNKNOWN_EFFECT}.",
        str(marker.get("detected_at", "?")).replace("T", " ").removesuffix("Z"),
        marker.get("expected_version", "?"),
        marker.get("stored_version", "?"),
    )


def _marker_text(key: str, evidence: Any, now: datetime) -> str:
    """A marker's meaning; the stop request's says how long ago it was made
    and what the runtime did about it so far."""
    if key != "stop_requested" or evidence.stop_requested_at is None:
        return MARKERS[key][1]
    since = human_short(max(now - evidence.stop_requested_at, timedelta(0)))
    if evidence.status.value == "STOPPING":
        return (
            f"an operator asked the runtime to stop {since} ago; it is STOPPING "
            "and has not ended yet."
        )
    return f"an operator asked the runtime to stop {since} ago; the runtime has not confirmed yet."


def _the_action(request: HttpRequest, obj: Any, proposal: RecoveryProposal) -> SafeString:
    """The one action that applies to an unresolved execution: Recover once it
    is eligible, else (still active) a stop request — the actions module's rule —
    and, for one not stale yet, the way to the override for who may recover."""
    return format_html("{}{}", _primary(request, obj, proposal), _override(request, obj, proposal))


def _override(request: HttpRequest, obj: Any, proposal: RecoveryProposal) -> SafeString:
    recover = EXECUTION_ACTIONS["recover"]
    if not (recovery_overridable(proposal) and can(request, recover.permission)):
        return format_html("{}", "")
    return format_html(
        '<p><a class="button" href="{}">Recover #{} with an override…</a> <small>({})</small></p>',
        action_url(recover, [obj.pk]),
        obj.pk,
        "only if you know its worker is gone: the next page asks for a note, "
        "recorded on the decision",
    )


def _primary(request: HttpRequest, obj: Any, proposal: RecoveryProposal) -> SafeString:
    applicable = [
        choice.spec
        for choice in action_choices(obj, proposal=proposal)
        if choice.applies and choice.spec.name in ("recover", "stop")
    ]
    allowed = [spec for spec in applicable if can(request, spec.permission)]
    if not allowed:
        note = read_only_note(request, action_choices(obj, proposal=proposal))
        return note if note is not None else format_html("{}", "")
    spec = allowed[0]
    hint = (
        "next page: choose mark FAILED or ABANDON, and confirm"
        if spec.name == "recover"
        else "the runtime stops at its next check; nothing is marked"
    )
    return format_html(
        '<p><a class="button ob-primary" href="{}">{} #{}…</a> <small>({})</small></p>',
        action_url(spec, [obj.pk]),
        "Recover" if spec.name == "recover" else spec.label,
        obj.pk,
        hint,
    )


def _timeline(
    obj: Any,
    steps: list[models.StepExecution],
    decisions: list[models.RecoveryDecision],
    requests: list[models.OperatorRequest],
    holds: list[models.RetentionRecord],
    now: datetime,
) -> SafeString:
    events = [Event(obj.created_at, format_html("execution created (attempt {})", obj.attempt))]
    if obj.started_at:
        events.append(Event(obj.started_at, format_html("{}", "execution started")))
    for s in steps:
        events.extend(_step_events(s))
    if obj.last_observed_at:
        events.append(Event(obj.last_observed_at, format_html("{}", "owner last observed")))
    events.extend(_decision_event(d) for d in decisions)
    abandon = next((r for r in requests if r.action == "ABANDON"), None)
    for r in requests:
        reason = format_html(", reason {}", r.reason_code) if r.reason_code else ""
        if r.action == "STOP":
            text = format_html(
                "{} by {}{}", link("operatorrequest", r.pk, "stop requested"), r.actor, reason
            )
        else:
            text = format_html(
                "{} by {}{}: {} → {}",
                link("operatorrequest", r.pk, "abandoned"),
                r.actor,
                reason,
                r.prior_status or "?",
                badge(r.result_status),
            )
        events.append(Event(r.requested_at, text))
    if obj.stop_requested_at and not any(r.action == "STOP" for r in requests):
        # A stop recorded without its audit row (purged, or older than the audit).
        events.append(
            Event(obj.stop_requested_at, format_html("stop requested by {}", obj.stop_requested_by))
        )
    for h in holds:
        events.append(
            Event(
                h.applied_at,
                format_html(
                    "{} on the instance by {}, reason {}",
                    link(
                        "retentionrecord",
                        h.pk,
                        "hold placed" if h.action == "HOLD" else "hold released",
                    ),
                    h.actor,
                    h.reason_code,
                ),
            )
        )
    ended = _ended_event(obj, abandon)
    if ended is not None:
        events.append(ended)
    events.sort(key=lambda e: e.at)
    items = format_html_join(
        "",
        '<li><time datetime="{}">{}</time> <span class="ob-ago">{}</span> {}</li>',
        (
            (
                e.at.isoformat(),
                e.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                _ago(e.at, now),
                e.text,
            )
            for e in events
        ),
    )
    tail = (
        format_html(
            "<li><strong>now</strong> — {}</li>",
            "still active" if obj.status in ACTIVE else "no end: outcome unknown",
        )
        if obj.ended_at is None and obj.status in UNRESOLVED
        else format_html("{}", "")
    )
    more = (
        format_html(
            "<p><small>Only the first {} steps are on the timeline; "
            "see the steps table.</small></p>",
            TIMELINE_STEPS,
        )
        if len(steps) >= TIMELINE_STEPS
        else format_html("{}", "")
    )
    return format_html(
        '<ol class="ob-timeline" aria-labelledby="ob-timeline-title">{}{}</ol>{}', items, tail, more
    )


def _step_events(s: models.StepExecution) -> list[Event]:
    """A step's start, its last runtime write (kept when a recovery ended it:
    the decision's time is the decision's), and its end — "by decision #N" when
    a recovery ended it, so it never looks as if the step ran until then."""
    name = link("stepexecution", s.pk, s.step_name)
    events = []
    if s.started_at:
        events.append(Event(s.started_at, format_html("step {} started", name)))
    last = s.last_activity_at
    resolved = s.recovery_decision_id is not None
    if last and s.started_at and last > s.started_at and (s.ended_at is None or resolved):
        events.append(
            Event(
                last,
                format_html(
                    "step {} last runtime write (transition, chunk or checkpoint){}",
                    name,
                    "" if resolved else format_html(", {}", badge(s.status)),
                ),
            )
        )
    if s.ended_at:
        by = (
            format_html(
                " by {}",
                link(
                    "recoverydecision",
                    s.recovery_decision_id,
                    f"decision #{s.recovery_decision_id}",
                ),
            )
            if resolved
            else ""
        )
        events.append(
            Event(s.ended_at, format_html("step {} ended {}{}", name, badge(s.status), by))
        )
    return events


def _decision_event(d: models.RecoveryDecision) -> Event:
    """A recovery decision as an event of its own: who (an operator, or the
    watchdog), the disposition, the reason code, why it was allowed, the note."""
    return Event(
        d.decided_at,
        format_html(
            "{}: {} → {} by {}{}, reason {}; allowed because: {}",
            link("recoverydecision", d.pk, f"recovery decision #{d.pk}"),
            d.prior_status,
            badge(d.resulting_status),
            d.operator_reference,
            " (an operator override)"
            if d.eligibility == Eligibility.OPERATOR_OVERRIDE.value
            else "",
            d.reason_code,
            decision_reason(d.eligibility, d.override_note),
        ),
    )


def _ended_event(obj: Any, abandon: models.OperatorRequest | None) -> Event | None:
    """How the execution ended. A failure is told at its own time (``failed_at``)
    whatever followed; an abandon keeps the end time it had, so the end is told
    with the status it ended in then (the abandon is an event of its own); an
    end a recovery decided says so."""
    by = (
        format_html(
            " by {}",
            link(
                "recoverydecision",
                obj.recovery_decision_id,
                f"decision #{obj.recovery_decision_id}",
            ),
        )
        if obj.recovery_decision_id is not None
        else ""
    )
    if obj.failed_at is not None:
        return Event(obj.failed_at, format_html("execution ended {}{}", badge("FAILED"), by))
    if obj.ended_at is None:
        return None
    status = obj.status
    if abandon is not None and abandon.prior_status and obj.recovery_decision_id is None:
        status = abandon.prior_status
    return Event(obj.ended_at, format_html("execution ended {}{}", badge(status), by))


def _ago(moment: datetime, now: datetime) -> str:
    return f"({human_short(now - moment)} ago)" if moment <= now else ""
