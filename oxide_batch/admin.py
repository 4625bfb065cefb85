"""Read-only admin pages for the batch metadata.

Every change to batch rows goes through the repository, so the admin never
adds, edits or deletes them. (The full operator console — badges, drill-down,
audited actions, dashboard — is built on top of these registrations.)
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from oxide_batch import models


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    # No COUNT(*) over the whole table on every changelist page.
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.JobInstance)
class JobInstanceAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "key_digest", "created_at")
    search_fields = ("=id", "job_name")
    exclude = ("identifying_parameters",)  # values are sensitive by default


@admin.register(models.JobExecution)
class JobExecutionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_name",
        "attempt",
        "status",
        "exit_code",
        "created_at",
        "ended_at",
        "version",
    )
    list_filter = ("status", "created_at")
    search_fields = ("=id", "job_name")


@admin.register(models.StepExecution)
class StepExecutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_execution_id", "step_name", "status", "exit_code", "version")
    list_filter = ("status",)
    search_fields = ("=id", "step_name")
    # Payloads are shown only to those allowed to (the console's checkpoint viewer).
    exclude = ("checkpoint", "context")


@admin.register(models.RecoveryDecision)
class RecoveryDecisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_execution_id",
        "prior_status",
        "resulting_status",
        "reason_code",
        "operator_reference",
        "decided_at",
    )
    exclude = ("evidence_digest",)


@admin.register(models.JobDefinition)
class JobDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "revision", "manifest_format", "manifest_digest")
    search_fields = ("job_name", "=manifest_digest")


@admin.register(models.DefinitionUpgrade)
class DefinitionUpgradeAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "upgrade_key", "from_definition", "to_definition")


@admin.register(models.StepPartition)
class StepPartitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "step_execution_id", "partition_key", "ordinal", "status", "version")
    list_filter = ("status",)
    exclude = ("context",)


@admin.register(models.FlowDecision)
class FlowDecisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_execution_id",
        "sequence",
        "source_node_id",
        "kind",
        "observed_outcome",
        "target_node_id",
        "terminal",
    )
