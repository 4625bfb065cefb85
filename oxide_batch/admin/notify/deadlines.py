"""The jobs' run deadlines (``ob_job_deadline``): read-only here — set with
``manage.py batch_deadlines`` or the API — each with its change audit."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import ReadOnlyAdmin, linked_rows
from oxide_batch.admin.display import human_short, when
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
