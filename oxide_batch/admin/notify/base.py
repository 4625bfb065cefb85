"""What the notification pages (rules, deliveries, deadlines) share: the
console's context for their own pages, the "add" link on the list and the
action buttons on a row's page — both for who may manage notifications
only — and the way an action's page finds its row (gone on a POST, the
console's 404 on a GET, else the confirmation of :mod:`.confirm`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.base import ReadOnlyAdmin, parse_id
from oxide_batch.admin.notify.confirm import NotifyAction, confirm, gone, may_manage

NOTHING = format_html("{}", "")


def buttons(links: Iterable[tuple[str, str]]) -> SafeString:
    """A row's action buttons: ``(url, label)`` pairs in one submit row."""
    shown = format_html_join(" ", '<a class="button" href="{}">{}</a>', links)
    return format_html('<div class="submit-row ob-notify-actions">{}</div>', shown)


class NotifyAdmin(ReadOnlyAdmin):
    """A notification model's pages. ``add_link``: the list's "add" link
    (its URL name and label); :meth:`action_links`: the buttons a row's page
    offers (each confirmation page reads its row itself)."""

    change_form_template = "admin/oxide_batch/notify_change_form.html"
    change_list_template = "admin/oxide_batch/notify_change_list.html"
    add_link: tuple[str, str] | None = None

    def console_context(self, request: HttpRequest, **more: Any) -> dict[str, Any]:
        """The console's context for a page of this model's own."""
        return {**self.admin_site.each_context(request), "opts": self.opts, **more}

    def act_on(
        self,
        request: HttpRequest,
        found: Model | None,
        action: NotifyAction,
        *,
        subject: str,
        back: str,
        missing: tuple[str, str],
        listing: str | None = None,
    ) -> HttpResponse:
        """``action``'s confirmation page for ``found``. When the row is gone
        (``missing``: what it was and what became of it, ``("rule #7",
        "removed")``), a POST is refused on the ``listing`` (when there is one)
        and a GET is the console's 404."""
        if found is None:
            what, became = missing
            if request.method == "POST" and listing is not None:
                return gone(request, what, listing)
            raise Http404(f"There is no {what}: it never existed, or it was {became}.")
        context = self.console_context(request, subject=subject)
        return confirm(request, context, found, action, back, listing)

    def action_links(self, request: HttpRequest, pk: int) -> list[tuple[str, str]]:
        return []

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        if self.add_link is not None and may_manage(request):
            name, label = self.add_link
            extra["notify_add"] = (reverse(f"admin:{name}"), label)
        return super().changelist_view(request, extra)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        pk = parse_id(object_id)
        links = self.action_links(request, pk) if pk is not None and may_manage(request) else []
        extra = {**(extra_context or {}), "notify_actions": buttons(links) if links else NOTHING}
        return super().change_view(request, object_id, form_url, extra)
