"""Execution values: counts, timestamps, failures, metadata, and the execution records."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Self

from oxide_batch.domain.errors import (
    ActiveExecutionHasEndTime,
    CountExhausted,
    FailedExecutionMissingFailure,
    FinishedExecutionMissingEndTime,
    InvalidTimestampOrder,
)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_identifier, validate_name
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity

MAX_COUNT = 2**63 - 1
UNKNOWN_EXIT_CODE = "UNKNOWN"
COUNT_FIELDS = ("read", "processed", "written", "filtered", "committed", "rolled_back")
#: A step's skip counts (contract §2.3.3, decision 400): derived by the server
#: from the skip ledger entries a chunk commit carries, never sent as deltas.
#: Job executions have none (their columns are the six above).
SKIP_COUNT_FIELDS = ("read_skip", "process_skip", "write_skip")
STEP_COUNT_FIELDS = (*COUNT_FIELDS, *SKIP_COUNT_FIELDS)


@dataclass(frozen=True)
class ExecutionCounts:
    """Durable item and chunk counters, each 0..2^63-1.

    The seed's six (``COUNT_FIELDS``) are an execution's and a step's; the
    three skip counts (``SKIP_COUNT_FIELDS``) only a step's (and a partition's):
    a job execution's stay 0 (decision 400)."""

    read: int = 0
    processed: int = 0
    written: int = 0
    filtered: int = 0
    committed: int = 0
    rolled_back: int = 0
    read_skip: int = 0
    process_skip: int = 0
    write_skip: int = 0

    def __post_init__(self) -> None:
        values = (
            self.read,
            self.processed,
            self.written,
            self.filtered,
            self.committed,
            self.rolled_back,
            self.read_skip,
            self.process_skip,
            self.write_skip,
        )
        if all(type(value) is int and 0 <= value <= MAX_COUNT for value in values):
            return  # the common case; anything else is explained below
        for name in STEP_COUNT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"count {name} must be a non-negative int")
            if value > MAX_COUNT:
                raise CountExhausted()

    def plus(self, delta: ExecutionCounts) -> ExecutionCounts:
        """Add ``delta`` field by field; ``CountExhausted`` on overflow."""
        return ExecutionCounts(
            *(getattr(self, name) + getattr(delta, name) for name in STEP_COUNT_FIELDS)
        )

    def with_terminal_rollback(self) -> ExecutionCounts:
        return dataclasses.replace(self, rolled_back=self.rolled_back + 1)

    @property
    def skipped(self) -> int:
        """Every skipped item, whatever its phase."""
        return self.read_skip + self.process_skip + self.write_skip

    def as_dict(self) -> dict[str, int]:
        """The six seed counts (a chunk's deltas on the wire, an execution's)."""
        return {name: getattr(self, name) for name in COUNT_FIELDS}

    def as_step_dict(self) -> dict[str, int]:
        """All nine: a step's (or a partition's) counts."""
        return {name: getattr(self, name) for name in STEP_COUNT_FIELDS}


@dataclass(frozen=True)
class ExecutionTimestamps:
    """created <= started <= ended (an end without a start is checked against creation)."""

    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.started_at is not None and self.started_at < self.created_at:
            raise InvalidTimestampOrder()
        floor = self.started_at or self.created_at
        if self.ended_at is not None and self.ended_at < floor:
            raise InvalidTimestampOrder()


@dataclass(frozen=True)
class FailureSummary:
    """A redacted failure: a category and an opaque failure id — never free text.

    ``detail`` is what a runtime sends with it (the exception's type, message and
    traceback): never part of the row or of a comparison; the repository keeps
    what the deployment allows of it, scrubbed, in a table of its own."""

    category: FailureCategory
    failure_id: int
    detail: FailureDetail | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate_identifier(IdentifierKind.FAILURE, self.failure_id)


def failed_at_after(
    failed_at: datetime | None, status: BatchStatus, now: datetime
) -> datetime | None:
    """When an execution first failed, after a move to ``status`` at ``now``:
    a move to FAILED records the instant once (a transition's or a
    recovery's); a later move never changes it."""
    if status is BatchStatus.FAILED and failed_at is None:
        return now
    return failed_at


def stopping_at_after(
    stopping_at: datetime | None, status: BatchStatus, now: datetime
) -> datetime | None:
    """When an execution began stopping, after a move to ``status`` at ``now``:
    the move to STOPPING (the runtime's acknowledgement of a stop) records the
    instant once, so a STOPPED execution's timeline still shows it."""
    if status is BatchStatus.STOPPING and stopping_at is None:
        return now
    return stopping_at


@functools.lru_cache(maxsize=1024)
def _valid_exit_code(exit_code: str) -> str:
    """``validate_name`` of an exit code, remembered: exit codes are a small
    vocabulary and every execution value read or written checks its own (a
    refused code raises, and is never remembered)."""
    return validate_name(exit_code, NameKind.EXIT_CODE)


