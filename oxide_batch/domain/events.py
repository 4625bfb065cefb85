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
class ExecutionLaunched(Event):
    """A new attempt, as inserted (STARTING at version 0)."""

    execution: JobExecution
    status: BatchStatus = BatchStatus.STARTING
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionTransitioned(Event):
    """A job execution's status moved from ``prior`` (the locked row's) to
    ``execution.status`` at ``execution.version``."""

    execution: JobExecution
    prior: BatchStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionClaimed(Event):
    """The owner token was recorded (``changed``) or found already recorded."""

    execution: JobExecution
    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionExitCodeRecorded(Event):
    execution: JobExecution


@dataclass(frozen=True, slots=True, kw_only=True)
class StopRequested(Event):
    """A stop request recorded (``changed``), or a no-op on a stopping or
    finished execution."""

    execution: JobExecution
    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlObserved(Event):
    """A runtime's poll of its control state (a move to STOPPING it caused is
    recorded as its own ``ExecutionTransitioned``)."""

    execution: JobExecution
    owner_matches: bool
    stop_requested: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryApplied(Event):
    execution: JobExecution
    decision: RecoveryDecision


# -- steps, partitions, flow ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCreated(Event):
    """A step, as inserted: ``status`` at ``version`` (STARTING at 0; a step
    created STARTED also records its ``StepTransitioned``)."""

    step: StepExecution
    status: BatchStatus = BatchStatus.STARTING
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTransitioned(Event):
    step: StepExecution
    prior: BatchStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkCommitted(Event):
    """A chunk's progress on a STARTED step, at ``version`` (a finishing chunk
    also records the step's ``StepTransitioned``, at the same version)."""

    step: StepExecution
    status: BatchStatus = BatchStatus.STARTED
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepExitCodeRecorded(Event):
    step: StepExecution


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlanCreated(Event):
    step_execution_id: int
    partitions: tuple[StepPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPlanRestarted(Event):
    step_execution_id: int
    partitions: tuple[StepPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionAssigned(Event):
    partition: StepPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCompleted(Event):
    partition: StepPartition


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
class OperatorRequestRecorded(Event):
    record: OperatorRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminHistoryRecorded(Event):
    """The console's own history (Django's ``LogEntry``) names the action."""

    target: str
    object_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRecorded(Event):
    record: RetentionRecord


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
class OperatorRequestReplayed(Event):
    record: OperatorRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRequestReplayed(Event):
    record: RetentionRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeBatchFailed(Event):
    """Applying a purge batch failed (``outcome``: the error's code): nothing of
    it was deleted."""

    outcome: str
    candidates: int
