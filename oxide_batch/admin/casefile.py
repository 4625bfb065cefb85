"""The top of an execution's page: a case file an operator reads at 3 a.m.

What the execution is (status, attempt, job, the parameters an operator may
see), whether it is stuck (last activity, inactivity against the recovery
threshold — the owner's lease when one is recorded —, owner, lease and stop
state), and — for an unresolved one — the recovery proposal inline:
eligibility in words (why, or until when and the override), each marker
explained, the evidence, and the one action that applies. Below it a timeline
of what happened, built from the durable timestamps only (nothing is
inferred). The decisions that resolved it say why each was allowed (an
override with its note).

Bounded: the proposal is one unit of work (the repository's evidence read),
the steps one query (at most :data:`TIMELINE_STEPS`, partition workers left
out — their partitions are on the step's page), the decisions one query.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Exists, OuterRef
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.actions import EXECUTION_ACTIONS, action_url
from oxide_batch.admin.applicable import action_choices, recovery_overridable
from oxide_batch.admin.base import can, link
from oxide_batch.admin.display import (
    ACTIVE,
    badge,
    human_short,
    inactivity,
    latest,
    parameters,
    when,
)
from oxide_batch.admin.display import failure as render_failure
from oxide_batch.admin.eligibility import decision_reason, lease, verdict
from oxide_batch.admin.proposals import latest_step_display
from oxide_batch.conf import batch_settings
from oxide_batch.domain.evidence import Eligibility, RecoveryProposal
from oxide_batch.domain.status import UNRESOLVED_STATUSES
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.operator import OperatorService

TIMELINE_STEPS = 50
TIMELINE_DECISIONS = 5
UNRESOLVED = frozenset(status.value for status in UNRESOLVED_STATUSES)

# What each marker of the evidence means for the decision (SPEC §9).
MARKERS = {
    "unknown_commit": (
        "Unknown commit",
        "the runtime's last commit has an unknown outcome: its effect may have happened. "
        "Marking it FAILED needs the reason code UNKNOWN_EFFECT; check the target system first.",
    ),
    "owner_recorded": (
        "Owner recorded",
        "a worker claimed this execution. Make sure that process is gone before recovering, "
        "or it will be fenced (its next write refused) when it comes back.",
    ),
    "stop_requested": (
        "Stop requested",
        "an operator asked the runtime to stop; it never confirmed.",
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
    return OperatorService(
        DjangoJobRepository(), stale_after=batch_settings.RECOVERY_STALE_AFTER
    ).propose(obj.pk)


def render(request: HttpRequest, obj: Any, proposal: RecoveryProposal | None) -> SafeString:
    """The case file of one execution (``obj``: the change view's object;
    ``proposal``: :func:`proposal_for` it)."""
    now = timezone.now()
    # The owner's lease when one is recorded (SPEC §11), else the stale threshold.
    threshold = proposal.threshold if proposal else batch_settings.RECOVERY_STALE_AFTER
    steps = _steps(obj.pk)
    decisions = list(
        models.RecoveryDecision.objects.filter(job_execution_id=obj.pk).order_by("id")[
            :TIMELINE_DECISIONS
        ]
    )
    last = latest(obj.last_activity_at, *(s.updated_at for s in steps))
    if proposal is not None:
        last = latest(last, proposal.evidence.activity_at)
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
        ("Last activity", when(last, now)),
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
                ),
            )
        )
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
        _timeline(obj, steps, decisions, now),
    )


def _steps(execution_id: int) -> list[models.StepExecution]:
    is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
    return list(
        models.StepExecution.objects.filter(job_execution_id=execution_id)
        .exclude(Exists(is_worker))
        .order_by("id")
        .only("id", "step_name", "status", "created_at", "started_at", "ended_at", "updated_at")[
            :TIMELINE_STEPS
        ]
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
        "owner_recorded": evidence.owner_recorded,
        "stop_requested": evidence.stop_requested_at is not None,
        "completed_partition": evidence.completed_partition,
        "committed_flow_decision": evidence.committed_flow_decision,
    }
    raised = [(MARKERS[k][0], MARKERS[k][1]) for k, on in flags.items() if on]
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
        return (
            format_html(
                "<p><small>You may look but not act ({} is needed to {}).</small></p>",
                applicable[0].permission.split(".")[-1],
                applicable[0].label.lower(),
            )
            if applicable
            else format_html("{}", "")
        )
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
    now: datetime,
) -> SafeString:
    events = [Event(obj.created_at, format_html("execution created (attempt {})", obj.attempt))]
    if obj.started_at:
        events.append(Event(obj.started_at, format_html("{}", "execution started")))
    for s in steps:
        name = link("stepexecution", s.pk, s.step_name)
        if s.started_at:
            events.append(Event(s.started_at, format_html("step {} started", name)))
        if s.ended_at:
            events.append(Event(s.ended_at, format_html("step {} ended {}", name, badge(s.status))))
        elif s.started_at and s.updated_at > s.started_at:
            events.append(
                Event(
                    s.updated_at,
                    format_html(
                        "step {} last write (chunk or checkpoint), {}", name, badge(s.status)
                    ),
                )
            )
    if obj.stop_requested_at:
        events.append(
            Event(obj.stop_requested_at, format_html("stop requested by {}", obj.stop_requested_by))
        )
    if obj.last_observed_at:
        events.append(Event(obj.last_observed_at, format_html("{}", "owner last observed")))
    for d in decisions:
        events.append(
            Event(
                d.decided_at,
                format_html(
                    "{}: {} → {} by {}{}",
                    link("recoverydecision", d.pk, f"recovery decision #{d.pk}"),
                    d.prior_status,
                    badge(d.resulting_status),
                    d.operator_reference,
                    " (an operator override)"
                    if d.eligibility == Eligibility.OPERATOR_OVERRIDE.value
                    else "",
                ),
            )
        )
    if obj.ended_at:
        events.append(Event(obj.ended_at, format_html("execution ended {}", badge(obj.status))))
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


def _ago(moment: datetime, now: datetime) -> str:
    return f"({human_short(now - moment)} ago)" if moment <= now else ""
