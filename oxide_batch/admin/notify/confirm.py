"""The confirmation page of the notification actions (disable or enable a
rule, deliver a dead delivery again): a GET shows what will happen and a form
carrying what the page saw (``observed``); its POST acts once, through the
service the command uses, and goes back to the row's page (or, for a
removal, the list) saying what happened. Idempotent: a row already as asked
is left as it is (nothing audited); a stale tab — the row changed since its
confirmation page was loaded — is refused with nothing done, and so is one
whose row is gone (removed meanwhile: :func:`gone`). A refusal the service
raises is said on the page it goes back to, never a 500. Only
``manage_notifications`` acts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from oxide_batch.admin.base import can
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.roles import MANAGE_NOTIFICATIONS
from oxide_batch.services.audit import Actor

TEMPLATE = "admin/oxide_batch/notify_confirm.html"
FORM_TEMPLATE = "admin/oxide_batch/notify_form.html"


def change_by(request: HttpRequest) -> ChangeBy:
    """The logged-in user as the audit's actor."""
    actor = Actor.for_user(request.user)
    return ChangeBy(actor.reference, actor.user_id)


def may_manage(request: HttpRequest) -> bool:
    return can(request, MANAGE_NOTIFICATIONS)


@dataclass(frozen=True)
class NotifyAction:
    """One action: its title and button, what it does (``explains``, a text
    or one made from the row), whether the row is already as asked
    (``done``), what the page saw of it (``observed``) and the service call
    (``apply``: what to say, a success — or ``(level, text)`` for an outcome
    that is not one, e.g. a test message refused). ``leaves``: the row is
    gone after it (a removal) — the POST goes back to the list, not to the
    row's page."""

    name: str
    title: Callable[[Any], str]
    explains: str | Callable[[Any], str]
    done: Callable[[Any], str | None]
    observed: Callable[[Any], str]
    apply: Callable[[HttpRequest, Any], str | tuple[int, str]]
    leaves: bool = False

    def explain(self, row: Any) -> str:
        return self.explains if isinstance(self.explains, str) else self.explains(row)


def confirm(
    request: HttpRequest,
    context: dict[str, Any],
    row: Any,
    action: NotifyAction,
    back: str,
    listing: str | None = None,
) -> HttpResponse:
    """GET: the confirmation page; POST: the action (or why not), then
    ``back`` — or ``listing`` once an action that ``leaves`` was applied."""
    if not may_manage(request):
        raise PermissionDenied
    if request.method == "POST":
        already = action.done(row)
        if already is not None:
            messages.info(request, f"{already}: nothing changed, nothing recorded.")
        elif request.POST.get("observed", "") != action.observed(row):
            messages.error(
                request,
                "Refused (stale): it changed since your confirmation page was loaded; "
                "nothing was done. Check what it is now and confirm again.",
            )
        else:
            try:
                said = action.apply(request, row)
            except OxideBatchError as error:  # e.g. removed between the read and the lock
                messages.error(request, f"Not done ({error.code}): {error.message}.")
                return HttpResponseRedirect(listing if action.leaves and listing else back)
            level, text = (messages.SUCCESS, said) if isinstance(said, str) else said
            messages.add_message(request, level, text)
            if action.leaves and listing is not None:
                return HttpResponseRedirect(listing)
        return HttpResponseRedirect(back)
    return TemplateResponse(
        request,
        TEMPLATE,
        {
            **context,
            "title": action.title(row),
            "explains": action.explain(row),
            "already": action.done(row),
            "observed": action.observed(row),
            "back": back,
        },
    )


def form_page(
    request: HttpRequest,
    context: dict[str, Any],
    form: Any,
    *,
    title: str,
    button: str,
    intro: str,
) -> TemplateResponse:
    """A notification form's page (adding a rule, setting deadlines): the
    form with its errors, under ``intro``, submitted by ``button``."""
    page = {**context, "title": title, "form": form, "button": button, "intro": intro}
    return TemplateResponse(request, FORM_TEMPLATE, page)


def gone(request: HttpRequest, what: str, listing: str) -> HttpResponse:
    """A confirmation posted for a row that is no longer there (removed,
    cleared or purged since its page was loaded): nothing done, said on the
    list. A GET of such a page is the console's 404."""
    if not may_manage(request):
        raise PermissionDenied
    messages.error(
        request,
        f"Refused: {what} is no longer there (removed since your page was loaded); "
        "nothing was done.",
    )
    return HttpResponseRedirect(listing)


def act_link(model: str, pk: int, name: str, label: str) -> tuple[str, str]:
    return reverse(f"admin:oxide_batch_{model}_act", args=[pk, name]), label
