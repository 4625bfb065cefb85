"""The answers of the hot runtime endpoints, built by hand.

DRF builds an output serializer's fields anew for every instance (a deep copy
of each declared field, nested serializers included) and renders field by
field: a fifth of a chunk commit's CPU. The executions and steps every runtime
write answers with are plain dicts of the domain values, so they are built
here directly. The ``Output`` serializers stay what the OpenAPI document is
generated from; ``tests/api/test_render.py`` checks that these functions give
exactly what ``ExecutionOutput`` and ``StepOutput`` give, for every row of a
varied dataset and for generated values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oxide_batch.api.logs import execution_logs, step_logs
from oxide_batch.client.wire import format_instant
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary, StepExecution
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.skips import SkipRecord
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.selectors.executions import ExecutionRecord


def counts_data(counts: ExecutionCounts) -> dict[str, int]:
    return {
        "read": counts.read,
        "processed": counts.processed,
        "written": counts.written,
        "filtered": counts.filtered,
        "committed": counts.committed,
        "rolled_back": counts.rolled_back,
    }


def step_counts_data(counts: ExecutionCounts) -> dict[str, int]:
    """``StepCountsOutput``: the six and the step's skip counts."""
    return {
        **counts_data(counts),
        "read_skip": counts.read_skip,
        "process_skip": counts.process_skip,
        "write_skip": counts.write_skip,
    }


def failure_data(
    failure: FailureSummary | None, link: Callable[[int], str | None] | None = None
) -> dict[str, Any] | None:
    """``FailureOutput``: ``logs_url`` is ``link(failure_id)`` ("Open the logs",
    decision 316), null without a template."""
    if failure is None:
        return None
    return {
        "category": failure.category.value,
        "failure_id": failure.failure_id,
        "logs_url": None if link is None else link(failure.failure_id),
    }


def detail_data(detail: FailureDetail | None, *, full: bool) -> dict[str, Any] | None:
    """``FailureDetailOutput``: every member for a payload reader (``full``),
    the type alone for any other reader (a viewer; contract §4.3)."""
    if detail is None:
        return None
    if not full:
        return {"type": detail.type}
    return {
        "type": detail.type,
        "message": detail.message,
        "traceback": detail.traceback,
        "type_truncated": detail.type_truncated,
        "message_truncated": detail.message_truncated,
        "traceback_truncated": detail.traceback_truncated,
    }


def skip_data(skip: SkipRecord, *, full: bool) -> dict[str, Any]:
    """``SkipOutput``: the detail's type and message for a payload reader
    (``full``), the type alone for any other reader (a viewer)."""
    detail: dict[str, Any] | None = None
    if skip.detail is not None:
        detail = {"type": skip.detail.type}
        if full:
            detail.update(
                message=skip.detail.message,
                type_truncated=skip.detail.type_truncated,
                message_truncated=skip.detail.message_truncated,
            )
    return {
        "id": skip.id,
        "step_execution_id": skip.step_execution_id,
        "step_name": skip.step_name,
        "job_execution_id": skip.job_execution_id,
        "phase": skip.phase.value,
        "item": skip.item,
        "chunk": skip.chunk,
        "category": skip.category.value,
        "detail": detail,
        "recorded_at": format_instant(skip.recorded_at),
    }


def with_failure_detail(
    data: dict[str, Any], detail: Callable[[], FailureDetail | None], *, full: bool
) -> dict[str, Any]:
    """An execution's or a step's answer with ``failure.detail`` (read by
    ``detail`` only when there is a failure: no query otherwise)."""
    if data["failure"] is not None:
        data["failure"]["detail"] = detail_data(detail(), full=full)
    return data


