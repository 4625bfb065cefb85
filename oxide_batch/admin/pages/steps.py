"""The step executions' and partitions' pages: status in its execution's
light, counts, failure, checkpoint and context (to whoever may read payloads)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import (
    QuerySet,
)
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import (
    LINKED_ROWS,
    ReadOnlyAdmin,
    can_view_payload,
    link,
    linked_rows,
)
from oxide_batch.admin.display import (
    LogPlace,
    badge,
    duration,
    recorded_by_decision,
    when,
    when_absolute,
)
from oxide_batch.admin.display import failure as render_failure
from oxide_batch.admin.pages.common import ParentFilter, StatusColumns, counts_text
from oxide_batch.admin.pages.executions import JobExecutionAdmin
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.execution import own_activity
from oxide_batch.selectors import console, pages
from oxide_batch.services import bootstrap


class ExecutionFilter(ParentFilter):
    title = "execution"
    parameter_name = "execution"
    field = "job_execution_id"


class StepFilter(ParentFilter):
    title = "step"
    parameter_name = "step"
    field = "step_execution_id"


@admin.register(models.StepExecution)
class StepExecutionAdmin(StatusColumns, ReadOnlyAdmin):
    list_display = ("id", "execution", "step_name", "status_badge", "took", "counts", "created")
    list_filter = ("status", "created_at", ExecutionFilter)
    search_fields = ("=id",)
    search_help_text = "A step execution id."
    ordering = ("-id",)
    fields = (
        "id",
        "execution",
        "step_name",
        "node_id",
        "status_badge",
        "exit_code",
        "failure",
        "created",
        "started",
        "ended",
        "last_activity",
        "took",
        "version",
        "counts",
        "partitions",
        "checkpoint_viewer",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return console.step_list(super().get_queryset(request))

    created = JobExecutionAdmin.created
    started = JobExecutionAdmin.started
    ended = JobExecutionAdmin.ended

    @admin.display(description="last activity")
    def last_activity(self, obj: models.StepExecution) -> SafeString:
        """The step's last runtime write (contract §2.5.3): a recovery, which
        moves ``updated_at``, never moves it — as the API says."""
        return when(own_activity(obj.last_activity_at, obj.updated_at))

    @admin.display(description="duration")
    def took(self, obj: Any) -> str:
        return duration(
            obj.started_at,
            obj.ended_at,
            obj.status,
            parent_status=getattr(obj, "execution_status", None),
        )

    @admin.display(description="failure")
    def failure(self, obj: models.StepExecution) -> SafeString:
        if not obj.failure_category:
            return render_failure(None, None, execution_id=obj.job_execution_id, job_name="")
        # The job name only when the link uses it (one read of the execution).
        uses_name = "{job_name}" in batch_settings.FAILURE_URL_TEMPLATE
        return render_failure(
            obj.failure_category,
            obj.failure_id,
            execution_id=obj.job_execution_id,
            job_name=obj.job_execution.job_name if uses_name else "",
            decision_id=recorded_by_decision(obj.recovery_decision_id, step=True),
            given=bool(getattr(obj, "failure_id_given", False)),
            place=LogPlace(
                step_execution_id=obj.pk,
                # The step's own worker (the client sends it with every step).
                host=obj.worker_host,
                started_at=obj.started_at,
                ended_at=obj.ended_at,
            ),
        )

    @admin.display(description="execution")
    def execution(self, obj: models.StepExecution) -> SafeString:
        return link("jobexecution", obj.job_execution_id)

    @admin.display(description="partitions")
    def partitions(self, obj: models.StepExecution) -> SafeString:
        """Each partition with its current worker (host, pid, lease) and the
        earlier ones a claim replaced (issue 43): two queries whatever the plan."""
        plan = pages.partitions(obj.pk, limit=LINKED_ROWS + 1)
        workers = pages.partition_workers(
            [p.pk for p in plan],
            [p.worker_step_execution_id for p in plan if p.worker_step_execution_id is not None],
        )
        now = timezone.now()
        return linked_rows(
            (
                "#",
                "partition",
                "status",
                "retries",
                "worker",
                "lease",
                "earlier workers",
                "counts",
                "version",
            ),
            (
                (
                    p.ordinal,
                    link("steppartition", p.pk, p.partition_key),
                    badge(p.status),
                    p.retries,
                    _current_worker(p, workers),
                    _lease(p, workers, now),
                    _earlier_workers(p, workers),
                    counts_text(p),
                    p.version,
                )
                for p in plan
            ),
            model="steppartition",
            query=f"step={obj.pk}",
        )

    def checkpoint_viewer_context(
        self, request: HttpRequest, obj: models.StepExecution
    ) -> dict[str, Any]:
        raw = pages.stored_checkpoint(obj.pk)
        text = raw.get("checkpoint")
        info: dict[str, Any] = {"present": text is not None, "size": len(text or "")}
        if text is None:
            return info
        try:
            with bootstrap.repository().begin() as uow:
                state = uow.step_state(obj.pk)
        except OxideBatchError as error:
            info.update(state="corrupt", error=error.code)
            return info
        envelope = state.checkpoint
        info["state"] = "verified" if raw.get("checkpoint_checksum") else "no checksum"
        if envelope is not None:
            info.update(schema=envelope.schema, version=envelope.schema_version)
            if can_view_payload(request):
                info["payload"] = json.dumps(envelope.payload, indent=2, sort_keys=True)
        return info

    @admin.display(description="checkpoint")
    def checkpoint_viewer(self, obj: models.StepExecution) -> SafeString:
        info: dict[str, Any] = getattr(obj, "_checkpoint", {})
        if not info.get("present"):
            return format_html("{}", "No checkpoint.")
        if info.get("state") == "corrupt":
            return format_html(
                '<span class="ob-badge ob-bad">corrupt</span> {} bytes; {}',
                info["size"],
                info["error"],
            )
        payload = (
            format_html('<pre class="ob-payload">{}</pre>', info["payload"])
            if "payload" in info
            else format_html("<p>{}</p>", "The payload is shown only with view_batch_payload.")
        )
        return format_html(
            "schema <code>{}</code> version {} · {} bytes · checksum "
            '<span class="ob-badge ob-ok">{}</span>{}',
            info.get("schema", "?"),
            info.get("version", "?"),
            info["size"],
            info["state"],
            payload,
        )

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj._checkpoint = self.checkpoint_viewer_context(request, obj)
        return obj


def _who(worker: dict[str, Any]) -> SafeString:
    """``#12 on worker-3, pid 4122`` (a link), or just the link when unknown."""
    host, pid = worker["worker_host"], worker["worker_pid"]
    where = ", ".join(
        part for part in (host and f"on {host}", pid is not None and f"pid {pid}") if part
    )
    return format_html("{} {}", link("stepexecution", worker["id"]), where or "(host not recorded)")


