"""The lifecycle table (contract §2.1) and compare-and-swap transitions.

Rules are data: ``LEGAL_TRANSITIONS`` is the table, ``RUNTIME_JOB_TRANSITIONS``
the part of it a runtime may use on a job execution. A transition checks, in
the seed's order (``transition_execution`` / ``ExecutionMetadata::transition``):
stale version, restart-in-place, illegal pair (the runtime's table for a
runtime's job transition), transition time, count exhaustion, missing failure,
version exhaustion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from oxide_batch.domain.errors import (
    FailedTransitionMissingFailure,
    IllegalTransition,
    InvalidState,
    InvalidTransitionTime,
    NotRestartable,
    RestartRequiresNewAttempt,
    StaleVersion,
    VersionAhead,
    VersionExhausted,
)
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureSummary,
)
from oxide_batch.domain.names import NameKind, validate_new_name
from oxide_batch.domain.status import BatchStatus

S = BatchStatus
INITIAL_VERSION = 0
MAX_VERSION = 2**63 - 1

LEGAL_TRANSITIONS: Mapping[BatchStatus, frozenset[BatchStatus]] = {
    S.STARTING: frozenset({S.STARTED, S.STOPPING, S.FAILED, S.UNKNOWN}),
    S.STARTED: frozenset({S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.UNKNOWN}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED, S.UNKNOWN}),
    S.STOPPED: frozenset({S.ABANDONED}),
    S.FAILED: frozenset({S.ABANDONED}),
    S.UNKNOWN: frozenset({S.FAILED, S.ABANDONED}),
    S.COMPLETED: frozenset(),
    S.ABANDONED: frozenset(),
}
RESTARTABLE = frozenset({S.STOPPED, S.FAILED})
# What an operator's abandon moves to ABANDONED: every status the table lets
# become ABANDONED, except UNKNOWN — its outcome is unknown, so it is abandoned
# only by a recovery, which records the evidence it was decided on.
ABANDONABLE = frozenset(
    status
    for status, targets in LEGAL_TRANSITIONS.items()
    if S.ABANDONED in targets and status is not S.UNKNOWN
)
# contract §2.1: through the runtime API a runtime moves its own job executions,
# but ABANDONED and leaving UNKNOWN are operator decisions. Steps follow the
# full table.
RUNTIME_JOB_TRANSITIONS: Mapping[BatchStatus, frozenset[BatchStatus]] = {
    source: frozenset() if source is S.UNKNOWN else targets - {S.ABANDONED}
    for source, targets in LEGAL_TRANSITIONS.items()
}


@dataclass(frozen=True)
class LifecycleTransition:
    """A requested move to ``target``.

    ``at`` is the transition instant; a repository stamps its own clock when it
    is ``None``. ``terminal_rollback`` adds one to ``rolled_back``.
    """

    target: BatchStatus
    failure: FailureSummary | None = None
    terminal_rollback: bool = False
    at: datetime | None = None

    def stamped(self, at: datetime) -> LifecycleTransition:
        return self if self.at is not None else dataclasses.replace(self, at=at)

    @property
    def sends_detail(self) -> bool:
        """Its failure carries the runtime's detail (contract §2, "Failure detail")."""
        return self.failure is not None and self.failure.detail is not None


def validate_expected_version(expected: int, actual: int) -> None:
    """``StaleVersion`` when the row moved on since the caller read it;
    ``VersionAhead`` when the caller saw a version the row never reached here
    (a lost write), never taken for a conflict."""
    if expected > actual:
        raise VersionAhead(expected=expected, actual=actual)
    if expected != actual:
        raise StaleVersion(expected=expected, actual=actual)


def validate_transition(
    current: BatchStatus, target: BatchStatus, *, runtime_job: bool = False
) -> None:
    """Refuse a pair the table does not mark legal: a restart in place is
    ``RestartRequiresNewAttempt``, anything else ``IllegalTransition`` — also a
    pair only an operator may make when ``runtime_job``."""
    if target is S.STARTING and current in RESTARTABLE:
        raise RestartRequiresNewAttempt(from_status=current)
    table = RUNTIME_JOB_TRANSITIONS if runtime_job else LEGAL_TRANSITIONS
    if target not in table[current]:
        raise IllegalTransition(
            from_status=current, to_status=target, allowed=allowed_targets(table, current)
        )


def allowed_targets(
    table: Mapping[BatchStatus, frozenset[BatchStatus]], current: BatchStatus
) -> list[str]:
    """The statuses ``table`` lets ``current`` move to, as durable codes in the
    statuses' own order (what an ``IllegalTransition`` offers as the way out)."""
    return [status.value for status in BatchStatus if status in table[current]]