def execution_data(record: ExecutionRecord) -> dict[str, Any]:
    """``ExecutionOutput(record).data``."""
    execution, extras = record.execution, record.extras
    definition = extras.definition
    return {
        "id": execution.id,
        "job_instance_id": execution.job_instance_id,
        "job_name": execution.job_name,
        "attempt": execution.attempt,
        "status": execution.status.value,
        "exit_code": execution.exit_code,
        "created_at": format_instant(execution.created_at),
        "started_at": format_instant(execution.started_at),
        "ended_at": format_instant(execution.ended_at),
        "updated_at": format_instant(execution.updated_at),
        "counts": counts_data(execution.counts),
        # The link's module only for a failure: the hot answers have none.
        "failure": None
        if execution.failure is None
        else failure_data(execution.failure, execution_logs(record)),
        "version": execution.version,
        "stop_requested": extras.stop_requested,
        "stop_requested_at": format_instant(extras.stop_requested_at),
        "owner_recorded": extras.owner_recorded,
        "last_observed_at": format_instant(extras.last_observed_at),
        "last_activity_at": format_instant(extras.last_activity_at),
        "lease": None
        if extras.lease is None
        else {
            "ttl_seconds": extras.lease.ttl_seconds,
            "expires_at": format_instant(extras.lease.expires_at),
        },
        "lost_write": extras.lost_write,
        "worker": extras.worker,
        "definition": None
        if definition is None
        else {
            "revision": definition.revision,
            "format": definition.format,
            "digest": definition.digest,
        },
    }


def control_data(control: WriteControl) -> dict[str, Any]:
    """``WriteControlOutput(control).data``."""
    return {
        "stop_requested": control.stop_requested,
        "owner_matches": bool(control.owner_matches),
        "fenced": control.fenced,
    }


def with_control(data: dict[str, Any], control: WriteControl | None) -> dict[str, Any]:
    # Only a write that carried an owner token answers with ``control``: the
    # answers of the writes that carry none stay as they were (decision 160).
    if control is not None and control.owner_matches is not None:
        data["control"] = control_data(control)
    return data


def execution_write_data(record: ExecutionRecord, control: WriteControl | None) -> dict[str, Any]:
    """``ExecutionOutput`` of a runtime write: with ``control`` when it carried a token."""
    return with_control(execution_data(record), control)


def step_write_data(step: StepExecution, control: WriteControl | None) -> dict[str, Any]:
    """``StepOutput`` of a runtime write: with ``control`` when it carried a token."""
    return with_control(step_data(step), control)


def step_create_data(
    step: StepExecution,
    control: WriteControl | None,
    taken_over: tuple[StateEnvelope | None, StateEnvelope | None] | None,
) -> dict[str, Any]:
    """``StepOutput`` of a step create; created STARTED (``taken_over``
    given), with the checkpoint and context it took over."""
    data = step_write_data(step, control)
    if taken_over is not None:
        checkpoint, context = taken_over
        data["checkpoint"] = None if checkpoint is None else checkpoint.as_json()
        data["context"] = None if context is None else context.as_json()
    return data


def step_data(step: StepExecution) -> dict[str, Any]:
    """``StepOutput(step).data``."""
    return {
        "id": step.id,
        "job_instance_id": step.job_instance_id,
        "job_execution_id": step.job_execution_id,
        "step_name": step.step_name,
        "node_id": step.node_id,
        "status": step.status.value,
        "exit_code": step.exit_code,
        "created_at": format_instant(step.created_at),
        "started_at": format_instant(step.started_at),
        "ended_at": format_instant(step.ended_at),
        "updated_at": format_instant(step.updated_at),
        "counts": step_counts_data(step.counts),
        "failure": None if step.failure is None else failure_data(step.failure, step_logs(step)),
        "version": step.version,
        "last_activity_at": format_instant(step.activity_at),
        "worker": step_worker_data(step.worker),
    }


def step_worker_data(worker: WorkerIdentity | None) -> dict[str, Any] | None:
    """``StepWorkerOutput(worker).data``: a step has no user of its own (decision 312)."""
    if worker is None:
        return None
    return {"host": worker.host, "pid": worker.pid, "name": worker.name, "client": worker.client}
