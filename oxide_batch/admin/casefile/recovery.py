"""The recovery proposal inline on an unresolved execution's case file:
eligibility in words, each marker explained, the evidence, and the one
action that applies (or why the user may not take it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.actions.selection import action_url
from oxide_batch.admin.applicable import (
    EXECUTION_ACTIONS,
    ActionChoice,
    action_choices,
    recovery_overridable,
)
from oxide_batch.admin.base import can
from oxide_batch.admin.display import (
    human_short,
    when,
)
from oxide_batch.admin.eligibility import verdict
from oxide_batch.admin.proposals import latest_step_display
from oxide_batch.domain.evidence import UNKNOWN_EFFECT, RecoveryProposal
from oxide_batch.roles import PERMISSIONS

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


def recovery_panel(
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
    raised = [
        (MARKERS[k][0], _marker_text(k, evidence, now, claimant=getattr(obj, "owner_name", None)))
        for k, on in flags.items()
        if on
    ]
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


def lost_write(marker: dict[str, Any]) -> SafeString:
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


def _marker_text(key: str, evidence: Any, now: datetime, *, claimant: str | None = None) -> str:
    """A marker's meaning; the stop request's says how long ago it was made
    and what the runtime did about it so far; the owner's names the claimant
    user when the page read it (issue 39)."""
    if key == "owner_recorded" and claimant:
        return (
            f"a worker of user {claimant} claimed this execution. "
            + MARKERS[key][1].split(". ", 1)[1]
        )
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
        action_url(recover, [obj.pk], override=True),
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
