"""The jobs' run deadlines (``ob_job_deadline``), each with its change audit;
who manages notifications sets, changes and clears them here
(:mod:`.deadline_form`), as ``manage.py batch_deadlines`` and the API do."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import linked_rows
from oxide_batch.admin.display import human_short, when
from oxide_batch.admin.notify.base import NotifyAdmin
from oxide_batch.admin.notify.deadline_form import CLEAR, set_deadline_view
from oxide_batch.admin.notify.rules import AUDIT_HEADERS, audit_details
from oxide_batch.admin.pages.common import moment


def _span(ms: int | None) -> str:
    return "—" if ms is None else human_short(timedelta(milliseconds=ms))


@admin.register(models.JobDeadline)
class JobDeadlineAdmin(NotifyAdmin):
    list_display = ("job_name", "max_duration", "expect_every", "by", "set")
    search_fields = ("job_name",)
    search_help_text = "A job's name."
    ordering = ("job_name",)
    fields = ("job_name", "max_duration", "expect_every", "by", "set", "audit")
    set = moment("set_at", "set")
    add_link = ("oxide_batch_jobdeadline_set", "Set a job's deadlines")

    def get_urls(self) -> list[URLPattern]:
        put = self.admin_site.admin_view(self.set_view)
        clear = self.admin_site.admin_view(self.clear_view)
        return [
            path("set/", put, name="oxide_batch_jobdeadline_set"),
            path("<int:object_id>/act/clear/", clear, name="oxide_batch_jobdeadline_act"),
            *super().get_urls(),
        ]

    def set_view(self, request: HttpRequest) -> HttpResponse:
        back = reverse("admin:oxide_batch_jobdeadline_changelist")
        return set_deadline_view(request, self.console_context(request, back=back))

    def clear_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        found = models.JobDeadline.objects.filter(pk=object_id).first()
        return self.act_on(
            request,
            found,
            CLEAR,
            subject=found.job_name if found else "",
            back=reverse("admin:oxide_batch_jobdeadline_change", args=[object_id]),
            missing=(f"deadline #{object_id}", "cleared"),
            listing=reverse("admin:oxide_batch_jobdeadline_changelist"),
        )

    def action_links(self, request: HttpRequest, pk: int) -> list[tuple[str, str]]:
        """Change and clear."""
        job = models.JobDeadline.objects.filter(pk=pk).values_list("job_name", flat=True)
        name = next(iter(job), None)
        if name is None:
            return []
        change = reverse("admin:oxide_batch_jobdeadline_set") + "?" + urlencode({"job": name})
        clear = reverse("admin:oxide_batch_jobdeadline_act", args=[pk])
        return [(change, "Change these deadlines…"), (clear, "Clear these deadlines…")]

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
