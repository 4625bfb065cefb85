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
(contract §2.5.5) carries its inputs too, posted apart (``overridable``): it is
recovered only when the operator ticks the override and gives a note, which
the service records on the decision; without the override it stays untouched
and its row says so.

The page says what will happen to each row (for recover the status it ends
in with each disposition and the unfinished steps that end FAILED; for abandon,
stop, hold and release what changes and what does not), and the confirm button
names the action and the rows ("Mark #7 FAILED", "Abandon #7", "Request stop
of #7"); for recover without a disposition chosen it reads "Apply the chosen
disposition to #7", and a small script (``oxide_batch/confirm.js``) follows the
choice and disables the category for ABANDON. Nothing the operator decides is
pre-filled: a page submitted as it came applies nothing.

The selection is read from ``ids`` (comma separated, or repeated): ids that
cannot be rows, ids with no row ("no execution #9 (purged or never
existed)") and a selection over :data:`MAX_ROWS` are said on the page; a
query string over Django's field limit is a framed 400 saying so.

POST validates one :class:`~oxide_batch.admin.forms.ActionForm` for all rows
first: invalid input re-renders the page with the errors beside their fields
(200, nothing applied). A valid form calls one service per row with the
logged-in user as actor and reports per row what happened — applied / replayed
/ nothing to change with what the row is now, or refused with the error code
and what it means; a double submit replays instead of acting twice. When a row
is refused because it changed since the page loaded, the page is shown again
from one fresh read and the refusal states that read's values.

Each action needs its own permission (contract §4.1: ``recover_execution``,
``abandon_execution``, ``stop_execution``, ``hold_instance`` — all granted to
batch-operator); without it the action is not offered in the changelist and its
view raises ``PermissionDenied`` naming the permission
(``oxide_batch.recover_execution``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied, TooManyFieldsSent
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
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
from oxide_batch.admin.forms import ABANDON, MARK_FAILED, ActionForm, seal
from oxide_batch.admin.proposals import proposal_display, recovery_outcome, unfinished_steps
from oxide_batch.admin.results import Attempt, attempt, report_left_out, say, snapshot_now
from oxide_batch.domain.evidence import RecoveryProposal
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    RECOVER_EXECUTION,
    STOP_EXECUTION,
    perm,
)
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor

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
# Ids named on the page when the selection holds some that are no row.
NOTED = 10


def action_url(spec: ActionSpec, ids: list[int], *, more: bool = False) -> str:
    return (
        reverse(f"admin:oxide_batch_{spec.model}_act", args=[spec.name])
        + "?ids="
        + ",".join(str(i) for i in ids)
        + ("&more=1" if more else "")
    )


@dataclass
class Selection:
    """The ids a page was given: the first :data:`MAX_ROWS` that can be ids,
    the texts that cannot (dropped), and whether more were given."""

    ids: list[int] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    over: int = 0  # how many ids beyond MAX_ROWS were left out


def _selection(values: list[str]) -> Selection:
    """The ids of a query string or form field (``ids=1,2`` or ``ids=1&ids=2``);
    anything that cannot be an id is dropped and said (an id the database never
    holds would only be a 500 further on)."""
    selection = Selection()
    seen: set[int] = set()
    for text in values:
        for part in text.split(","):
            if not part.strip():
                continue
            pk = parse_id(part)
            if pk is None:
                selection.dropped.append(part.strip()[:40])
            elif pk not in seen:
                seen.add(pk)
                selection.ids.append(pk)
    selection.over = max(0, len(selection.ids) - MAX_ROWS)
    selection.ids = selection.ids[:MAX_ROWS]
    return selection


def _ids(text: str) -> list[int]:
    return _selection([text]).ids


def _targets(ids: list[int], model: str) -> str:
    """``#7``, ``#7 and #9``, ``#7, #9 and #12``, or ``5 executions``."""
    noun = "execution" if model == "jobexecution" else "instance"
    if len(ids) > 3:
        return f"{len(ids)} {noun}s"
    named = [f"#{pk}" for pk in ids]
    text = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return text if noun == "execution" else f"{noun}{'s' if len(ids) > 1 else ''} {text}"


BUTTON = {
    "abandon": "Abandon {}",
    "stop": "Request stop of {}",
    "hold": "Place a hold on {}",
    "release": "Release the hold of {}",
    # recover: by the chosen disposition, "" while none is chosen
    MARK_FAILED: "Mark {} FAILED",
    ABANDON: "Abandon {}",
    "": "Apply the chosen disposition to {}",
}


def button_labels(spec: ActionSpec, ids: list[int]) -> dict[str, str]:
    """The confirm button's text for ``ids``: the action and the rows; for
    recover one per disposition ("" while none is chosen)."""
    rows = _targets(ids, spec.model) if ids else "the selected rows"
    if spec.name != "recover":
        return {"": BUTTON[spec.name].format(rows)}
    return {key: BUTTON[key].format(rows) for key in (MARK_FAILED, ABANDON, "")}


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


TOO_MANY_FIELDS = (
    "This link names more ids than the console accepts in one request (at most {max_fields} "
    "query fields): at most {max_rows} rows can be confirmed at once. Select fewer rows in "
    "the list, or name them as one comma-separated ids=1,2,3."
)


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
        ids = list(queryset.order_by("pk").values_list("pk", flat=True)[: MAX_ROWS + 1])
        return HttpResponseRedirect(action_url(spec, ids[:MAX_ROWS], more=len(ids) > MAX_ROWS))

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
        if spec is None:
            raise Http404(f"No console action {action!r}.")
        if not can(request, spec.permission):
            raise PermissionDenied(perm(spec.permission))
        try:
            query = request.POST if request.method == "POST" else request.GET
            values = query.getlist("ids")
        except TooManyFieldsSent:
            return self._too_many(request, spec)
        if request.method == "POST":
            acting = _ids(request.POST.get("ids", ""))
            overridable = _ids(request.POST.get("overridable", ""))
            selected = _ids(request.POST.get("selected", "")) or acting + overridable
            # A bound form needs only what the page posted back (sealed): the
            # rows — and a recovery's proposals — are read again only to show
            # the page once more; an applied action computes its proposal once,
            # under the service's lock.
            form = self._form(spec, acting, [], data=request.POST, overridable=overridable)
            if not form.is_valid():
                return self._render(request, spec, self.rows(spec, selected), form)
            attempts = self.apply(request, spec, form)
            if any(done.stale for done in attempts):
                return self._again(request, spec, selected, attempts, form)
            for done in attempts:
                say(request, done)
            self._left_out(request, spec, form)
            if len(form.field_ids) == 1:
                return HttpResponseRedirect(change_url(spec.model, form.field_ids[0]))
            return HttpResponseRedirect(reverse(f"admin:oxide_batch_{spec.model}_changelist"))
        selection = _selection(values)
        rows = self.rows(spec, selection.ids)
        acting = [row["id"] for row in rows if row["choice"].applies]
        overridable = [row["id"] for row in rows if row.get("overridable")]
        return self._render(
            request,
            spec,
            rows,
            self._form(spec, acting, rows, overridable=overridable),
            selection=selection,
            more=request.GET.get("more") == "1",
        )

    def _again(
        self,
        request: HttpRequest,
        spec: ActionSpec,
        selected: list[int],
        attempts: list[Attempt],
        form: ActionForm,
    ) -> HttpResponse:
        """Some row changed since the page loaded: read the rows once more and
        show the page again from that read — the refusals state its values
        (one snapshot for the message and the page), with a fresh form to
        decide again (nothing chosen)."""
        rows = self.rows(spec, selected)
        by_id = {row["id"]: row for row in rows}
        for done in attempts:
            say(request, done, partial(snapshot_now, by_id.get(done.pk)) if done.stale else None)
        self._left_out(request, spec, form)
        acting = [row["id"] for row in rows if row["choice"].applies]
        overridable = [row["id"] for row in rows if row.get("overridable")]
        return self._render(
            request, spec, rows, self._form(spec, acting, rows, overridable=overridable)
        )

    def _left_out(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> None:
        for pk in form.left_out():
            report_left_out(request, f"execution #{pk}")

    def _too_many(self, request: HttpRequest, spec: ActionSpec) -> HttpResponse:
        """A query string over ``DATA_UPLOAD_MAX_NUMBER_FIELDS``: a 400 in the
        console's frame saying how many rows a page takes."""
        context = {
            **self.admin_site.each_context(request),
            "title": f"Confirm: {spec.label}",
            "opts": self.model._meta,
            "spec": spec,
            "refused": TOO_MANY_FIELDS.format(
                max_fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS, max_rows=MAX_ROWS
            ),
            "changelist": reverse(f"admin:oxide_batch_{spec.model}_changelist"),
        }
        return TemplateResponse(
            request, "admin/oxide_batch/confirm_action.html", context, status=400
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
        """The page's form; unbound, it carries only what the page observed
        (operation ids, versions, digests and their seals) — nothing the
        operator decides."""
        # The rows with the unknown-commit marker as the page showed them
        # (posted back, checked by the seals), else as read now.
        marked = (
            _ids(data.get("marked", ""))
            if data is not None
            else [row["id"] for row in rows if row.get("unknown_commit")]
        )
        overridable = overridable or []
        initial: dict[str, Any] = {}
        if data is None:
            by_id = {row["id"]: row for row in rows}
            for pk in (*acting, *overridable):
                version, digest = by_id[pk].get("version"), by_id[pk].get("digest")
                initial[f"operation_{pk}"] = f"console-{uuid.uuid4().hex}"
                initial[f"version_{pk}"] = version
                initial[f"digest_{pk}"] = digest
                initial[f"seal_{pk}"] = seal(pk, version, digest, pk in marked)
        return ActionForm(
            data,
            row_ids=acting,
            reason=spec.reason,
            versioned=spec.versioned,
            recover=spec.name == "recover",
            action=spec.name,
            unknown_commit=marked,
            overridable=overridable,
            initial=initial,
        )

    def _render(
        self,
        request: HttpRequest,
        spec: ActionSpec,
        rows: list[dict[str, Any]],
        form: ActionForm,
        *,
        selection: Selection | None = None,
        more: bool = False,
    ) -> HttpResponse:
        inputs = set(form.field_ids)
        chosen = form.chosen_disposition() if spec.name == "recover" else None
        for row in rows:
            row["fields"] = form.row_fields(row["id"]) if row["id"] in inputs else None
            row["errors"] = form.row_errors(row["id"]) if row["id"] in inputs else []
            row["override"] = row["id"] in form.overridable
        # The rows the button acts on: the eligible ones; the override's too
        # when it is ticked or when they are all there is.
        overridden = form.is_bound and bool(form.data.get("override"))
        targets = form.field_ids if overridden or not form.row_ids else form.row_ids
        labels = button_labels(spec, targets)
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
            "marked": ",".join(str(pk) for pk in sorted(form.unknown_commit)),
            "selected": ",".join(str(row["id"]) for row in rows),
            "unknown_commit_hint": spec.name == "recover" and bool(form.unknown_commit),
            "changelist": reverse(f"admin:oxide_batch_{spec.model}_changelist"),
            "chosen": chosen or "",
            "button": labels.get(chosen or "", labels[""]),
            "button_labels": json.dumps(labels) if spec.name == "recover" else "",
            "button_labels_override": json.dumps(button_labels(spec, form.field_ids))
            if spec.name == "recover" and form.overridable and form.row_ids
            else "",
            "notes": self._notes(spec, rows, selection, more),
        }
        return TemplateResponse(request, "admin/oxide_batch/confirm_action.html", context)

    def _notes(
        self,
        spec: ActionSpec,
        rows: list[dict[str, Any]],
        selection: Selection | None,
        more: bool,
    ) -> list[str]:
        """What the page was given that it does not show: ids with no row,
        texts that are no id, rows beyond :data:`MAX_ROWS`."""
        if selection is None:
            return []
        noun = "execution" if spec.model == "jobexecution" else "instance"
        notes = []
        found = {row["id"] for row in rows}
        missing = [pk for pk in selection.ids if pk not in found]
        if missing:
            named = ", ".join(f"#{pk}" for pk in missing[:NOTED])
            rest = f" and {len(missing) - NOTED} more" if len(missing) > NOTED else ""
            notes.append(f"No {noun} {named}{rest} (purged or never existed).")
        if selection.dropped:
            named = ", ".join(f"“{text}”" for text in selection.dropped[:NOTED])
            rest = (
                f" and {len(selection.dropped) - NOTED} more"
                if len(selection.dropped) > NOTED
                else ""
            )
            notes.append(f"Not {noun} ids, ignored: {named}{rest}.")
        if selection.over or more:
            notes.append(
                f"At most {MAX_ROWS} rows can be confirmed at once: only the first "
                f"{MAX_ROWS} selected are shown. Confirm them, then select the rest."
            )
        return notes

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
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
        # What a recovery resolves: the unfinished steps of the rows it may
        # act on (one query for all of them).
        steps = (
            unfinished_steps(
                [
                    pk
                    for pk, row_choices in choices.items()
                    if (proposal := _choice(row_choices, spec).proposal) is not None
                    and (proposal.eligible or recovery_overridable(proposal))
                ]
            )
            if spec.name == "recover"
            else {}
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
                    proposal=proposal_display(proposal),
                    proposal_object=proposal,
                    outcome=recovery_outcome(row["id"], proposal, *steps.get(row["id"], ([], 0))),
                )
            rows.append(shown)
        return rows

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
        """One service call per row to act on, in order; each row's result or
        refusal is kept for the page to say."""
        service = bootstrap.operator_service()
        actor = Actor.for_user(request.user)
        attempts = []
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
            attempts.append(attempt(row.id, f"execution #{row.id}", run))
        return attempts


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

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
        service = bootstrap.retention_service()
        actor = Actor.for_user(request.user)
        act = service.place_hold if spec.name == "hold" else service.release_hold
        return [
            attempt(
                row.id,
                f"instance #{row.id}",
                partial(
                    act,
                    row.id,
                    actor=actor,
                    reason_code=form.reason_code,
                    operation_id=row.operation_id,
                ),
            )
            for row in form.row_inputs()
        ]
