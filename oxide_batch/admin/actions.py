"""Audited operator actions behind an intermediate confirmation page.

A changelist action (or a link on a detail page or the dashboard) leads to
``<model>/act/<action>/?ids=…``. GET renders the confirmation: every selected
row, and for each either the form inputs (observed version, an operation id
generated for this page, for recover the evidence digest) or why the action
does not apply (:mod:`oxide_batch.admin.applicable`) — such a row is never
submitted, and without any row to act on there is no confirm button. For
recover each row shows its proposal; the proposals of all rows are read
together (``OperatorService.propose_many``), so the page runs the same number
of queries for 1 row as for 100. A row to recover that is only not stale yet
(SPEC §11) carries its inputs too, posted apart (``overridable``): it is
recovered only when the operator ticks the override and gives a note, which
the service records on the decision; without the override it stays untouched
and its row says so.

POST validates one :class:`~oxide_batch.admin.forms.ActionForm` for all rows
first: invalid input re-renders the page with the errors beside their fields
(200, nothing applied). A valid form calls one service per row with the
logged-in user as actor and reports per row what happened — applied / replayed
/ nothing to change with what the row is now, or refused with the error code
and what it means; a double submit replays instead of acting twice.

Each action needs its own permission (SPEC §10: ``recover_execution``,
``abandon_execution``, ``stop_execution``, ``hold_instance`` — all granted to
batch-operator); without it the action is not offered in the changelist and its
view answers 403.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.applicable import (
    EXECUTION_ACTIONS,
    INSTANCE_ACTIONS,
    ActionChoice,
    ActionSpec,
    action_choices,
    action_choices_many,
    applicable_actions,
    execution_choices,
    recovery_overridable,
)
from oxide_batch.admin.base import can, change_url, parse_id
from oxide_batch.admin.display import badge, when
from oxide_batch.admin.forms import ActionForm
from oxide_batch.admin.proposals import proposal_display
from oxide_batch.admin.results import execution_now, report_left_out, report_row
from oxide_batch.api.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    RECOVER_EXECUTION,
    STOP_EXECUTION,
)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.evidence import UNKNOWN_EFFECT, RecoveryProposal
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.audit import Actor
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.retention import RetentionService

__all__ = [
    "EXECUTION_ACTIONS",
    "INSTANCE_ACTIONS",
    "ActionSpec",
    "ExecutionActions",
    "InstanceActions",
    "action_choices",
    "action_url",
    "applicable_actions",
]

MAX_ROWS = 100


def action_url(spec: ActionSpec, ids: list[int]) -> str:
    return (
        reverse(f"admin:oxide_batch_{spec.model}_act", args=[spec.name])
        + "?ids="
        + ",".join(str(i) for i in ids)
    )


def _ids(text: str) -> list[int]:
    """The ids of a query string or form field; anything that cannot be an id is
    dropped (an id the database never holds would only be a 500 further on)."""
    ids = [pk for pk in (parse_id(part) for part in text.split(",")) if pk is not None]
    return list(dict.fromkeys(ids))[:MAX_ROWS]


# -- the confirmation page ----------------------------------------------------------

INTRO = {
    "recover": "if a row changes before you confirm, it is refused (stale_version, or "
    "recovery_evidence_stale when its evidence moved) and nothing happens to it.",
    "abandon": "if a row changes before you confirm, it is refused (stale_version) and "
    "nothing happens to it. An abandoned execution's instance never runs again.",
    "stop": "if a row changes before you confirm, it is refused (stale_version) and nothing "
    "happens to it. A stop request changes neither status nor version: the runtime "
    "stops at its next control observation.",
    "hold": "Holds have no version: the hold is placed on each instance as it is when you "
    "confirm. A held instance is never purged; its executions still run and recover.",
    "release": "Holds have no version: the hold is released from each instance as it is "
    "when you confirm; the instance can then be purged by the retention rules.",
}


def _default_reason(spec: ActionSpec, unknown_commit: bool) -> str:
    """UNKNOWN_EFFECT when a row to recover carries the unknown-commit marker
    (SPEC §9: MARK_FAILED of an unknown commit needs it), else a neutral code."""
    if spec.name != "recover":
        return "OPERATOR_CONSOLE"
    return UNKNOWN_EFFECT if unknown_commit else "STALE_WORKER"


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

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        if obj is not None:
            obj.console_request = request  # for action_links, rendered from the object
        return super().render_change_form(  # type: ignore[misc]
            request, context, add, change, form_url, obj
        )

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

    # -- which actions a row offers -------------------------------------------------

    def applicable_actions(self, obj: Any) -> list[ActionSpec]:
        """The actions that apply to ``obj`` now (see :mod:`.applicable`)."""
        return applicable_actions(obj)

    def action_links(
        self,
        obj: Any,
        request: HttpRequest | None = None,
        *,
        proposal: RecoveryProposal | None = None,
    ) -> SafeString:
        """A button per action that applies to ``obj``, and for each that does
        not, a line saying why. With ``request``, actions the user may not take
        are left out altogether; ``proposal``, when the page has read it, saves
        reading it again. Without ``request``, the one the change view attached
        to the object is used (readonly fields are rendered from the object)."""
        request = request or getattr(obj, "console_request", None)
        choices = [
            choice
            for choice in action_choices(obj, proposal=proposal)
            if request is None or can(request, choice.spec.permission)
        ]
        offered = [(action_url(c.spec, [obj.pk]), c.spec.label) for c in choices if c.applies]
        buttons = (
            format_html_join("", '<a class="button" href="{}">{}</a>', offered)
            if offered
            else format_html("{}", "No action applies to this row now.")
        )
        reasons = [(c.spec.label, c.why_not) for c in choices if not c.applies]
        return format_html(
            '<span class="ob-actions">{}</span>{}',
            buttons,
            format_html(
                '<ul class="ob-not-offered">{}</ul>',
                format_html_join("", "<li>{}: {}</li>", reasons),
            )
            if reasons
            else "",
        )

    # -- the view -------------------------------------------------------------------

    def confirm_view(self, request: HttpRequest, action: str) -> HttpResponse:
        spec = self.specs.get(action)
        if spec is None or not can(request, spec.permission):
            raise PermissionDenied
        if request.method == "POST":
            acting = _ids(request.POST.get("ids", ""))
            overridable = _ids(request.POST.get("overridable", ""))
            rows = self.rows(spec, _ids(request.POST.get("selected", "")) or acting + overridable)
            form = self._form(spec, acting, rows, data=request.POST, overridable=overridable)
            if form.is_valid():
                self.apply(request, spec, form)
                if len(form.field_ids) == 1:
                    return HttpResponseRedirect(change_url(spec.model, form.field_ids[0]))
                return HttpResponseRedirect(reverse(f"admin:oxide_batch_{spec.model}_changelist"))
            return self._render(request, spec, rows, form)
        rows = self.rows(spec, _ids(request.GET.get("ids", "")))
        acting = [row["id"] for row in rows if row["choice"].applies]
        overridable = [row["id"] for row in rows if row.get("overridable")]
        return self._render(
            request, spec, rows, self._form(spec, acting, rows, overridable=overridable)
        )

    def _form(
        self,
        spec: ActionSpec,
        acting: list[int],
        rows: list[dict[str, Any]],
        data: Any = None,
        *,
        overridable: list[int] | None = None,
    ) -> ActionForm:
        marked = [row["id"] for row in rows if row.get("unknown_commit")]
        overridable = overridable or []
        initial: dict[str, Any] = {}
        if data is None:
            by_id = {row["id"]: row for row in rows}
            offered = {*acting, *overridable}
            initial["reason_code"] = _default_reason(spec, bool(set(marked) & offered))
            for pk in offered:
                initial[f"operation_{pk}"] = f"console-{uuid.uuid4().hex}"
                initial[f"version_{pk}"] = by_id[pk].get("version")
                initial[f"digest_{pk}"] = by_id[pk].get("digest")
        return ActionForm(
            data,
            row_ids=acting,
            reason=spec.reason,
            versioned=spec.versioned,
            recover=spec.name == "recover",
            unknown_commit=marked,
            overridable=overridable,
            initial=initial,
        )

    def _render(
        self, request: HttpRequest, spec: ActionSpec, rows: list[dict[str, Any]], form: ActionForm
    ) -> HttpResponse:
        inputs = set(form.field_ids)
        for row in rows:
            row["fields"] = form.row_fields(row["id"]) if row["id"] in inputs else None
            row["errors"] = form.row_errors(row["id"]) if row["id"] in inputs else []
            row["override"] = row["id"] in form.overridable
        context = {
            **self.admin_site.each_context(request),
            "title": f"Confirm: {spec.label}",
            "opts": self.model._meta,
            "spec": spec,
            "rows": rows,
            "form": form,
            "intro": INTRO[spec.name],
            "acting": len(form.row_ids),
            "overridable": len(form.overridable),
            "confirmable": len(inputs),
            "ids": ",".join(str(pk) for pk in form.row_ids),
            "overridable_ids": ",".join(str(pk) for pk in form.overridable),
            "selected": ",".join(str(row["id"]) for row in rows),
            "unknown_commit_hint": spec.name == "recover"
            and any(row.get("unknown_commit") for row in rows if row["id"] in inputs),
            "changelist": reverse(f"admin:oxide_batch_{spec.model}_changelist"),
        }
        return TemplateResponse(request, "admin/oxide_batch/confirm_action.html", context)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> None:
        raise NotImplementedError


def _choice(choices: list[ActionChoice], spec: ActionSpec) -> ActionChoice:
    return next(choice for choice in choices if choice.spec == spec)


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
        """The selected executions (one query) with the action's applicability;
        for recover also the proposals, read together (one more unit of work)."""
        found = list(
            models.JobExecution.objects.filter(pk__in=ids)
            .order_by("pk")
            .values(
                "id",
                "job_name",
                "attempt",
                "status",
                "version",
                "stop_requested_at",
                "stop_requested_by",
            )
        )
        now = timezone.now()
        # Only recover's choice needs the proposals (read together); abandon's
        # and stop's follow from the row itself.
        choices = (
            action_choices_many(found)
            if spec.name == "recover"
            else {row["id"]: execution_choices(row, read_proposal=False, now=now) for row in found}
        )
        rows: list[dict[str, Any]] = []
        for row in found:
            choice = _choice(choices[row["id"]], spec)
            shown: dict[str, Any] = {
                **row,
                "choice": choice,
                "badge": badge(row["status"]),
                "stop": when(row["stop_requested_at"], now)
                if row["stop_requested_at"] is not None
                else None,
            }
            proposal = choice.proposal
            if spec.name == "recover" and proposal is not None:
                # The version the digest was computed at is the one posted back.
                shown.update(
                    version=proposal.version,
                    digest=proposal.evidence_digest,
                    unknown_commit=proposal.unknown_commit,
                    overridable=recovery_overridable(proposal),
                    proposal=proposal_display(proposal, now),
                )
            rows.append(shown)
        return rows

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> None:
        service = OperatorService(
            DjangoJobRepository(), stale_after=batch_settings.RECOVERY_STALE_AFTER
        )
        actor = Actor.for_user(request.user)
        for row in form.row_inputs():
            version = int(row.version or 0)
            run: Callable[[], Any]
            if spec.name == "stop":
                run = partial(
                    service.stop,
                    row.id,
                    expected_version=version,
                    actor=actor,
                    operation_id=row.operation_id,
                )
            elif spec.name == "abandon":
                run = partial(
                    service.abandon,
                    row.id,
                    expected_version=version,
                    reason_code=form.reason_code,
                    actor=actor,
                    operation_id=row.operation_id,
                )
            else:
                run = partial(
                    service.recover,
                    row.id,
                    expected_version=version,
                    disposition=form.disposition,
                    reason_code=form.reason_code,
                    evidence_digest=row.evidence_digest or "",
                    actor=actor,
                    operation_id=row.operation_id,
                    failure_category=form.failure_category
                    if form.disposition is RecoveryDisposition.MARK_FAILED
                    else None,
                    override_note=row.override_note,
                )
            report_row(request, f"execution #{row.id}", run, partial(execution_now, row.id))
        for pk in form.left_out():
            report_left_out(request, f"execution #{pk}")


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
        now = timezone.now()
        return [
            {
                **row,
                "choice": _choice(action_choices(row), spec),
                "held_since": when(row["hold_placed_at"], now),
            }
            for row in found
        ]

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> None:
        service = RetentionService()
        actor = Actor.for_user(request.user)
        act = service.place_hold if spec.name == "hold" else service.release_hold
        for row in form.row_inputs():
            run = partial(
                act,
                row.id,
                actor=actor,
                reason_code=form.reason_code,
                operation_id=row.operation_id,
            )
            report_row(request, f"instance #{row.id}", run)