@dataclass(frozen=True)
class ExecutionMetadata:
    """Status, exit code, timestamps, counts and failure, with the seed's invariants.

    Active or UNKNOWN ⇒ no end time; finished ⇒ an end time; FAILED ⇒ a failure.
    """

    status: BatchStatus
    exit_code: str
    timestamps: ExecutionTimestamps
    counts: ExecutionCounts = ExecutionCounts()
    failure: FailureSummary | None = None

    def __post_init__(self) -> None:
        if type(self.exit_code) is str:
            _valid_exit_code(self.exit_code)
        else:
            validate_name(self.exit_code, NameKind.EXIT_CODE)
        ended = self.timestamps.ended_at is not None
        if self.status.is_unresolved and ended:
            raise ActiveExecutionHasEndTime()
        if self.status.is_finished and not ended:
            raise FinishedExecutionMissingEndTime()
        if self.status is BatchStatus.FAILED and self.failure is None:
            raise FailedExecutionMissingFailure()

    @classmethod
    def starting(cls, created_at: datetime) -> ExecutionMetadata:
        """A new attempt: STARTING, exit ``UNKNOWN``, zero counts."""
        return cls(BatchStatus.STARTING, UNKNOWN_EXIT_CODE, ExecutionTimestamps(created_at))


@dataclass(frozen=True)
class JobInstance:
    """One logical occurrence of a job: its name and identifying parameters."""

    id: int
    key: JobInstanceKey
    created_at: datetime

    @property
    def job_name(self) -> str:
        return self.key.job_name


@dataclass(frozen=True)
class JobInstanceSelection:
    """The result of ``select_or_create_job_instance``."""

    instance: JobInstance
    created: bool


@dataclass(frozen=True)
class Launch:
    """The result of ``launch_job_execution``: the instance (and whether the
    launch created it) and its new attempt, claimed and STARTED."""

    selection: JobInstanceSelection
    execution: JobExecution

    @property
    def instance(self) -> JobInstance:
        return self.selection.instance


@dataclass(frozen=True)
class _Execution:
    """What job and step executions share: metadata under an optimistic version."""

    id: int
    metadata: ExecutionMetadata
    version: int
    updated_at: datetime

    @property
    def status(self) -> BatchStatus:
        return self.metadata.status

    @property
    def exit_code(self) -> str:
        return self.metadata.exit_code

    @property
    def counts(self) -> ExecutionCounts:
        return self.metadata.counts

    @property
    def failure(self) -> FailureSummary | None:
        return self.metadata.failure

    @property
    def created_at(self) -> datetime:
        return self.metadata.timestamps.created_at

    @property
    def started_at(self) -> datetime | None:
        return self.metadata.timestamps.started_at

    @property
    def ended_at(self) -> datetime | None:
        return self.metadata.timestamps.ended_at

    def with_state(self, metadata: ExecutionMetadata, version: int, updated_at: datetime) -> Self:
        """A copy with new state (``dataclasses.replace`` without its per-call
        field introspection: executions have no ``__post_init__`` to re-run)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(metadata=metadata, version=version, updated_at=updated_at)
        return copy


@dataclass(frozen=True)
class JobExecution(_Execution):
    """One launch or restart attempt of a job instance."""

    job_instance_id: int
    job_name: str
    attempt: int
    definition_id: int
    restart_of_id: int | None = None
    upgrade_id: int | None = None
    # The recovery decision that resolved it: the runtime is fenced (contract §2.5.6).
    recovery_decision_id: int | None = None


def own_activity(last_activity_at: datetime | None, updated_at: datetime) -> datetime:
    """A row's own activity (contract §2.5.3): its ``last_activity_at`` (runtime
    writes, and for an execution the owner's observations) — a recovery never
    moves it; a row without it — written outside the adapter, whose every write
    sets it — counts from its ``updated_at``."""
    return updated_at if last_activity_at is None else last_activity_at


@dataclass(frozen=True)
class StepExecution(_Execution):
    """One attempt of a named step within a job execution."""

    job_instance_id: int
    job_execution_id: int
    step_name: str
    node_id: str
    # The recovery decision that resolved it to FAILED: fenced (contract §2.5.6).
    recovery_decision_id: int | None = None
    # The runtime's latest write to it (contract §2.5.3); ``None`` only for rows written
    # outside the repository. A recovery never moves it.
    last_activity_at: datetime | None = None
    # Who created it (decision 310): a partition worker's step runs elsewhere
    # than its execution's owner; ``None`` when the runtime said nothing.
    worker: WorkerIdentity | None = None

    @property
    def activity_at(self) -> datetime:
        """The step's last activity — its last runtime write, the one definition
        every surface shows as ``last_activity_at`` (contract §2.5.3): a
        recovery, which moves ``updated_at``, never moves it."""
        return own_activity(self.last_activity_at, self.updated_at)
