"""The confirmation page every audited operator action goes through.

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
existed)") and a selection over
:data:`~oxide_batch.admin.actions.selection.MAX_ROWS` are said on the page;
a query string over Django's field limit is a framed 400 saying so.

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
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied, TooManyFieldsSent
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.actions.selection import (
    MAX_ROWS,
    Selection,
    action_url,
    button_labels,
    ids_in,
    selection_notes,
    selection_of,
)
from oxide_batch.admin.applicable import (
    ActionChoice,
    ActionSpec,
    action_choices,
    applicable_actions,
)
from oxide_batch.admin.base import can, change_url
from oxide_batch.admin.forms import ActionForm, seal
from oxide_batch.admin.results import Attempt, report_left_out, say, snapshot_now
from oxide_batch.domain.evidence import RecoveryProposal
from oxide_batch.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    RECOVER_EXECUTION,
    STOP_EXECUTION,
    perm,
)

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


class ConfirmedActions:
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
            self.change_form_context(request, context, obj)
        return super().render_change_form(  # type: ignore[misc]
            request, context, add, change, form_url, obj
        )

    def change_form_context(self, request: HttpRequest, context: dict[str, Any], obj: Any) -> None:
        """What a page adds to its detail page's ``context`` for ``obj`` (nothing here)."""

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
            acting = ids_in(request.POST.get("ids", ""))
            overridable = ids_in(request.POST.get("overridable", ""))
            selected = ids_in(request.POST.get("selected", "")) or acting + overridable
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
        selection = selection_of(values)
        rows = self.rows(spec, selection.ids)
        acting = [row["id"] for row in rows if row["choice"].applies]
        overridable = [row["id"] for row in rows if row.get("overridable")]
        return self._render(
            request,
            spec,
            rows,
            self._form(
                spec,
                acting,
                rows,
                overridable=overridable,
                # The case file's "with an override…" link: the box arrives
                # ticked (the note is still the operator's to write).
                override=request.GET.get("override") == "1",
            ),
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
        override: bool = False,
    ) -> ActionForm:
        """The page's form; unbound, it carries only what the page observed
        (operation ids, versions, digests and their seals) — nothing the
        operator decides."""
        # The rows with the unknown-commit marker as the page showed them
        # (posted back, checked by the seals), else as read now.
        marked = (
            ids_in(data.get("marked", ""))
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
            if override and overridable:
                initial["override"] = True
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
            "notes": selection_notes(spec, rows, selection, more),
        }
        return TemplateResponse(request, "admin/oxide_batch/confirm_action.html", context)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
        raise NotImplementedError


def choice_for(choices: list[ActionChoice], spec: ActionSpec) -> ActionChoice:
    return next(choice for choice in choices if choice.spec == spec)
