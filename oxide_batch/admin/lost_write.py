"""The console's way to resolve a lost write (contract §2.5.14): on the case
file of an execution whose marker is unresolved, a form asking for the reason
and what the operator checked; its POST is the operator service's audited,
idempotent resolution (the form carries its operation id, so sending it twice
records it once), whatever the execution's status."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.base import can
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.evidence import UNKNOWN_EFFECT
from oxide_batch.domain.evidence import unresolved_lost_write as unresolved
from oxide_batch.roles import RECOVER_EXECUTION
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor

#: The reason a console resolution records unless the operator names another.
CONSOLE_REASON = "LOST_WRITE_RESOLVED"
URL_NAME = "oxide_batch_jobexecution_resolve_lost_write"


class ResolveLostWriteForm(forms.Form):
    # Not stripped: the service refuses surrounding whitespace, as the API does.
    reason_code = forms.CharField(max_length=64, initial=CONSOLE_REASON, strip=False)
    note = forms.CharField(max_length=1000, widget=forms.Textarea, strip=False)
    operation_id = forms.CharField(max_length=64, strip=False)


def marker_text(marker: dict[str, Any], resolution: dict[str, Any] | None) -> SafeString:
    """The marker (``version_ahead``): when, the versions, and whether a person
    resolved it."""
    head = format_html(
        '<span class="ob-badge ob-warn">LOST WRITE</span> detected {} UTC: a write expected '
        "version {}, the stored row is at {} — the repository lost a write it had "
        "acknowledged.",
        str(marker.get("detected_at", "?")).replace("T", " ").removesuffix("Z"),
        marker.get("expected_version", "?"),
        marker.get("stored_version", "?"),
    )
    if resolution is not None:
        return format_html(
            "{} Resolved {} UTC by {} ({}): {}",
            head,
            str(resolution.get("resolved_at", "?")).replace("T", " ").removesuffix("Z"),
            resolution.get("actor", "?"),
            resolution.get("reason_code", "?"),
            resolution.get("note", ""),
        )
    return format_html(
        "{} Until a person resolves it, it counts as an unknown commit and no launch or "
        "restart of its instance runs: check the target system, then recover with {} "
        "if it is still running, and resolve it.",
        head,
        UNKNOWN_EFFECT,
    )


def resolve_form(request: HttpRequest | None, obj: Any) -> SafeString:
    """The resolution form for who may recover, on an unresolved marker only."""
    if request is None or not can(request, RECOVER_EXECUTION):
        return format_html("{}", "")
    if not unresolved(obj.lost_write, obj.lost_write_resolution):
        return format_html("{}", "")
    return format_html(
        '<form method="post" action="{}" class="ob-lost-write">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<input type="hidden" name="operation_id" value="{}">'
        '<p><label for="ob-lw-reason">Reason code</label> '
        '<input id="ob-lw-reason" name="reason_code" value="{}" maxlength="64" required></p>'
        '<p><label for="ob-lw-note">What you checked (recorded)</label><br>'
        '<textarea id="ob-lw-note" name="note" rows="2" cols="60" maxlength="1000" required>'
        "</textarea></p>"
        '<p><button type="submit" class="button">Resolve the lost write of #{}</button></p>'
        "</form>",
        reverse(f"admin:{URL_NAME}", args=[obj.pk]),
        get_token(request),
        f"console-lost-write:{uuid.uuid4().hex}",
        CONSOLE_REASON,
        obj.pk,
    )


def resolve_lost_write_view(
    site: admin.AdminSite, request: HttpRequest, object_id: int
) -> HttpResponse:
    """POST: the audited resolution; then back to the case file with what happened."""
    del site  # the admin_view wrapper already checked the console login
    if not can(request, RECOVER_EXECUTION):
        raise PermissionDenied
    page = reverse("admin:oxide_batch_jobexecution_change", args=[object_id])
    if request.method != "POST":
        return HttpResponseRedirect(page)
    form = ResolveLostWriteForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(
            f"{name}: {' '.join(str(e) for e in errs)}" for name, errs in form.errors.items()
        )
        messages.error(request, f"Not resolved: {problems}")
        return HttpResponseRedirect(page)
    try:
        result = bootstrap.operator_service().resolve_lost_write(
            object_id,
            reason_code=form.cleaned_data["reason_code"],
            note=form.cleaned_data["note"],
            actor=Actor.for_user(request.user),
            operation_id=form.cleaned_data["operation_id"],
        )
    except OxideBatchError as error:
        messages.error(request, f"Not resolved: {error.code}: {error.message}")
        return HttpResponseRedirect(page)
    if result.changed:
        messages.success(
            request,
            f"Lost write of #{object_id} resolved (operation {result.operation_id}): a launch "
            "or restart of its instance may go ahead.",
        )
    else:
        messages.info(request, f"#{object_id} has no unresolved lost write: nothing recorded.")
    return HttpResponseRedirect(page)
