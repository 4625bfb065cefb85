"""What happened: the typed facts an operation records, and the services' reports.

Each mutation of the unit of work records the facts it made true from the rows
it locked and wrote — the prior status is the locked row's, never a guess — and
the unit of work hands them to its observers with the operation
(``repository/hooks.py``); observability subscribes by type
(``observability/observer.py``) and says each once the work commits. The
services report what no write makes true (a proposal, a replayed answer) as
facts of the same kinds, through the same hooks (``hooks.report``), at once.

The port marks which facts each mutating operation records
(``repository/port.py``, ``mutation(...)``); ``tests/repository/test_events_recorded.py``
drives every marked operation and checks it.

The facts about one row share a base that carries it (``ExecutionFact``, and
``ExecutionChange`` for a request recorded or found in force, ``StepFact``,
``PartitionFact``, ``PartitionPlanFact``, ``OperatorRecordFact``,
``RetentionRecordFact``); a base is never recorded itself, and the observer
subscribes to the concrete fact types (by exact type), not to a base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.evidence import RecoveryProposal
from oxide_batch.domain.execution import JobExecution, JobInstance, StepExecution
from oxide_batch.domain.flow import FlowDecision
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.domain.partitions import StepPartition
from oxide_batch.domain.recovery import RecoveryDecision
from oxide_batch.domain.retention import PurgeCounts, RetentionHold, RetentionRecord
from oxide_batch.domain.status import BatchStatus

ActorKind = Literal["runtime", "operator", "service"]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a fact true: a runtime (its user), an operator (their user, when
    known), or an in-process service or command (``SERVICE``)."""

    kind: ActorKind
    user_id: int | None = None


SERVICE = Actor("service")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A fact; ``actor`` made it true."""

    actor: Actor = SERVICE


# -- instances and job executions ---------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCreated(Event):
    instance: JobInstance


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionFact(Event):
    """A fact about one job execution: ``execution`` is its row as the
    operation left it."""

    execution: JobExecution


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionLaunched(ExecutionFact):
    """A new attempt, as inserted (STARTING at version 0)."""

    status: BatchStatus = BatchStatus.STARTING
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionTransitioned(ExecutionFact):
    """A job execution's status moved from ``prior`` (the locked row's) to
    ``execution.status`` at ``execution.version``."""

    prior: BatchStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionChange(ExecutionFact):
    """A request on an execution that was recorded (``changed``) or found
    already in force."""

    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionClaimed(ExecutionChange):
    """The owner token was recorded (``changed``) or found already recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionExitCodeRecorded(ExecutionFact):
    """An exit code was recorded on the execution (its enrichment)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopRequested(ExecutionChange):
    """A stop request recorded (``changed``), or a no-op on a stopping or
    finished execution."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LostWriteResolved(ExecutionChange):
    """An operator's resolution of the execution's lost-write marker was recorded
    (``changed``), or there was no unresolved marker (contract §2.5.14)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlObserved(ExecutionFact):
    """A runtime's poll of its control state (a move to STOPPING it caused is
    recorded as its own ``ExecutionTransitioned``)."""

    owner_matches: bool
    stop_requested: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryApplied(ExecutionFact):
    decision: RecoveryDecision


# -- steps, partitions, flow ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFact(Event):
    """A fact about one step execution: ``step`` is its row as the operation
    left it."""

    step: StepExecution


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCreated(StepFact):
    """A step, as inserted: ``status`` at ``version`` (STARTING at 0; a step
    created STARTED also records its ``StepTransitioned``)."""

    status: BatchStatus = BatchStatus.STARTING
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTransitioned(StepFact):
    prior: BatchStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkCommitted(StepFact):
    """A chunk's progress on a STARTED step, at ``version`` (a finishing chunk
    also records the step's ``StepTransitioned``, at the same version)."""

    status: BatchStatus = BatchStatus.STARTED
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepExitCodeRecorded(StepFact):
    """An exit code was recorded on the step (its enrichment)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlanFact(Event):
    """A step's partition plan, as the operation left it."""

    step_execution_id: int
    partitions: tuple[StepPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlanCreated(PartitionPlanFact):
    """A new plan was inserted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlanRestarted(PartitionPlanFact):
    """The prior attempt's plan was carried to the restarted step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFact(Event):
    """A fact about one partition: ``partition`` is its row as the operation
    left it."""

    partition: StepPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionAssigned(PartitionFact):
    """The partition was handed to a worker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCompleted(PartitionFact):
    """The partition finished."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowDecisionAppended(Event):
    decision: FlowDecision


@dataclass(frozen=True, slots=True, kw_only=True)
class DefinitionRegistered(Event):
    digest: str
    job_name: str
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DefinitionUpgradeRegistered(Event):
    edge: UpgradeEdge
    created: bool


# -- audit and retention ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorRecordFact(Event):
    """A fact about one operator request's audit record."""

    record: OperatorRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorRequestRecorded(OperatorRecordFact):
    """The request was recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminHistoryRecorded(Event):
    """The console's own history (Django's ``LogEntry``) names the action."""

    target: str
    object_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRecordFact(Event):
    """A fact about one retention request's audit record."""

    record: RetentionRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRecorded(RetentionRecordFact):
    """The request was recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldPlaced(Event):
    hold: RetentionHold


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldReleased(Event):
    job_instance_id: int
    hold: RetentionHold | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeApplied(Event):
    counts: PurgeCounts


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditPruned(Event):
    counts: tuple[tuple[str, int], ...]


# -- what the services report (no write makes it true: said at once) ---------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryProposed(Event):
    proposal: RecoveryProposal


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorRequestReplayed(OperatorRecordFact):
    """A retried request was answered from its record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRequestReplayed(RetentionRecordFact):
    """A retried request was answered from its record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeBatchFailed(Event):
    """Applying a purge batch failed (``outcome``: the error's code): nothing of
    it was deleted."""

    outcome: str
    candidates: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeFailureRecorded(Event):
    """The ``purge.failed`` notification event of a failed purge batch was
    written (issue 41), in a transaction of its own after the batch rolled back."""

    outcome: str
    candidates: int
    event_id: int
