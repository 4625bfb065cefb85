"""Flow decisions, job definitions and definition upgrades: read-only lists
and details."""

from __future__ import annotations

from django.contrib import admin

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import (
    ReadOnlyAdmin,
)
from oxide_batch.admin.pages.common import moment
from oxide_batch.admin.pages.steps import ExecutionFilter, StepExecutionAdmin


@admin.register(models.FlowDecision)
class FlowDecisionAdmin(ReadOnlyAdmin):
    list_display = ("id", "execution", *models.FLOW_TRANSITION, "decided")
    list_filter = ("kind", ExecutionFilter)
    search_fields = ("=id",)
    ordering = ("-id",)
    fields = (
        "id",
        "execution",
        *models.FLOW_TRANSITION,
        "plan_fingerprint",
        "input_digest",
        "decided",
    )
    execution = StepExecutionAdmin.execution
    decided = moment("decided_at", "decided")


@admin.register(models.JobDefinition)
class JobDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "revision", "manifest_format", "manifest_digest")
    search_fields = ("job_name", "=manifest_digest")
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "revision",
        "manifest_format",
        "manifest_digest",
        "manifest",
        "registered",
    )
    registered = moment("registered_at", "registered")


@admin.register(models.DefinitionUpgrade)
class DefinitionUpgradeAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "upgrade_key", "from_definition_id", "to_definition_id")
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "upgrade_key",
        "from_definition_id",
        "to_definition_id",
        "step_mapping",
        "registered",
    )
    registered = moment("registered_at", "registered")
