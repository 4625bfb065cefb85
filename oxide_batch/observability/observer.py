"""The repository observer: metrics for every operation, events for durable facts.

Registered in ``OxideBatchConfig.ready()`` with ``repository.hooks.register``.
The unit of work calls it once per operation, with the typed facts the
operation recorded from the rows it locked and wrote (``domain/events.py``).
Counting the operation and its latency happens at once; each fact is said by
the handlers subscribed to its type (:func:`on`), scheduled with
``transaction.on_commit`` so they run only once the work is durable — Django
discards them when the transaction (or the savepoint) rolls back. Refusals and
conflicts are said at once: nothing commits to make them true; so are the
services' own reports (``hooks.report``: proposals, replays, a failed purge batch).

A failed COMMIT (``commit_outcome_unknown``, or a refusal the server reports at
COMMIT) discards those on-commit callbacks; the unit of work then calls
:meth:`RepositoryObserver.commit_failed`, which counts
``oxide_batch_commit_failures_total{code}`` and says ``repository.commit_failed``
at once, with the operations the lost work held. No query is added: everything
comes from the operations already observed.

A transition's ``from_status`` is the status of the row the operation locked
(decision 163): exact, whichever process served the previous write.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, Final, TypeVar

from django.db import transaction

from oxide_batch.domain import events as facts
from oxide_batch.domain.execution import JobExecution, StepExecution
from oxide_batch.domain.operator import OperatorAction, OperatorRecord, RecordOutcome
from oxide_batch.domain.retention import PURGE_KINDS, RetentionAction, RetentionRecord
from oxide_batch.domain.status import BatchStatus
from oxide_batch.observability import events, metrics
from oxide_batch.observability.events import current_request_id
from oxide_batch.repository.hooks import CommitFailure, OperationEvent

log = logging.getLogger(__name__)
S = BatchStatus
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
        "rejection_code": record.rejection_code,
        "recorded_outcome": record.outcome.value,
    }


def safely(action: Callable[[], None]) -> None:
    """Run ``action``; a failing metrics or log sink never changes an outcome."""
    try:
        action()
    except Exception:
        with contextlib.suppress(Exception):
            log.debug("observability sink failed", exc_info=True)


# -- subscriptions: what each fact says ------------------------------------------------

F = TypeVar("F", bound=facts.Event)
Say = Callable[[Any, str | None], None]
_SUBSCRIBERS: dict[type[facts.Event], list[Say]] = {}


Handler = Callable[[F, str | None], None]


def on(*kinds: type[F]) -> Callable[[Handler[F]], Handler[F]]:
    """Subscribe a handler ``(fact, request_id)`` to facts of ``kinds``."""

    def subscribe(handler: Handler[F]) -> Handler[F]:
        for kind in kinds:
            _SUBSCRIBERS.setdefault(kind, []).append(handler)
        return handler

    return subscribe


def subscribed() -> frozenset[type[facts.Event]]:
    """The fact types something says (for the tests of the catalogue)."""
    return frozenset(_SUBSCRIBERS)


def say(fact: facts.Event, request_id: str | None) -> None:
    """Every handler of ``fact``'s type, each on its own (one failing sink
    silences only itself)."""
    for handler in _SUBSCRIBERS.get(type(fact), ()):
        safely(functools.partial(handler, fact, request_id))


class RepositoryObserver:
    """``hooks.register(RepositoryObserver())``: see the module docstring."""

    def __call__(self, event: OperationEvent) -> None:
        operation = metrics.operation_label(event.operation)
        outcome = metrics.outcome_label(event.outcome)

        def count() -> None:
            metrics.REPOSITORY_OPERATIONS.labels(operation, outcome).inc()
            metrics.REPOSITORY_LATENCY.labels(operation).observe(event.seconds)

        safely(count)
        if event.error is not None:
            safely(lambda: _failed(event, operation, outcome))
            return
        said = tuple(fact for fact in event.events if type(fact) in _SUBSCRIBERS)
        if said:
            request_id = current_request_id()

            def deliver() -> None:
                for fact in said:
                    say(fact, request_id)

            transaction.on_commit(deliver, using=event.using, robust=True)

    @staticmethod
    def reported(fact: facts.Event) -> None:
        """A service's own report (``hooks.report``): said at once."""
        say(fact, current_request_id())

    def commit_failed(self, failure: CommitFailure) -> None:
        """The COMMIT of a unit of work failed: nothing of it was said (its
        on-commit callbacks never run); say that, at once."""
        code = metrics.code_label(failure.outcome)
        safely(lambda: metrics.COMMIT_FAILURES.labels(code).inc())
        safely(lambda: _say_commit_failed(failure, code))


