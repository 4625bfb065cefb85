"""The job instances' pages: list (search by id, job name or a visible
parameter), detail with its attempts, holds and actions."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin import casefile
from oxide_batch.admin.actions.instances import InstanceActions
from oxide_batch.admin.applicable import action_choices
from oxide_batch.admin.base import (
    LINKED_ROWS,
    ReadOnlyAdmin,
    can_view_payload,
    link,
    linked_rows,
)
from oxide_batch.admin.display import (
    badge,
    duration,
    parameters,
    when,
    yes_no,
)
from oxide_batch.admin.pages.common import JobNameFilter, SearchByIdOrName
from oxide_batch.selectors import pages
from oxide_batch.selectors.instances import shown_key_digest


@admin.register(models.JobInstance)
class JobInstanceAdmin(SearchByIdOrName, InstanceActions, ReadOnlyAdmin):
    list_display = ("id", "job_name", "run_parameters", "hold", "created")
    list_filter = (JobNameFilter,)
    search_fields = ("job_name",)
    search_help_text = (
        "An instance id, an exact job name, or name=value for a visible parameter "
        "(e.g. business_date=2026-11-30)."
    )
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "run_parameters",
        "key_digest",
        "created",
        "hold",
        "hold_detail",
        "attempts",
        "operator_actions",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # Decision 200: the contract's digest for payload readers only; a viewer
        # sees it keyed, so hashing guessed values confirms nothing.
        digest = "key_digest" if can_view_payload(request) else "keyed_digest"
        return tuple(digest if field == "key_digest" else field for field in self.fields)

    @admin.display(description="key digest")
    def keyed_digest(self, obj: models.JobInstance) -> str:
        return shown_key_digest(obj.key_digest, payload_reader=False)

    @admin.display(description="parameters")
    def run_parameters(self, obj: models.JobInstance) -> SafeString:
        return parameters(obj.identifying_parameters)

    @admin.display(description="hold")
    def hold(self, obj: models.JobInstance) -> SafeString:
        return yes_no(obj.hold_placed_at is not None, "HOLD", "no hold")

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: models.JobInstance) -> SafeString:
        return when(obj.created_at)

    @admin.display(description="hold detail")
    def hold_detail(self, obj: models.JobInstance) -> Any:
        if obj.hold_placed_at is None:
            return "—"
        return format_html(
            "by {} ({}) {}", obj.hold_actor, obj.hold_reason_code, when(obj.hold_placed_at)
        )

    @admin.display(description="attempts")
    def attempts(self, obj: models.JobInstance) -> SafeString:
        return linked_rows(
            ("attempt", "execution", "status", "created", "duration", "version"),
            (
                (
                    e.attempt,
                    link("jobexecution", e.pk),
                    badge(e.status),
                    when(e.created_at),
                    duration(e.started_at, e.ended_at, e.status),
                    e.version,
                )
                for e in pages.attempts(obj.pk, limit=LINKED_ROWS + 1)
            ),
            model="jobexecution",
            query=f"instance={obj.pk}",
        )

    @admin.display(description="actions")
    def operator_actions(self, obj: models.JobInstance) -> SafeString:
        note = casefile.read_only_note(getattr(obj, "console_request", None), action_choices(obj))
        return note if note is not None else self.action_links(obj)
