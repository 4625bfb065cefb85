"""Audited operator actions behind an intermediate confirmation page.

A changelist action (or a link on a detail page or the dashboard) leads to
``<model>/act/<action>/?ids=…``. GET renders the confirmation: per row the
observed version (for recover the proposal: evidence, markers, eligibility, and
the evidence digest in a hidden field) and an operation id generated for this
page, so a double submit replays instead of acting twice. POST parses, calls
one service per row with the logged-in user as actor, and reports per row what
happened (applied / replayed / the error code). Each action needs its own
permission (SPEC §10: ``recover_execution``, ``abandon_execution``,
``stop_execution``, ``hold_instance`` — all granted to batch-operator); without
it the action is not offered in the changelist and its view answers 403.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models
from oxide_batch.admin.base import can, change_url
from oxide_batch.admin.display import human
from oxide_batch.api.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    RECOVER_EXECUTION,
    STOP_EXECUTION,
)
from oxide_batch.domain.errors import OxideBatchError, RecoveryEvidenceStale, StaleVersion
from oxide_batch.domain.evidence import UNKNOWN_EFFECT
from oxide_batch.domain.operator import OperatorAction
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.retention import RetentionResult, RetentionService

MAX_ROWS = 100


@dataclass(frozen=True)
class ActionSpec:
    name: str
    label: str
    model: str
    permission: str
    reason: bool = False
    versioned: bool = True


EXECUTION_ACTIONS = {
    "recover": ActionSpec(
        "recover", "Recover (mark failed or abandon)", "jobexecution", RECOVER_EXECUTION, True
    ),
    "abandon": ActionSpec("abandon", "Abandon", "jobexecution", ABANDON_EXECUTION, True),
    "stop": ActionSpec("stop", "Request stop", "jobexecution", STOP_EXECUTION),
}
INSTANCE_ACTIONS = {
    "hold": ActionSpec("hold", "Place a retention hold", "jobinstance", HOLD_INSTANCE, True, False),
    "release": ActionSpec(
        "release", "Release the retention hold", "jobinstance", HOLD_INSTANCE, True, False
    ),
}


def action_url(spec: ActionSpec, ids: list[int]) -> str:
    return (
        reverse(f"admin:oxide_batch_{spec.model}_act", args=[spec.name])
        + "?ids="
        + ",".join(str(i) for i in ids)
    )


def _ids(text: str) -> list[int]:
    ids = [int(part) for part in text.split(",") if part.strip().isdigit()]
    return list(dict.fromkeys(ids))[:MAX_ROWS]


def _report(request: HttpRequest, label: str, run: Callable[[], Any]) -> None:
    """Run one row's service call and say what happened to it — the new state,
    what it was, the decision (with links) — or why not, in words."""
    try:
        result = run()
    except OxideBatchError as error:
        messages.error(request, f"{label}: {error.code} — {_refusal(error)}")
        return
    if result.outcome is Outcome.REPLAYED:
        messages.info(request, format_html("{}: replayed — {}", label, _outcome(result)))
    elif result.changed:
        messages.success(request, format_html("{}: applied — {}", label, _outcome(result)))
    else:
        messages.info(request, format_html("{}: nothing to change — {}", label, _outcome(result)))


def _outcome(result: Any) -> SafeString:
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
            '{} — <a href="{}">decision #{}</a>, {} unfinished step{} resolved to FAILED',
            now,
            change_url("recoverydecision", decision.id),
            decision.id,
            resolved,
            "" if resolved == 1 else "s",
        )
    return now


def _refusal(error: OxideBatchError) -> str:
    """A refusal in words for the operator (the code stays in front)."""
    if isinstance(error, StaleVersion):
        return (
            f"the row changed since the page loaded (now version {error.actual}, "
            f"the page showed {error.expected}); reload and decide again"
        )
    if isinstance(error, RecoveryEvidenceStale):
        return "the evidence changed since the page loaded; reload to see the new proposal"
    return error.message


def _default_reason(spec: ActionSpec, rows: list[dict[str, Any]]) -> str:
    """UNKNOWN_EFFECT when a recovered row carries the unknown-commit marker
    (SPEC §9: MARK_FAILED of an unknown commit needs it), else a neutral code."""
    if spec.name != "recover":
        return "OPERATOR_CONSOLE"
    if any(row["proposal"]["unknown_commit"] for row in rows):
        return UNKNOWN_EFFECT
    return "STALE_WORKER"


class _ActionsMixin:
    """Shared URL, permission and confirmation plumbing (mixed into a ModelAdmin)."""

    specs: dict[str, ActionSpec] = {}
    admin_site: admin.AdminSite
    model: Any

    # Django admin actions name the permission they need: has_<name>_permission.
    def has_recover_permission(self, request: HttpRequest) -> bool:
        return can(request, RECOVER_EXECUTION)

    def has_abandon_permission(self, request: HttpRequest) -> bool:
        return can(request, ABANDON_EXECUTION)

    def has_stop_permission(self, request: HttpRequest) -> bool:
        return can(request, STOP_EXECUTION)

    def has_hold_permission(self, request: HttpRequest) -> bool:
        return can(request, HOLD_INSTANCE)

    def get_urls(self) -> list[URLPattern]:
        urls: list[URLPattern] = super().get_urls()  # type: ignore[misc]
        name = f"oxide_batch_{self.model._meta.model_name}_act"
        view = self.admin_site.admin_view(self.confirm_view)
        return [path("act/<str:action>/", view, name=name), *urls]

    def _redirect(
        self, request: HttpRequest, spec: ActionSpec, queryset: QuerySet[Any]
    ) -> HttpResponse:
        ids = list(queryset.order_by("pk").values_list("pk", flat=True)[:MAX_ROWS])
        return HttpResponseRedirect(action_url(spec, ids))

    def action_links(self, obj: Any) -> SafeString:
        return format_html(
            '<span class="ob-actions">{}</span>',
            format_html_join(
                "",
                '<a class="button" href="{}">{}</a>',
                ((action_url(spec, [obj.pk]), spec.label) for spec in self.specs.values()),
            ),
        )

    def confirm_view(self, request: HttpRequest, action: str) -> HttpResponse:
        spec = self.specs.get(action)
        if spec is None:
            raise PermissionDenied
        if not can(request, spec.permission):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        ids = _ids(source.get("ids", ""))
        if request.method == "POST":
            self.apply(request, spec, ids)
            if len(ids) == 1:
                return HttpResponseRedirect(
                    reverse(f"admin:oxide_batch_{spec.model}_change", args=[ids[0]])
                )
            return HttpResponseRedirect(reverse(f"admin:oxide_batch_{spec.model}_changelist"))
        rows = self.rows(spec, ids)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Confirm: {spec.label}",
            "opts": self.model._meta,
            "spec": spec,
            "rows": rows,
            "ids": ",".join(str(r["id"]) for r in rows),
            "categories": [c.value for c in FailureCategory],
            "dispositions": [d.value for d in RecoveryDisposition],
            "default_reason": _default_reason(spec, rows),
            "changelist": reverse(f"admin:oxide_batch_{spec.model}_changelist"),
        }
        return TemplateResponse(request, "admin/oxide_batch/confirm_action.html", context)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def apply(self, request: HttpRequest, spec: ActionSpec, ids: list[int]) -> None:
        raise NotImplementedError


class ExecutionActions(_ActionsMixin):
    specs = EXECUTION_ACTIONS
    actions: Any = ["recover_action", "abandon_action", "stop_action"]

    @admin.action(description="Recover selected executions…", permissions=["recover"])
    def recover_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["recover"], queryset)

    @admin.action(description="Abandon selected executions…", permissions=["abandon"])
    def abandon_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["abandon"], queryset)

    @admin.action(description="Request stop of selected executions…", permissions=["stop"])
    def stop_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["stop"], queryset)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        found = (
            models.JobExecution.objects.filter(pk__in=ids)
            .order_by("pk")
            .values("id", "job_name", "attempt", "status", "version")
        )
        rows: list[dict[str, Any]] = [
            {**row, "operation_id": f"console-{uuid.uuid4().hex}"} for row in found
        ]
        if spec.name == "recover":
            service = OperatorService(DjangoJobRepository())
            for row in rows:
                proposal = service.propose(int(row["id"]))
                evidence = proposal.evidence
                row["proposal"] = {
                    "eligible": proposal.eligible,
                    "reason_code": proposal.reason_code,
                    "inactive_for": human(proposal.inactive_for),
                    "threshold": human(proposal.threshold),
                    "digest": proposal.evidence_digest,
                    "version": proposal.version,
                    "unknown_commit": proposal.unknown_commit,
                    "owner_recorded": evidence.owner_recorded,
                    "stop_requested": evidence.stop_requested_at is not None,
                    "last_activity_at": evidence.last_activity_at,
                    "newest_step_write_at": evidence.newest_step_write_at,
                    "latest_step": evidence.latest_step,
                    "completed_partition": evidence.completed_partition,
                    "committed_flow_decision": evidence.committed_flow_decision,
                }
                row["version"] = proposal.version
        return rows

    def apply(self, request: HttpRequest, spec: ActionSpec, ids: list[int]) -> None:
        service = OperatorService(
            DjangoJobRepository(), stale_after=settings.OXIDE_BATCH_RECOVERY_STALE_AFTER
        )
        actor = Actor.for_user(request.user)
        post = request.POST
        reason = post.get("reason_code", "").strip()
        for pk in ids:
            label = f"execution #{pk}"
            version_text = post.get(f"version_{pk}", "")
            operation_id = post.get(f"operation_{pk}", "")
            if not version_text.isdigit() or not operation_id:
                messages.error(request, f"{label}: invalid_request")
                continue
            version = int(version_text)
            if spec.name == "stop":
                run = partial(
                    service.stop,
                    pk,
                    expected_version=version,
                    actor=actor,
                    operation_id=operation_id,
                )
            elif spec.name == "abandon":
                run = partial(
                    service.abandon,
                    pk,
                    expected_version=version,
                    reason_code=reason,
                    actor=actor,
                    operation_id=operation_id,
                )
            else:
                try:
                    disposition = RecoveryDisposition(
                        post.get("disposition", RecoveryDisposition.MARK_FAILED.value)
                    )
                    category_text = post.get("failure_category", "")
                    category = FailureCategory(category_text) if category_text else None
                except ValueError:
                    messages.error(request, f"{label}: invalid_request")
                    continue
                run = partial(
                    service.recover,
                    pk,
                    expected_version=version,
                    disposition=disposition,
                    reason_code=reason,
                    evidence_digest=post.get(f"digest_{pk}", ""),
                    actor=actor,
                    operation_id=operation_id,
                    failure_category=category,
                )
            _report(request, label, run)


class InstanceActions(_ActionsMixin):
    specs = INSTANCE_ACTIONS
    actions: Any = ["hold_action", "release_action"]

    @admin.action(description="Place a retention hold on selected instances…", permissions=["hold"])
    def hold_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, INSTANCE_ACTIONS["hold"], queryset)

    @admin.action(description="Release the hold of selected instances…", permissions=["hold"])
    def release_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, INSTANCE_ACTIONS["release"], queryset)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        found = (
            models.JobInstance.objects.filter(pk__in=ids)
            .order_by("pk")
            .values("id", "job_name", "hold_actor", "hold_reason_code", "hold_placed_at")
        )
        return [{**row, "operation_id": f"console-{uuid.uuid4().hex}"} for row in found]

    def apply(self, request: HttpRequest, spec: ActionSpec, ids: list[int]) -> None:
        service = RetentionService()
        actor = Actor.for_user(request.user)
        reason = request.POST.get("reason_code", "").strip()
        act = service.place_hold if spec.name == "hold" else service.release_hold
        for pk in ids:
            operation_id = request.POST.get(f"operation_{pk}", "")
            run = partial(act, pk, actor=actor, reason_code=reason, operation_id=operation_id)
            _report(request, f"instance #{pk}", run)