# -- refusals and faults (said at once) ------------------------------------------------


def _target(event: OperationEvent) -> dict[str, events.FieldValue]:
    return {} if event.target is None else {event.target[0]: event.target[1]}


def _failed(event: OperationEvent, operation: str, outcome: str) -> None:
    if outcome in CONFLICTS:
        events.emit(
            "repository.conflict",
            {"operation": operation, "outcome": outcome, **_target(event)},
        )
    elif outcome in UNAVAILABLE:
        events.emit("repository.unavailable", {"operation": operation, "outcome": outcome})


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


# -- job executions ----------------------------------------------------------------------


@on(facts.InstanceCreated)
def _instance_created(fact: facts.InstanceCreated, request_id: str | None) -> None:
    instance = fact.instance
    events.emit(
        "instance.created",
        {"job_name": instance.job_name, "job_instance_id": instance.id, "outcome": "ok"},
        request_id=request_id,
    )


@on(facts.ExecutionLaunched)
def _launched(fact: facts.ExecutionLaunched, request_id: str | None) -> None:
    execution = fact.execution
    events.emit(
        "execution.launched",
        {
            **job_fields(execution),
            "status": fact.status.value,
            "version": fact.version,
            "restart": execution.attempt > 1,
            "outcome": "ok",
        },
        request_id=request_id,
    )


@on(facts.ExecutionTransitioned)
def _job_transitioned(fact: facts.ExecutionTransitioned, request_id: str | None) -> None:
    _transition("job", fact.execution, fact.prior, request_id)


@on(facts.RecoveryApplied)
def _recovered(fact: facts.RecoveryApplied, request_id: str | None) -> None:
    execution, decision = fact.execution, fact.decision
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


@on(facts.StopRequested)
def _stop_requested(fact: facts.StopRequested, request_id: str | None) -> None:
    execution = fact.execution
    events.emit(
        "execution.stop_requested",
        {
            **job_fields(execution),
            "status": execution.status.value,
            "version": execution.version,
            "changed": fact.changed,
            "outcome": "applied" if fact.changed else "no_op",
        },
        request_id=request_id,
    )


@on(facts.LostWriteResolved)
def _lost_write_resolved(fact: facts.LostWriteResolved, request_id: str | None) -> None:
    execution = fact.execution
    events.emit(
        "execution.lost_write_resolved",
        {
            **job_fields(execution),
            "status": execution.status.value,
            "changed": fact.changed,
            "outcome": "applied" if fact.changed else "no_op",
        },
        request_id=request_id,
    )


@on(facts.ControlObserved)
def _observed(fact: facts.ControlObserved, request_id: str | None) -> None:
    execution = fact.execution
    stop_observed = fact.owner_matches and fact.stop_requested
    events.emit(
        "execution.stop_observed" if stop_observed else "execution.control_observed",
        {
            **job_fields(execution),
            "status": execution.status.value,
            "version": execution.version,
            "owner_matches": fact.owner_matches,
            "stop_requested": fact.stop_requested,
            "outcome": "ok",
        },
        request_id=request_id,
    )


# -- steps ---------------------------------------------------------------------------------


@on(facts.StepCreated)
def _step_created(fact: facts.StepCreated, request_id: str | None) -> None:
    _step_event("step.created", fact.step, fact.status, fact.version, request_id)


@on(facts.ChunkCommitted)
def _chunk_committed(fact: facts.ChunkCommitted, request_id: str | None) -> None:
    _step_event("step.chunk_committed", fact.step, fact.status, fact.version, request_id)


@on(facts.StepTransitioned)
def _step_transitioned(fact: facts.StepTransitioned, request_id: str | None) -> None:
    _transition("step", fact.step, fact.prior, request_id)


def _step_event(
    name: str, step: StepExecution, status: BatchStatus, version: int, request_id: str | None
) -> None:
    events.emit(
        name,
        {**step_fields(step), "status": status.value, "version": version, "outcome": "ok"},
        request_id=request_id,
    )


# -- audited requests ------------------------------------------------------------------


