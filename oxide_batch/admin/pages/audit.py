"""The audit rows' pages: recovery decisions (with the evidence they were
taken on), operator requests and retention records — append-only, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import (
    ReadOnlyAdmin,
    link,
)
from oxide_batch.admin.eligibility import decision_reason, recorded_evidence
from oxide_batch.admin.pages.common import moment
from oxide_batch.admin.pages.steps import StepExecutionAdmin
from oxide_batch.selectors import pages


@admin.register(models.RecoveryDecision)
class RecoveryDecisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "execution",
        "prior_status",
        "resulting_status",
        "reason_code",
        "allowed",
        "actor",
        "decided",
    )
    list_filter = ("resulting_status",)
    search_fields = ("=job_execution_id",)
    ordering = ("-decided_at", "-id")
    fields = (
        "id",
        "execution",
        "execution_version",
        "prior_status",
        "resulting_status",
        "reason_code",
        "allowed_why",
        "evidence_taken",
        "note",
        "actor",
        "operator_user_id",
        "decided",
        "resolved_steps",
        "operator_request",
    )
    execution = StepExecutionAdmin.execution
    decided = moment("decided_at", "decided")

    @admin.display(description="allowed because", ordering="eligibility")
    def allowed(self, obj: models.RecoveryDecision) -> SafeString:
        """Why the recovery was allowed (the lease expired, inactive, UNKNOWN),
        or that an operator's override allowed it, with its note (cut)."""
        return decision_reason(obj.eligibility, obj.override_note)

    @admin.display(description="allowed because")
    def allowed_why(self, obj: models.RecoveryDecision) -> SafeString:
        """:meth:`allowed` on the decision's page, whose next field is the note."""
        return decision_reason(obj.eligibility, obj.override_note, note=0)

    @admin.display(description="evidence it was taken on")
    def evidence_taken(self, obj: models.RecoveryDecision) -> SafeString:
        """The evidence the decision recorded, with its times, read against the
        decision's own time (never now: what the operator or watchdog saw)."""
        return recorded_evidence(obj.evidence, obj.decided_at)

    @admin.display(description="override note")
    def note(self, obj: models.RecoveryDecision) -> str:
        return obj.override_note or "— (no override)"

    @admin.display(description="actor", ordering="operator_reference")
    def actor(self, obj: models.RecoveryDecision) -> str:
        """The audited operator, named as on every audit row (the column keeps
        its first name, ``operator_reference``)."""
        return obj.operator_reference

    @admin.display(description="operator request")
    def operator_request(self, obj: models.RecoveryDecision) -> SafeString:
        """The audited request that made this decision (one indexed query)."""
        return link(
            "operatorrequest", pages.recover_request_id(obj.job_execution_id, obj.execution_version)
        )

    @admin.display(description="resolved steps (→ FAILED)")
    def resolved_steps(self, obj: models.RecoveryDecision) -> SafeString:
        ids = obj.resolved_step_ids or []
        if not ids:
            return format_html("{}", "none")
        return format_html_join(", ", "{}", ((link("stepexecution", pk),) for pk in ids))


@admin.register(models.OperatorRequest)
class OperatorRequestAdmin(ReadOnlyAdmin):
    # The reason code is what an operator looks for first after the action; the
    # outcome, the status it left and a refusal's code share a cell, and long
    # codes and actors wrap, so the list fits 1440 px beside the navigation and
    # the filters (issue 39).
    list_display = (
        "id",
        "action",
        "execution",
        "reason_code",
        "outcome_cell",
        "actor",
        "requested",
    )
    list_filter = ("action", "outcome")
    search_fields = ("=job_execution_id",)
    ordering = ("-requested_at", "-id")
    fields = (
        *models.REQUEST_COLUMNS,
        "execution",
        "observed_version",
        "prior_status",
        "result_status",
        "outcome",
        "changed",
        "rejection_code",
        "requested",
        "decision",
    )
    requested = moment("requested_at", "requested")

    @admin.display(description="execution")
    def execution(self, obj: models.OperatorRequest) -> SafeString:
        return link("jobexecution", obj.job_execution_id)

    @admin.display(description="outcome", ordering="outcome")
    def outcome_cell(self, obj: models.OperatorRequest) -> SafeString:
        """The outcome, with the status it left (applied) or, under it, the
        refusal's code (rejected)."""
        if obj.rejection_code:
            return format_html("{}<br><code>{}</code>", obj.outcome, obj.rejection_code)
        if obj.result_status:
            return format_html("{} → {}", obj.outcome, obj.result_status)
        return format_html("{}", obj.outcome)

    @admin.display(description="recovery decision")
    def decision(self, obj: models.OperatorRequest) -> SafeString:
        """The decision an applied recovery wrote (one query on its unique key)."""
        if (
            obj.action != "RECOVER"
            or obj.outcome != "APPLIED"
            or obj.job_execution_id is None
            or obj.observed_version is None
        ):
            return format_html("{}", "—")
        decision = pages.decision_of(obj.job_execution_id, obj.observed_version)
        if decision is None:
            return link("recoverydecision", None)
        return format_html(
            "{} — allowed because: {}",
            link("recoverydecision", decision["id"]),
            decision_reason(decision["eligibility"], decision["override_note"], note=None),
        )


@admin.register(models.RetentionRecord)
class RetentionRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "action",
        "actor",
        "instance",
        "reason_code",
        "outcome",
        "rejection_code",
        "changed",
        "applied",
    )
    list_filter = ("action", "outcome")
    search_fields = ("=job_instance_id",)
    ordering = ("-applied_at", "-id")
    fields = (
        *models.REQUEST_COLUMNS,
        "instance",
        "outcome",
        "rejection_code",
        "changed",
        "plan_digest",
        "deleted_job_executions",
        "deleted_job_instances",
        "applied",
    )
    applied = moment("applied_at", "applied")

    @admin.display(description="instance")
    def instance(self, obj: models.RetentionRecord) -> SafeString:
        return link("jobinstance", obj.job_instance_id)
