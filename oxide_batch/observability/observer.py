"""The repository observer: metrics for every operation, events for durable facts.

Registered in ``OxideBatchConfig.ready()`` with ``repository.hooks.register``.
The unit of work calls it once per operation. Counting the operation and its
latency happens at once; everything that says "this happened" (events,
transition and operator-request counters, purge row counts) is scheduled with
``transaction.on_commit`` so it runs only once the work is durable — Django
discards it when the transaction (or the savepoint) rolls back. Refusals and
conflicts are said at once: nothing commits to make them true.

A failed COMMIT (``commit_outcome_unknown``, or a refusal the server reports at
COMMIT) discards those on-commit callbacks; the unit of work then calls
:meth:`RepositoryObserver.commit_failed`, which counts
``oxide_batch_commit_failures_total{code}`` and says ``repository.commit_failed``
at once, with the operations the lost work held. No query is added: everything
comes from the operations already observed.

Lifecycle ``from_status``: the repository reports the new state only. The prior
status is exact for recoveries (the decision carries it) and for any
execution at version 1 (every execution is created STARTING at version 0);
otherwise this process remembers the last committed ``(version, status)`` it saw
per execution and uses it when it is exactly one version behind. When neither
applies (e.g. the previous write went through another worker process) the
transition is counted with ``from_status="unobserved"``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

from django.db import transaction

from oxide_batch.domain.evidence import ExecutionControl, StopResult
from oxide_batch.domain.execution import (
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    Launch,
    StepExecution,
)
from oxide_batch.domain.operator import OperatorAction, OperatorRecord, RecordOutcome
from oxide_batch.domain.recovery import RecoveryResult
from oxide_batch.domain.retention import PURGE_KINDS, RetentionAction, RetentionRecord
from oxide_batch.domain.status import BatchStatus
from oxide_batch.observability import events, metrics
from oxide_batch.observability.context import current_request_id
from oxide_batch.repository.hooks import CommitFailure, OperationEvent

log = logging.getLogger(__name__)
S = BatchStatus
JOB, STEP = "job", "step"
CONFLICTS: Final = frozenset({"stale_version", "concurrent_modification"})
UNAVAILABLE: Final = frozenset(
    {
        "unavailable",
        "commit_outcome_unknown",
        "schema_uninitialized",
        "migration_required",
        "newer_schema",
        metrics.DATABASE_ERROR,
    }
)
PURGE_CONFLICTS: Final = frozenset({"retention_plan_stale", "concurrent_modification"})
ALARMING: Final = frozenset({S.FAILED, S.UNKNOWN})

# Which id an operation's first argument is (for conflict events).
_TARGET: Final[dict[str, str]] = {
    **dict.fromkeys(
        (
            "get_job_execution",
            "transition_job_execution",
            "enrich_job_exit_status",
            "recover_job_execution",
            "recovery_decision",
            "request_execution_stop",
            "claim_execution_owner",
            "observe_execution_control",
            "recovery_evidence",
            "create_step_execution",
            "create_flow_step_execution",
            "step_executions",
            "flow_decisions",
        ),
        "job_execution_id",
    ),
    **dict.fromkeys(
        (
            "get_step_execution",
            "transition_step_execution",
            "enrich_step_exit_status",
            "commit_chunk",
            "step_state",
            "create_step_partition_plan",
            "step_partition_plan",
            "aggregate_step_partitions",
        ),
        "step_execution_id",
    ),
    **dict.fromkeys(
        (
            "get_job_instance",
            "create_job_execution",
            "job_executions",
            "job_instance_hold",
            "place_instance_hold",
            "release_instance_hold",
            "latest_flow_step",
        ),
        "job_instance_id",
    ),
    **dict.fromkeys(("assign_step_partition", "complete_step_partition"), "partition_id"),
}


class StatusMemory:
    """The last committed ``(version, status)`` this process saw per execution (LRU)."""

    def __init__(self, size: int = 8192) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, int], tuple[int, BatchStatus]] = OrderedDict()

    def get(self, kind: str, pk: int) -> tuple[int, BatchStatus] | None:
        with self._lock:
            return self._items.get((kind, pk))

    def remember(self, kind: str, pk: int, version: int, status: BatchStatus) -> None:
        with self._lock:
            self._items[(kind, pk)] = (version, status)
            self._items.move_to_end((kind, pk))
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def prior(self, kind: str, pk: int, version: int) -> BatchStatus | None:
        """The status at ``version - 1`` when known exactly, else ``None``."""
        if version == 1:
            return S.STARTING  # every execution is created STARTING at version 0
        known = self.get(kind, pk)
        if known is not None and known[0] == version - 1:
            return known[1]
        return None

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def job_fields(execution: JobExecution) -> dict[str, events.FieldValue]:
    return {
        "job_name": execution.job_name,
        "job_instance_id": execution.job_instance_id,
        "job_execution_id": execution.id,
        "attempt": execution.attempt,
    }


def step_fields(step: StepExecution) -> dict[str, events.FieldValue]:
    return {
        "job_instance_id": step.job_instance_id,
        "job_execution_id": step.job_execution_id,
        "step_execution_id": step.id,
    }


def operator_fields(record: OperatorRecord) -> dict[str, events.FieldValue]:
    return {
        "action": record.action.value,
        "operation_id": record.operation_id,
        "reason_code": record.reason_code,
        "job_instance_id": record.job_instance_id,
        "job_execution_id": record.job_execution_id,
        "prior_status": record.prior_status.value if record.prior_status else None,
        "result_status": record.result_status.value if record.result_status else None,
        "changed": record.changed,
        "rejection_code": record.rejection_code,
        "recorded_outcome": record.outcome.value,
    }


def retention_fields(record: RetentionRecord) -> dict[str, events.FieldValue]:
    return {
        "action": record.action.value,
        "operation_id": record.operation_id,
        "reason_code": record.reason_code,
        "job_instance_id": record.job_instance_id,
        "changed": record.changed,
        "recorded_outcome": RecordOutcome.APPLIED.value,
    }


def safely(action: Callable[[], None]) -> None:
    """Run ``action``; a failing metrics or log sink never changes an outcome."""
    try:
        action()
    except Exception:
        with contextlib.suppress(Exception):
            log.debug("observability sink failed", exc_info=True)


class RepositoryObserver:
    """``hooks.register(RepositoryObserver())``: see the module docstring."""

    def __init__(self) -> None:
        self.memory = StatusMemory()
        self._handlers: Mapping[str, Callable[[OperationEvent], None]] = {
            "select_or_create_job_instance": self._instance_selected,
            "create_job_execution": self._launched,
            "launch_job_execution": self._launch,
            "transition_job_execution": self._job_transitioned,
            "enrich_job_exit_status": self._job_written,
            "claim_execution_owner": self._view_written,
            "recover_job_execution": self._recovered,
            "request_execution_stop": self._stop_requested,
            "observe_execution_control": self._observed,
            "create_step_execution": self._step_created,
            "create_flow_step_execution": self._step_created,
            "transition_step_execution": self._step_transitioned,
            "aggregate_step_partitions": self._step_transitioned,
            "enrich_step_exit_status": self._step_written,
            "commit_chunk": self._chunk_committed,
            "append_operator_request": self._operator_request,
            "append_retention_record": self._retention_record,
        }

    def __call__(self, event: OperationEvent) -> None:
        operation = metrics.operation_label(event.operation)
        outcome = metrics.outcome_label(event.outcome)

        def count() -> None:
            metrics.REPOSITORY_OPERATIONS.labels(operation, outcome).inc()
            metrics.REPOSITORY_LATENCY.labels(operation).observe(event.seconds)

        safely(count)
        if event.error is not None:
            safely(lambda: self._failed(event, operation, outcome))
            return
        handler = self._handlers.get(event.operation)
        if handler is not None:
            safely(lambda: handler(event))

    def commit_failed(self, failure: CommitFailure) -> None:
        """The COMMIT of a unit of work failed: nothing of it was said (its
        on-commit callbacks never run); say that, at once."""
        code = metrics.code_label(failure.outcome)
        safely(lambda: metrics.COMMIT_FAILURES.labels(code).inc())
        safely(lambda: self._say_commit_failed(failure, code))

    # -- scheduling ----------------------------------------------------------------

    @staticmethod
    def _after_commit(event: OperationEvent, say: Callable[[str | None], None]) -> None:
        request_id = current_request_id()
        transaction.on_commit(
            lambda: safely(lambda: say(request_id)), using=event.using, robust=True
        )

    # -- refusals and faults (said at once) -------------------------------------------

    def _failed(self, event: OperationEvent, operation: str, outcome: str) -> None:
        if outcome in CONFLICTS:
            events.emit(
                "repository.conflict",
                {"operation": operation, "outcome": outcome, **_target(event)},
            )
        elif outcome in UNAVAILABLE:
            events.emit("repository.unavailable", {"operation": operation, "outcome": outcome})
        if event.operation == "apply_purge":
            batch = "conflict" if outcome in PURGE_CONFLICTS else "failed"
            metrics.PURGE_BATCHES.labels(batch).inc()
            plan = event.args[0] if event.args else event.kwargs.get("plan")
            candidates = getattr(plan, "candidates", None)
            events.emit(
                "purge.batch_failed",
                {
                    "outcome": outcome,
                    "candidates": len(candidates) if isinstance(candidates, tuple) else None,
                },
            )

    @staticmethod
    def _say_commit_failed(failure: CommitFailure, code: str) -> None:
        operations: dict[str, int] = {}
        targets: dict[str, events.FieldValue] = {}
        for event in failure.operations:
            name = metrics.operation_label(event.operation)
            operations[name] = operations.get(name, 0) + 1
            # The last operation naming an id wins: reads come first, the write last.
            targets.update(_target(event))
        if "apply_purge" in operations:
            # Its batch is not applied (or not known to be): the purge alert sees it.
            batch = "conflict" if code in PURGE_CONFLICTS else "failed"
            metrics.PURGE_BATCHES.labels(batch).inc()
        events.emit(
            "repository.commit_failed",
            {**targets, "operations": operations, "outcome": code},
            level=events.WARNING if code in CONFLICTS else events.ERROR,
        )

    # -- job executions ----------------------------------------------------------------

    def _instance_selected(self, event: OperationEvent) -> None:
        selection = event.result
        if not isinstance(selection, JobInstanceSelection) or not selection.created:
            return
        instance = selection.instance
        self._after_commit(
            event, lambda request_id: self._say_instance_created(instance, request_id)
        )

    @staticmethod
    def _say_instance_created(instance: JobInstance, request_id: str | None) -> None:
        events.emit(
            "instance.created",
            {"job_name": instance.job_name, "job_instance_id": instance.id, "outcome": "ok"},
            request_id=request_id,
        )

    def _launched(self, event: OperationEvent) -> None:
        execution = event.result
        if not isinstance(execution, JobExecution):
            return

        def say(request_id: str | None) -> None:
            self._say_launched(execution, execution.status, execution.version, request_id)

        self._after_commit(event, say)

    def _say_launched(
        self,
        execution: JobExecution,
        status: BatchStatus,
        version: int,
        request_id: str | None,
    ) -> None:
        self.memory.remember(JOB, execution.id, version, status)
        events.emit(
            "execution.launched",
            {
                **job_fields(execution),
                "status": status.value,
                "version": version,
                "restart": execution.attempt > 1,
                "outcome": "ok",
            },
            request_id=request_id,
        )

    def _launch(self, event: OperationEvent) -> None:
        """A fused launch (contract §4.2) says what the separate requests say: the
        instance created (when it was), the attempt launched (STARTING,
        version 0), its move to STARTED (version 1). The claim says nothing."""
        launch = event.result
        if not isinstance(launch, Launch):
            return
        execution = launch.execution

        def say(request_id: str | None) -> None:
            if launch.selection.created:
                self._say_instance_created(launch.instance, request_id)
            self._say_launched(execution, S.STARTING, 0, request_id)
            self._transition(JOB, execution, S.STARTING, request_id)

        self._after_commit(event, say)

    def _job_transitioned(self, event: OperationEvent) -> None:
        execution = event.result
        if isinstance(execution, JobExecution):
            self._after_commit(
                event, lambda request_id: self._transition(JOB, execution, None, request_id)
            )

    def _job_written(self, event: OperationEvent) -> None:
        execution = event.result
        if isinstance(execution, JobExecution):
            self._after_commit(event, lambda _: self._remember(JOB, execution))

    def _view_written(self, event: OperationEvent) -> None:
        execution = getattr(event.result, "execution", None)
        if isinstance(execution, JobExecution):
            self._after_commit(event, lambda _: self._remember(JOB, execution))

    def _recovered(self, event: OperationEvent) -> None:
        result = event.result
        if not isinstance(result, RecoveryResult):
            return
        execution, decision = result.execution, result.decision

        def say(request_id: str | None) -> None:
            self._transition(JOB, execution, decision.prior_status, request_id)
            events.emit(
                "recovery.applied",
                {
                    **job_fields(execution),
                    "from_status": decision.prior_status.value,
                    "to_status": decision.resulting_status.value,
                    "version": execution.version,
                    "reason_code": decision.reason_code,
                    "decision_id": decision.id,
                    "eligibility": decision.eligibility,
                    "outcome": "applied",
                },
                request_id=request_id,
            )

        self._after_commit(event, say)

    def _stop_requested(self, event: OperationEvent) -> None:
        result = event.result
        if not isinstance(result, StopResult):
            return
        execution = result.execution.execution

        def say(request_id: str | None) -> None:
            self._remember(JOB, execution)
            events.emit(
                "execution.stop_requested",
                {
                    **job_fields(execution),
                    "status": execution.status.value,
                    "version": execution.version,
                    "changed": result.changed,
                    "outcome": "applied" if result.changed else "no_op",
                },
                request_id=request_id,
            )

        self._after_commit(event, say)

    def _observed(self, event: OperationEvent) -> None:
        control = event.result
        if not isinstance(control, ExecutionControl):
            return
        view = control.execution
        execution = view.execution

        def say(request_id: str | None) -> None:
            known = self.memory.get(JOB, execution.id)
            if known is not None and known[0] == execution.version:
                moved = False
            elif known is not None and known[0] == execution.version - 1:
                moved = known[1] is not execution.status
            else:
                # Not seen here: the observation that moves to STOPPING writes
                # updated_at and last_observed_at with the same instant.
                moved = (
                    control.owner_matches
                    and control.stop_requested
                    and execution.status is S.STOPPING
                    and execution.updated_at == view.last_observed_at
                )
            if moved:
                self._transition(JOB, execution, None, request_id)
            else:
                self._remember(JOB, execution)
            fields: dict[str, events.FieldValue] = {
                **job_fields(execution),
                "status": execution.status.value,
                "version": execution.version,
                "owner_matches": control.owner_matches,
                "stop_requested": control.stop_requested,
                "outcome": "ok",
            }
            if control.owner_matches and control.stop_requested:
                events.emit("execution.stop_observed", fields, request_id=request_id)
            else:
                events.emit("execution.control_observed", fields, request_id=request_id)

        self._after_commit(event, say)

    # -- steps -------------------------------------------------------------------------

    def _step_created(self, event: OperationEvent) -> None:
        """A step created STARTED (contract §4.2) also says its start: created
        STARTING at version 0, then STARTING → STARTED at version 1."""
        step = event.result
        if isinstance(step, StepExecution) and step.status is S.STARTED:
            self._step_event(event, "step.created", S.STARTING, 0)
            self._after_commit(
                event, lambda request_id: self._transition(STEP, step, S.STARTING, request_id)
            )
            return
        self._step_event(event, "step.created")

    def _step_transitioned(self, event: OperationEvent) -> None:
        step = event.result
        if isinstance(step, StepExecution):
            self._after_commit(
                event, lambda request_id: self._transition(STEP, step, None, request_id)
            )

    def _step_written(self, event: OperationEvent) -> None:
        step = event.result
        if isinstance(step, StepExecution):
            self._after_commit(event, lambda _: self._remember(STEP, step))

    def _chunk_committed(self, event: OperationEvent) -> None:
        """A finishing chunk (contract §4.2) says the chunk (on the STARTED step) and
        then the step's end, both at the one version the row ends at."""
        step = event.result
        if isinstance(step, StepExecution) and step.status is not S.STARTED:
            self._step_event(event, "step.chunk_committed", S.STARTED, step.version)
            self._after_commit(
                event, lambda request_id: self._transition(STEP, step, S.STARTED, request_id)
            )
            return
        self._step_event(event, "step.chunk_committed")

    def _step_event(
        self,
        event: OperationEvent,
        name: str,
        status: BatchStatus | None = None,
        version: int | None = None,
    ) -> None:
        """After commit: remember the step's state and say ``name`` about it (in
        ``status`` at ``version`` when given: a fused write's earlier fact)."""
        step = event.result
        if not isinstance(step, StepExecution):
            return

        def say(request_id: str | None) -> None:
            self._remember(STEP, step)
            events.emit(
                name,
                {
                    **step_fields(step),
                    "status": (status or step.status).value,
                    "version": step.version if version is None else version,
                    "outcome": "ok",
                },
                request_id=request_id,
            )

        self._after_commit(event, say)

    # -- audited requests ------------------------------------------------------------

    def _operator_request(self, event: OperationEvent) -> None:
        record = event.result
        if not isinstance(record, OperatorRecord):
            return  # None: a concurrent identical request recorded first

        def say(request_id: str | None) -> None:
            outcome = "applied" if record.outcome is RecordOutcome.APPLIED else "rejected"
            metrics.OPERATOR_REQUESTS.labels(record.action.value, outcome).inc()
            fields = {**operator_fields(record), "outcome": outcome}
            if record.action is OperatorAction.RECOVER and outcome == "rejected":
                events.emit("recovery.rejected", fields, request_id=request_id)
            events.emit(f"operator.request.{outcome}", fields, request_id=request_id)

        self._after_commit(event, say)

    def _retention_record(self, event: OperationEvent) -> None:
        record = event.result
        if not isinstance(record, RetentionRecord):
            return

        def say(request_id: str | None) -> None:
            metrics.OPERATOR_REQUESTS.labels(record.action.value, "applied").inc()
            fields = {**retention_fields(record), "outcome": "applied"}
            if record.action is RetentionAction.APPLY_PURGE:
                counts = record.counts.as_dict()
                for kind in PURGE_KINDS:
                    if counts[kind]:
                        metrics.PURGE_ROWS.labels(kind).inc(counts[kind])
                metrics.PURGE_BATCHES.labels("applied").inc()
                events.emit(
                    "purge.batch_applied",
                    {**fields, "rows_deleted": record.counts.total, "counts": counts},
                    request_id=request_id,
                )
            else:
                name = "hold.placed" if record.action is RetentionAction.HOLD else "hold.released"
                events.emit(name, fields, request_id=request_id)
            events.emit("operator.request.applied", fields, request_id=request_id)

        self._after_commit(event, say)

    # -- shared ------------------------------------------------------------------------

    def _remember(self, kind: str, execution: JobExecution | StepExecution) -> None:
        self.memory.remember(kind, execution.id, execution.version, execution.status)

    def _transition(
        self,
        kind: str,
        execution: JobExecution | StepExecution,
        prior: BatchStatus | None,
        request_id: str | None,
    ) -> None:
        prior = prior or self.memory.prior(kind, execution.id, execution.version)
        self._remember(kind, execution)
        status = execution.status
        from_label = prior.value if prior is not None else metrics.UNOBSERVED
        metrics.TRANSITIONS.labels(kind, from_label, status.value).inc()
        failure = execution.failure
        correlation = (
            job_fields(execution) if isinstance(execution, JobExecution) else step_fields(execution)
        )
        events.emit(
            "execution.transitioned" if kind == JOB else "step.transitioned",
            {
                **correlation,
                "from_status": prior.value if prior is not None else None,
                "to_status": status.value,
                "version": execution.version,
                "failure_category": failure.category.value if failure else None,
                "failure_id": failure.failure_id if failure else None,
                "outcome": "ok",
            },
            level=events.WARNING if status in ALARMING else events.INFO,
            request_id=request_id,
        )


def _target(event: OperationEvent) -> dict[str, events.FieldValue]:
    name = _TARGET.get(event.operation)
    if name is None:
        return {}
    value: Any = event.args[0] if event.args else event.kwargs.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return {name: value}
    return {}


OBSERVER: Final = RepositoryObserver()
