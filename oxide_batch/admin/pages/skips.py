"""The skip ledger's page (issue 42): the skipped items of a step or of an
execution (the "See all" of their pages), oldest first — the phase, the item,
the failure's category and type, the message to whoever may read payloads,
and the chunk that recorded it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import F, TextField, Value
from django.http import HttpRequest
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import ReadOnlyAdmin, can_view_payload, link
from oxide_batch.admin.display import when
from oxide_batch.admin.failure_detail import failure_line
from oxide_batch.admin.pages.common import ParentFilter
from oxide_batch.admin.skips import skip_message, skip_type
from oxide_batch.domain.status import FailureCategory


class SkipStepFilter(ParentFilter):
    title = "step"
    parameter_name = "step"
    field = "step_execution_id"


class SkipExecutionFilter(ParentFilter):
    title = "execution"
    parameter_name = "execution"
    field = "job_execution_id"


class SkipCategoryFilter(admin.SimpleListFilter):
    """The categories a skip can have: the policy-eligible ones (decision 402)."""

    title = "category"
    parameter_name = "category"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(c.value, c.value) for c in FailureCategory if c.is_policy_eligible]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset.filter(category=value) if value else queryset


@admin.register(models.Skip)
class SkipAdmin(ReadOnlyAdmin):
    # Six columns fit 1440 px beside the navigation and the filters: the
    # item links to its page; the failure is its type and its message's first
    # line in one cell (as the execution list's); the id, the execution and
    # the time are on the item's page
    # (and the filter names the execution a "See all" came from).
    list_display = ("item", "step", "phase", "category", "failure", "chunk")
    list_display_links = ("item",)
    list_filter = ("phase", SkipCategoryFilter, SkipExecutionFilter, SkipStepFilter)
    ordering = ("id",)
    fields = (
        "id",
        "step",
        "execution",
        "phase",
        "item",
        "category",
        "failure_type",
        "failure_message",
        "chunk",
        "recorded",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, obj)
        if can_view_payload(request):
            return fields
        return [field for field in fields if field != "failure_message"]

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = (
            super()
            .get_queryset(request)
            .select_related("step_execution")
            .only(
                "id",
                "step_execution_id",
                "step_execution__step_name",
                "job_execution_id",
                "phase",
                "item",
                "chunk",
                "category",
                "type",
                "recorded_at",
            )
        )
        # The message only for a payload reader (per request: a viewer's
        # query never reads it).
        shown = F("message") if can_view_payload(request) else Value(None, TextField())
        return rows.annotate(shown_message=shown)

    @admin.display(description="step")
    def step(self, obj: models.Skip) -> SafeString:
        return link("stepexecution", obj.step_execution_id, obj.step_execution.step_name)

    @admin.display(description="execution")
    def execution(self, obj: models.Skip) -> SafeString:
        return link("jobexecution", obj.job_execution_id)

    @admin.display(description="failure")
    def failure(self, obj: Any) -> SafeString:
        """The type and the message's first line (the type alone to a viewer)."""
        return failure_line(obj.type, obj.shown_message)

    @admin.display(description="type")
    def failure_type(self, obj: models.Skip) -> SafeString:
        return skip_type(obj.type)

    @admin.display(description="message")
    def failure_message(self, obj: Any) -> str:
        return skip_message(obj.shown_message)

    @admin.display(description="recorded", ordering="recorded_at")
    def recorded(self, obj: models.Skip) -> SafeString:
        return when(obj.recorded_at)