@on(facts.OperatorRequestRecorded)
def _operator_request(fact: facts.OperatorRequestRecorded, request_id: str | None) -> None:
    record = fact.record
    outcome = "applied" if record.outcome is RecordOutcome.APPLIED else "rejected"
    metrics.OPERATOR_REQUESTS.labels(record.action.value, outcome).inc()
    fields = {**operator_fields(record), "outcome": outcome}
    if record.action is OperatorAction.RECOVER and outcome == "rejected":
        events.emit("recovery.rejected", fields, request_id=request_id)
    events.emit(f"operator.request.{outcome}", fields, request_id=request_id)


@on(facts.RetentionRecorded)
def _retention_record(fact: facts.RetentionRecorded, request_id: str | None) -> None:
    record = fact.record
    if record.outcome is RecordOutcome.REJECTED:
        # A refusal recorded (a stale purge batch, …): nothing was applied; a
        # failed purge batch was counted when it failed (``PurgeBatchFailed``).
        metrics.OPERATOR_REQUESTS.labels(record.action.value, "rejected").inc()
        fields = {**retention_fields(record), "outcome": "rejected"}
        events.emit("operator.request.rejected", fields, request_id=request_id)
        return
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


# -- what the services report (at once) ---------------------------------------------


@on(facts.RecoveryProposed)
def _recovery_proposed(fact: facts.RecoveryProposed, request_id: str | None) -> None:
    """A recovery proposal was computed (its evidence digest is never logged)."""
    proposal = fact.proposal
    evidence = proposal.evidence
    events.emit(
        "recovery.proposed",
        {
            "job_execution_id": evidence.job_execution_id,
            "attempt": evidence.attempt,
            "status": evidence.status.value,
            "version": evidence.version,
            "eligible": proposal.eligible,
            "ineligible_reason": proposal.reason_code,
            "unknown_commit": proposal.unknown_commit,
            "outcome": "eligible" if proposal.eligible else "ineligible",
        },
        request_id=request_id,
    )


@on(facts.OperatorRequestReplayed)
def _operator_replayed(fact: facts.OperatorRequestReplayed, request_id: str | None) -> None:
    """An operator request was answered from its audit row (an applied outcome
    or a refusal replayed as the same problem)."""
    record = fact.record
    metrics.OPERATOR_REQUESTS.labels(record.action.value, "replayed").inc()
    events.emit(
        "operator.request.replayed",
        {**operator_fields(record), "outcome": "replayed"},
        request_id=request_id,
    )


@on(facts.RetentionRequestReplayed)
def _retention_replayed(fact: facts.RetentionRequestReplayed, request_id: str | None) -> None:
    """A hold, release or purge batch was answered from its audit row."""
    record = fact.record
    metrics.OPERATOR_REQUESTS.labels(record.action.value, "replayed").inc()
    if record.action is RetentionAction.APPLY_PURGE:
        metrics.PURGE_BATCHES.labels("replayed").inc()
    events.emit(
        "operator.request.replayed",
        {**retention_fields(record), "outcome": "replayed"},
        request_id=request_id,
    )


@on(facts.PurgeBatchFailed)
def _purge_failed(fact: facts.PurgeBatchFailed, request_id: str | None) -> None:
    """Applying a purge batch failed: nothing of it was deleted."""
    outcome = metrics.code_label(fact.outcome)
    metrics.PURGE_BATCHES.labels("conflict" if outcome in PURGE_CONFLICTS else "failed").inc()
    events.emit(
        "purge.batch_failed",
        {"outcome": outcome, "candidates": fact.candidates},
        request_id=request_id,
    )


# -- shared ----------------------------------------------------------------------------


def _transition(
    kind: str,
    execution: JobExecution | StepExecution,
    prior: BatchStatus,
    request_id: str | None,
) -> None:
    status = execution.status
    metrics.TRANSITIONS.labels(kind, prior.value, status.value).inc()
    failure = execution.failure
    correlation = (
        job_fields(execution) if isinstance(execution, JobExecution) else step_fields(execution)
    )
    events.emit(
        "execution.transitioned" if kind == "job" else "step.transitioned",
        {
            **correlation,
            "from_status": prior.value,
            "to_status": status.value,
            "version": execution.version,
            "failure_category": failure.category.value if failure else None,
            "failure_id": failure.failure_id if failure else None,
            "outcome": "ok",
        },
        level=events.WARNING if status in ALARMING else events.INFO,
        request_id=request_id,
    )


OBSERVER: Final = RepositoryObserver()
