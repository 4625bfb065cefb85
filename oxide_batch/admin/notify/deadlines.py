"""The jobs' run deadlines (``ob_job_deadline``), each with its change audit;
who manages notifications sets, changes and clears them here
(:mod:`.deadline_form`), as ``manage.py batch_deadlines`` and the API do."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import ReadOnlyAdmin, linked_rows, parse_id
from oxide_batch.admin.display import human_short, when
from oxide_batch.admin.notify.confirm import confirm, gone, may_manage
from oxide_batch.admin.notify.deadline_form import CLEAR, set_deadline_view
from oxide_batch.admin.notify.rules import AUDIT_HEADERS, audit_details
from oxide_batch.admin.pages.common import moment


def _span(ms: int | None) -> str:
    return "—" if ms is None else human_short(timedelta(milliseconds=ms))


@admin.register(models.JobDeadline)
class JobDeadlineAdmin(ReadOnlyAdmin):
    list_display = ("job_name", "max_duration", "expect_every", "by", "set")
    search_fields = ("job_name",)
    search_help_text = "A job's name."
    ordering = ("job_name",)
    fields = ("job_name", "max_duration", "expect_every", "by", "set", "audit")
    set = moment("set_at", "set")
    change_form_template = "admin/oxide_batch/notify_change_form.html"
    change_list_template = "admin/oxide_batch/notify_change_list.html"

    def get_urls(self) -> list[URLPattern]:
        put = self.admin_site.admin_view(self.set_view)
        clear = self.admin_site.admin_view(self.clear_view)
        return [
            path("set/", put, name="oxide_batch_jobdeadline_set"),
            path("<int:object_id>/act/clear/", clear, name="oxide_batch_jobdeadline_act"),
            *super().get_urls(),
        ]

    def _context(self, request: HttpRequest, **more: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, **more}

    def set_view(self, request: HttpRequest) -> HttpResponse:
        back = reverse("admin:oxide_batch_jobdeadline_changelist")
        return set_deadline_view(request, self._context(request, back=back))

    def clear_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        listing = reverse("admin:oxide_batch_jobdeadline_changelist")
        found = models.JobDeadline.objects.filter(pk=object_id).first()
        if found is None:
            if request.method == "POST":
                return gone(request, f"deadline #{object_id}", listing)
            raise Http404(
                f"There is no deadline #{object_id}: it never existed, or it was cleared."
            )
        back = reverse("admin:oxide_batch_jobdeadline_change", args=[found.pk])
        context = self._context(request, subject=found.job_name)
        return confirm(request, context, found, CLEAR, back, listing)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        if may_manage(request):
            extra["notify_add"] = (
                reverse("admin:oxide_batch_jobdeadline_set"),
                "Set a job's deadlines",
            )
        return super().changelist_view(request, extra)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "notify_actions": self._actions(request, object_id)}
        return super().change_view(request, object_id, form_url, extra)

    @staticmethod
    def _actions(request: HttpRequest, object_id: str) -> SafeString:
        """Change and clear, for who may manage notifications."""
        pk = parse_id(object_id)
        if pk is None or not may_manage(request):
            return format_html("{}", "")
        job = models.JobDeadline.objects.filter(pk=pk).values_list("job_name", flat=True)
        name = next(iter(job), None)
        if name is None:
            return format_html("{}", "")
        change = reverse("admin:oxide_batch_jobdeadline_set") + "?" + urlencode({"job": name})
        return format_html(
            '<div class="submit-row ob-notify-actions"><a class="button" href="{}">{}</a> '
            '<a class="button" href="{}">{}</a></div>',
            change,
            "Change these deadlines…",
            reverse("admin:oxide_batch_jobdeadline_act", args=[pk]),
            "Clear these deadlines…",
        )

    @admin.display(description="maximum duration", ordering="max_duration_ms")
    def max_duration(self, obj: models.JobDeadline) -> str:
        return _span(obj.max_duration_ms)

    @admin.display(description="expected to complete every", ordering="expect_every_ms")
    def expect_every(self, obj: models.JobDeadline) -> str:
        return _span(obj.expect_every_ms)

    @admin.display(description="by")
    def by(self, obj: models.JobDeadline) -> SafeString:
        if obj.by_time is None:
            return format_html("{}", "—")
        return format_html("{} <small>{}</small>", obj.by_time.strftime("%H:%M"), obj.zone or "UTC")

    @admin.display(description="change audit (newest first)")
    def audit(self, obj: models.JobDeadline) -> SafeString:
        changes = models.JobDeadlineChange.objects.filter(job_name=obj.job_name).order_by("-id")
        return linked_rows(
            AUDIT_HEADERS,
            (
                (when(c.changed_at), c.action, c.actor, audit_details(c.details))
                for c in changes[:51]
            ),
            model="jobdeadline",
            query=f"q={obj.job_name}",
        )