def _current_worker(partition: models.StepPartition, workers: list[dict[str, Any]]) -> SafeString:
    current = next((w for w in workers if w["id"] == partition.worker_step_execution_id), None)
    if current is None:
        return format_html("{}", "not assigned")
    return _who(current)


def _lease(
    partition: models.StepPartition, workers: list[dict[str, Any]], now: datetime
) -> SafeString:
    """The current claimed worker's lease while it runs: when it expires (the
    watchdog may then fail it and free the partition), or that it expired."""
    current = next((w for w in workers if w["id"] == partition.worker_step_execution_id), None)
    if current is None or current["lease_ttl"] is None or current["status"] not in LIVE:
        return format_html("{}", "—")
    activity = own_activity(current["last_activity_at"], current["updated_at"])
    expires = activity + current["lease_ttl"]
    word = "expires" if expires > now else "expired"
    return format_html("{} {}", word, when_absolute(expires, now))


def _earlier_workers(partition: models.StepPartition, workers: list[dict[str, Any]]) -> SafeString:
    earlier = [
        w
        for w in workers
        if w["claimed_partition_id"] == partition.pk
        and w["id"] != partition.worker_step_execution_id
    ]
    if not earlier:
        return format_html("{}", "—")
    return format_html_join(
        "", "<div>{} {}</div>", ((_who(w), badge(w["status"])) for w in earlier)
    )


#: A worker step that still runs (its lease matters).
LIVE = frozenset({"STARTING", "STARTED"})


@admin.register(models.StepPartition)
class StepPartitionAdmin(StatusColumns, ReadOnlyAdmin):
    list_display = (
        "id",
        "step",
        "partition_key",
        "ordinal",
        "status_badge",
        "worker",
        "counts",
        "version",
    )
    list_filter = ("status", StepFilter)
    search_fields = ("=id",)
    ordering = ("-id",)
    fields = (
        "id",
        "step",
        "partition_key",
        "ordinal",
        "status_badge",
        "worker",
        "exit_code",
        "counts",
        "version",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return console.partition_list(super().get_queryset(request))

    @admin.display(description="step")
    def step(self, obj: models.StepPartition) -> SafeString:
        return link("stepexecution", obj.step_execution_id)

    @admin.display(description="worker step")
    def worker(self, obj: models.StepPartition) -> SafeString:
        if obj.worker_step_execution_id is None:
            return format_html("{}", "not assigned")
        return link("stepexecution", obj.worker_step_execution_id)