def validate_restart(status: BatchStatus) -> None:
    """Only STOPPED and FAILED attempts may be followed by a new attempt."""
    if status not in RESTARTABLE:
        raise NotRestartable(status=status)


def next_version(version: int) -> int:
    if version >= MAX_VERSION:
        raise VersionExhausted(version=version)
    return version + 1


def transition_metadata(
    metadata: ExecutionMetadata, transition: LifecycleTransition, *, runtime_job: bool = False
) -> ExecutionMetadata:
    """Apply one legal transition; the exit code never changes.

    Checks in the seed's order: the pair (``RestartRequiresNewAttempt``,
    ``IllegalTransition``), the instant (``InvalidTransitionTime``), the
    terminal rollback (``CountExhausted``), then the failure a FAILED target
    needs, its own or the one carried forward (``FailedTransitionMissingFailure``).
    """
    validate_transition(metadata.status, transition.target, runtime_job=runtime_job)
    at = transition.at
    if at is None:
        raise ValueError("a transition must be stamped before it is applied")
    current = metadata.timestamps
    floor = current.started_at or current.created_at
    if at < floor or (current.ended_at is not None and at < current.ended_at):
        raise InvalidTransitionTime()
    started_at = at if transition.target is S.STARTED else current.started_at
    ended_at = (current.ended_at or at) if transition.target.is_finished else None
    counts = (
        metadata.counts.with_terminal_rollback()
        if transition.terminal_rollback
        else metadata.counts
    )
    failure = transition.failure or metadata.failure
    if transition.target is S.FAILED and failure is None:
        raise FailedTransitionMissingFailure()
    return ExecutionMetadata(
        status=transition.target,
        exit_code=metadata.exit_code,
        timestamps=ExecutionTimestamps(current.created_at, started_at, ended_at),
        counts=counts,
        failure=failure,
    )


def compare_and_transition(
    metadata: ExecutionMetadata,
    version: int,
    expected_version: int,
    transition: LifecycleTransition,
    *,
    runtime_job: bool = False,
) -> tuple[ExecutionMetadata, int]:
    """The whole CAS: the version check first (``StaleVersion``), then
    :func:`transition_metadata`, then the version bump (``VersionExhausted``).

    ``runtime_job``: the transition is a runtime's, of a job execution — the
    pair is checked against ``RUNTIME_JOB_TRANSITIONS``, in the pair check's
    place (after the version, before the instant and the failure).
    """
    validate_expected_version(expected_version, version)
    updated = transition_metadata(metadata, transition, runtime_job=runtime_job)
    return updated, next_version(version)


def chunk_refusal_hint(status: BatchStatus) -> str:
    """What a runtime does when a step in ``status`` refuses a chunk commit."""
    if status is S.STARTING:
        return (
            "move the step to STARTED first (a transition to STARTED): chunks are "
            "committed on a STARTED step"
        )
    if status is S.STOPPING:
        return "the step is stopping: end it STOPPED, it takes no more chunks"
    return f"the step ended {status.value} and takes no more chunks"


def compare_and_commit_chunk(
    metadata: ExecutionMetadata,
    version: int,
    expected_version: int,
    delta: ExecutionCounts,
    *,
    execution_id: int,
) -> tuple[ExecutionMetadata, int]:
    """A chunk commit: version check, then the step must be STARTED
    (``InvalidState``); the chunk's count deltas are added (``CountExhausted``)."""
    validate_expected_version(expected_version, version)
    if metadata.status is not S.STARTED:
        raise InvalidState(
            id=execution_id, status=metadata.status, hint=chunk_refusal_hint(metadata.status)
        )
    counts = metadata.counts.plus(delta)
    return _with(metadata, counts=counts), next_version(version)


def compare_and_enrich(
    metadata: ExecutionMetadata, version: int, expected_version: int, exit_code: str
) -> tuple[ExecutionMetadata, int]:
    """Exit-status enrichment: its own CAS that never changes status."""
    validate_expected_version(expected_version, version)
    validate_new_name(exit_code, NameKind.EXIT_CODE)
    return _with(metadata, exit_code=exit_code), next_version(version)


def _with(
    metadata: ExecutionMetadata,
    *,
    exit_code: str | None = None,
    counts: ExecutionCounts | None = None,
) -> ExecutionMetadata:
    """``dataclasses.replace`` of the metadata (re-validated the same way), spelled
    out: replace introspects the fields on every call."""
    return ExecutionMetadata(
        status=metadata.status,
        exit_code=metadata.exit_code if exit_code is None else exit_code,
        timestamps=metadata.timestamps,
        counts=metadata.counts if counts is None else counts,
        failure=metadata.failure,
    )
