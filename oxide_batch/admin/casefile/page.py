"""The case file's facts, assembled: what the execution is and whether it is
stuck; the proposal's panel (:mod:`.recovery`) and the timeline
(:mod:`.timeline`) below them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import can_view_payload, link
from oxide_batch.admin.casefile.notifications import notifications
from oxide_batch.admin.casefile.recovery import recovery_panel
from oxide_batch.admin.casefile.restart import restart_facts
from oxide_batch.admin.casefile.timeline import timeline
from oxide_batch.admin.display import (
    badge,
    execution_failure,
    fate,
    inactivity,
    parameters,
    when,
)
from oxide_batch.admin.eligibility import decision_reason, lease
from oxide_batch.admin.failure_detail import shown_detail
from oxide_batch.admin.lost_write import marker_text, resolve_form
from oxide_batch.admin.skips import skip_rows
from oxide_batch.conf import batch_settings
from oxide_batch.domain.evidence import RecoveryProposal
from oxide_batch.domain.names import escape_invisible
from oxide_batch.domain.status import UNRESOLVED_STATUSES
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.selectors import casefile as casefile_reads
from oxide_batch.selectors import console, pages
from oxide_batch.selectors.failure_details import failure_detail
from oxide_batch.services import bootstrap

UNRESOLVED = frozenset(status.value for status in UNRESOLVED_STATUSES)


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
        last = console.execution_activity(obj)
    # The owner's lease when one is recorded (contract §2.5.3), else the stale threshold.
    threshold = proposal.threshold if proposal else batch_settings.RECOVERY_STALE_AFTER
    records = casefile_reads.case_records(obj)
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
        facts.append(("Failure", execution_failure(obj)))
        detail = failure_detail(obj.pk)  # one query, only for a failure
        if detail is not None:
            shown = shown_detail(detail, payload_reader=can_view_payload(request))
            facts.append(("Why it failed", shown))
    if obj.failed_at is not None:
        facts.append(
            (
                "Since the failure",
                format_html("failed {}; {}", when(obj.failed_at, now), fate(obj, now)),
            )
        )
    lost = getattr(obj, "lost_write", None)
    if isinstance(lost, dict):
        resolution = getattr(obj, "lost_write_resolution", None)
        shown = format_html("{}{}", marker_text(lost, resolution), resolve_form(request, obj))
        facts.append(("Lost write", shown))
    if records.decisions:
        facts.append(("Resolved by", _decisions(records.decisions)))
    facts.extend(restart_facts(obj))
    facts.append(("Skipped items", skipped_items(obj.pk, payload_reader=can_view_payload(request))))
    facts.append(("Notifications", notifications(obj.pk)))
    if proposal is not None:
        facts.append(("Recovery", recovery_panel(request, obj, proposal, now)))
    rows = format_html_join(
        "", '<div class="ob-fact"><dt>{}</dt><dd>{}</dd></div>', ((k, v) for k, v in facts)
    )
    return format_html(
        '<section class="ob-case" aria-labelledby="ob-case-title">'
        '<h2 id="ob-case-title">Case file</h2><dl class="ob-facts">{}</dl>'
        '<h3 id="ob-timeline-title">Timeline <small>(UTC, oldest first)</small></h3>{}</section>',
        rows,
        timeline(obj, records, now),
    )


# The skipped items the case file lists (oldest first); "See all" lists them all.
SKIPS_SHOWN = 20


def skipped_items(execution_id: int, *, payload_reader: bool) -> SafeString:
    """The items the execution's steps skipped (issue 42): how many, the first
    :data:`SKIPS_SHOWN` with their step, and a link to all of them — one
    bounded query (a count too only past the bound)."""
    total, rows = pages.execution_skips(execution_id, limit=SKIPS_SHOWN + 1)
    if not total:
        return format_html("{}", "None: no step skipped an item.")
    every = reverse("admin:oxide_batch_skip_changelist") + f"?execution={execution_id}"
    shown = min(total, SKIPS_SHOWN)
    return format_html(
        '<div class="ob-skips"><p>{} skipped by its steps\' skip policies{}. '
        '<a href="{}">See all</a></p>{}</div>',
        total,
        f" (the first {shown} below)" if total > shown else "",
        every,
        skip_rows(rows[:SKIPS_SHOWN], payload_reader=payload_reader, query="", step_names=True),
    )


def _last_activity(last: datetime | None, now: datetime) -> SafeString:
    return format_html(
        "{} <small>(the runtime's: its writes and the owner's observations; "
        "an operator's action never moves it)</small>",
        when(last, now),
    )


def _owner(obj: Any, now: datetime) -> SafeString:
    """Who claimed it — the claimant's user (contract §2.5.2) on the worker's
    host, its process id and client (decision 310: what the runtime said of
    itself with its claim) — and when the owner was last observed."""
    owned = bool(obj.owner_recorded)
    if not owned:
        return format_html("{}", "no owner recorded")
    claimant = format_html("{}{}", claimant_of(obj), worker_of(obj))
    if obj.last_observed_at is None:
        return format_html("{}, never observed since", claimant)
    return format_html("{}, last observed {}", claimant, when(obj.last_observed_at, now))


def claimant_of(obj: Any) -> SafeString:
    """ "claimed by user <name>" of a row of ``execution_list`` (its
    ``owner_name``), or the id when the account is gone."""
    name = getattr(obj, "owner_name", None)
    if name:
        return format_html("claimed by user <strong>{}</strong>", name)
    if obj.owner_user_id is not None:
        return format_html("claimed by user #{} (the account no longer exists)", obj.owner_user_id)
    return format_html("{}", "owner recorded (no runtime user)")


def worker_of(obj: Any) -> SafeString:
    """ " on <host>, pid 4122, oxide-batch 0.6.0 (worker loader-2)" of a row
    with the ``worker_*`` columns; empty when the runtime said nothing. Shown
    escaped (a row stored before the rule may hold a format character)."""
    identity = WorkerIdentity.from_row(vars(obj))
    if identity is None:
        return format_html("{}", "")
    parts = [
        format_html(
            ' on <strong class="ob-host">{}</strong>', escape_invisible(identity.host or "?")
        )
    ]
    if identity.pid is not None:
        parts.append(format_html(", pid <strong>{}</strong>", identity.pid))
    if identity.client:
        parts.append(format_html(", {}", escape_invisible(identity.client)))
    if identity.name:
        parts.append(format_html(" (worker <strong>{}</strong>)", escape_invisible(identity.name)))
    return format_html_join("", "{}", ((part,) for part in parts))


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
