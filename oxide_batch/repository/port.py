"""The repository port: what services rely on, whatever the adapter.

Every mutation is a compare-and-swap: it names the version it observed and
raises ``StaleVersion`` (expected, actual) when the row moved. Operations
return immutable domain values, never model instances, and are provisional
until ``commit()`` succeeds.

The port is split along its aggregates, one Protocol each (``Executions``,
``Control``, ``OperatorAudit``, ``AdminHistory``, ``Steps``, ``Definitions``,
``Flow``, ``Partitions``, ``Holds``, ``Purge``) over ``Transaction``;
``UnitOfWork`` is all of them. A service types its unit of work against the
ones it uses and is given a ``UnitOfWorkFactory`` of that kind, so an
in-memory fake of just those satisfies it (tests/fakes/, decision 169).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeVar

from oxide_batch.domain import events
from oxide_batch.domain.definitions import DefinitionRegistration, JobDefinition, UpgradeEdge
from oxide_batch.domain.descriptor import RepositoryDescriptor
from oxide_batch.domain.evidence import (
    ExecutionControl,
    ExecutionView,
    RecoveryEvidence,
    StopResult,
)
from oxide_batch.domain.execution import (
    ExecutionCounts,
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    Launch,
    StepExecution,
)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.flow import FlowDecision, FlowDecisionRequest, FlowTransitionKind
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.lost_write import LostWriteResolution, ResolvedLostWrite
from oxide_batch.domain.operator import OperatorAction, OperatorRecord, OperatorRecordDraft
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.partitions import PartitionPlanEntry, StepPartition
from oxide_batch.domain.recovery import RecoveryDecision, RecoveryRequest, RecoveryResult
from oxide_batch.domain.retention import (
    AuditedActor,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    RetentionAction,
    RetentionHold,
    RetentionRecord,
    RetentionRecordDraft,
)
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository.clock import Clock

if TYPE_CHECKING:
    from oxide_batch.repository.steps import StepState

M = TypeVar("M", bound=Callable[..., Any])


@dataclass(frozen=True)
class OperationKind:
    """What an operation of the port is: a mutation, with the facts it records
    (``domain/events.py``: one at least on success), or a read (none)."""

    records: tuple[type[events.Event], ...] = ()

    @property
    def mutates(self) -> bool:
        return bool(self.records)


# Every repository operation by name: what the observer counts and labels
# (``metrics.operation_values``) and what ``tests/repository/test_events_recorded.py``
# drives, one by one.
OPERATIONS: Final[dict[str, OperationKind]] = {}


def mutation(*records: type[events.Event]) -> Callable[[M], M]:
    """Mark a mutating operation with the facts it may record."""
    assert records, "a mutation records what it did"

    def mark(method: M) -> M:
        OPERATIONS[method.__name__] = OperationKind(records)
        return method

    return mark


def read(method: M) -> M:
    """Mark an operation that only reads (it records nothing)."""
    OPERATIONS[method.__name__] = OperationKind()
    return method


class Transaction(Protocol):
    """One transaction; leaving the ``with`` block without ``commit()`` rolls back.
    ``now()`` is the repository clock every operation stamps with."""

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def now(self) -> datetime: ...


class Executions(Protocol):
    """Job instances and their attempts: launch, restart, the lifecycle CAS and
    exit enrichment, and what a runtime write answers with."""

    def write_control(self, job_execution_id: int | None = None) -> WriteControl | None: ...
    @mutation(events.InstanceCreated)
    def select_or_create_job_instance(self, key: JobInstanceKey) -> JobInstanceSelection: ...
    @read
    def find_job_instance(self, key: JobInstanceKey) -> JobInstance | None: ...
    @read
    def get_job_instance(self, job_instance_id: int) -> JobInstance: ...
    @mutation(events.ExecutionLaunched)
    def create_job_execution(
        self, job_instance_id: int, *, definition_digest: str | None = None
    ) -> JobExecution: ...
    @mutation(events.InstanceCreated, events.ExecutionLaunched, events.ExecutionTransitioned)
    def launch_job_execution(
        self,
        key: JobInstanceKey,
        owner_token: bytes,
        *,
        definition_digest: str | None = None,
        worker: WorkerIdentity | None = None,
    ) -> Launch: ...
    @read
    def get_job_execution(self, job_execution_id: int) -> JobExecution: ...
    @read
    def job_executions(self, job_instance_id: int) -> list[JobExecution]: ...
    @read
    def failure_detail(
        self, job_execution_id: int, *, step_execution_id: int | None = None
    ) -> FailureDetail | None: ...
    @mutation(events.ExecutionTransitioned)
    def transition_job_execution(
        self,
        job_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        by_runtime: bool = False,
        by_operator: bool = False,
        exit_code: str | None = None,
    ) -> JobExecution: ...
    @mutation(events.ExecutionExitCodeRecorded)
    def enrich_job_exit_status(
        self, job_execution_id: int, expected_version: int, exit_code: str
    ) -> JobExecution: ...
    def execution_image(self, job_execution_id: int) -> Mapping[str, Any] | None: ...


class Control(Protocol):
    """Stop requests, ownership, control observation, recovery evidence, the
    audited recovery itself and the lost-write resolution (contract §2.5.1,
    §2.5.2, §2.5.4–§2.5.6, §2.5.14)."""

    @mutation(events.ExecutionTransitioned, events.RecoveryApplied)
    def recover_job_execution(
        self,
        job_execution_id: int,
        request: RecoveryRequest,
        *,
        operator_user_id: int | None = None,
    ) -> RecoveryResult: ...
    @read
    def recovery_decision(self, job_execution_id: int) -> RecoveryDecision | None: ...
    @mutation(events.StopRequested)
    def request_execution_stop(
        self, job_execution_id: int, expected_version: int, actor: str
    ) -> StopResult: ...
    @mutation(events.ExecutionClaimed)
    def claim_execution_owner(
        self,
        job_execution_id: int,
        expected_version: int,
        owner_token: bytes,
        *,
        worker: WorkerIdentity | None = None,
    ) -> ExecutionView: ...
    @mutation(events.ControlObserved, events.ExecutionTransitioned)
    def observe_execution_control(
        self, job_execution_id: int, owner_token: bytes
    ) -> ExecutionControl: ...
    @mutation(events.LostWriteResolved)
    def resolve_lost_write(
        self, job_execution_id: int, resolution: LostWriteResolution
    ) -> ResolvedLostWrite: ...
    @read
    def recovery_evidence(
        self, job_execution_id: int, *, lock: bool = False
    ) -> RecoveryEvidence: ...
    @read
    def recovery_evidence_many(
        self, job_execution_ids: Sequence[int]
    ) -> dict[int, RecoveryEvidence]: ...


class OperatorAudit(Protocol):
    """The operator requests' audit rows: append-only, unique per ``(action, operation_id)``."""

    @read
    def find_operator_request(
        self, action: OperatorAction, operation_id: str
    ) -> OperatorRecord | None: ...
    @mutation(events.OperatorRequestRecorded)
    def append_operator_request(self, draft: OperatorRecordDraft) -> OperatorRecord | None: ...


class AdminHistory(Protocol):
    """The admin's own history of an operator's action, committed with it."""

    @mutation(events.AdminHistoryRecorded)
    def record_admin_history(
        self, *, actor: str, user_id: int | None, target: str, object_id: int, message: str
    ) -> bool: ...


class Steps(Protocol):
    """Step executions: create, the lifecycle CAS, chunk commits and their durable state."""

    @mutation(events.StepCreated, events.StepTransitioned)
    def create_step_execution(
        self,
        job_execution_id: int,
        step_name: str,
        *,
        node_id: str | None = None,
        allow_start_if_complete: bool = False,
        started: bool = False,
        worker: WorkerIdentity | None = None,
    ) -> StepExecution: ...
    @read
    def get_step_execution(self, step_execution_id: int) -> StepExecution: ...
    @read
    def step_executions(self, job_execution_id: int) -> list[StepExecution]: ...
    @mutation(events.StepTransitioned)
    def transition_step_execution(
        self,
        step_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        exit_code: str | None = None,
    ) -> StepExecution: ...
    @mutation(events.StepExitCodeRecorded)
    def enrich_step_exit_status(
        self, step_execution_id: int, expected_version: int, exit_code: str
    ) -> StepExecution: ...
    @mutation(events.ChunkCommitted, events.StepTransitioned)
    def commit_chunk(
        self,
        step_execution_id: int,
        expected_version: int,
        counts: ExecutionCounts,
        *,
        checkpoint: StateEnvelope | None = None,
        context: StateEnvelope | None = None,
        finish: LifecycleTransition | None = None,
        exit_code: str | None = None,
    ) -> StepExecution: ...
    @read
    def step_state(self, step_execution_id: int) -> StepState: ...
    def created_step_state(self, step_execution_id: int) -> StepState | None: ...


class Definitions(Protocol):
    """Job definitions and their upgrade edges."""

    @mutation(events.DefinitionRegistered)
    def register_definition(
        self, job_name: str, revision: str, manifest: Any
    ) -> DefinitionRegistration: ...
    @read
    def get_definition(self, digest: str, *, job_name: str | None = None) -> JobDefinition: ...
    @mutation(events.DefinitionUpgradeRegistered)
    def register_definition_upgrade(self, edge: UpgradeEdge) -> bool: ...


class Flow(Protocol):
    """Flow steps and the flow's committed decisions."""

    @mutation(events.StepCreated, events.StepTransitioned)
    def create_flow_step_execution(
        self,
        job_execution_id: int,
        step_name: str,
        node_id: str,
        start_limit: int | None = None,
        *,
        allow_start_if_complete: bool = False,
        started: bool = False,
        worker: WorkerIdentity | None = None,
    ) -> StepExecution: ...
    @read
    def latest_flow_step(self, job_instance_id: int, node_id: str) -> StepExecution | None: ...
    @mutation(events.FlowDecisionAppended)
    def append_flow_decision(self, request: FlowDecisionRequest) -> FlowDecision: ...
    @read
    def find_reusable_flow_decision(
        self,
        job_instance_id: int,
        node_id: str,
        plan_fingerprint: str,
        input_digest: str,
        kind: FlowTransitionKind,
    ) -> FlowDecision | None: ...
    @read
    def flow_decisions(self, job_execution_id: int) -> list[FlowDecision]: ...


class Partitions(Protocol):
    """A partitioned step's plan, its workers' assignments and the aggregate."""

    @mutation(events.PartitionPlanCreated)
    def create_step_partition_plan(
        self, step_execution_id: int, entries: Sequence[PartitionPlanEntry]
    ) -> list[StepPartition]: ...
    @read
    def step_partition_plan(self, step_execution_id: int) -> list[StepPartition]: ...
    @mutation(events.PartitionAssigned)
    def assign_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition: ...
    @mutation(events.PartitionCompleted)
    def complete_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition: ...
    @mutation(events.StepTransitioned)
    def aggregate_step_partitions(
        self, step_execution_id: int, expected_version: int
    ) -> StepExecution: ...
    @mutation(events.PartitionPlanRestarted)
    def restart_step_partition_plan(
        self, source_step_execution_id: int | None, target_step_execution_id: int
    ) -> list[StepPartition]: ...


class Holds(Protocol):
    """Retention holds and the retention audit (contract §2.5.10, §2.5.9)."""

    @read
    def job_instance_hold(self, job_instance_id: int) -> RetentionHold | None: ...
    @mutation(events.HoldPlaced)
    def place_instance_hold(
        self, job_instance_id: int, actor: AuditedActor, reason_code: str
    ) -> RetentionHold: ...
    @mutation(events.HoldReleased)
    def release_instance_hold(self, job_instance_id: int) -> RetentionHold | None: ...
    @read
    def find_retention_record(
        self, action: RetentionAction, operation_id: str
    ) -> RetentionRecord | None: ...
    @read
    def find_retention_records(
        self, action: RetentionAction, operation_ids: Sequence[str]
    ) -> dict[str, RetentionRecord]: ...
    @mutation(events.RetentionRecorded)
    def append_retention_record(self, draft: RetentionRecordDraft) -> RetentionRecord | None: ...


class Purge(Protocol):
    """The two-phase purge and audit pruning (contract §2.5.11, §2.5.12)."""

    @read
    def purge_survey(self, criteria: PurgeCriteria, *, min_age: timedelta) -> PurgePlan: ...
    @mutation(events.PurgeApplied)
    def apply_purge(self, plan: PurgePlan, *, min_age: timedelta) -> PurgeCounts: ...
    @mutation(events.AuditPruned)
    def prune_audit(self, before: datetime, *, limit: int) -> dict[str, int]: ...
    @read
    def count_prunable_audit(self, before: datetime) -> dict[str, int]: ...
    @mutation(events.PurgeFailureRecorded)
    def record_purge_failure(
        self, *, outcome: str, candidates: int, job_name: str | None
    ) -> int: ...


class UnitOfWork(
    Transaction,
    Executions,
    Control,
    OperatorAudit,
    AdminHistory,
    Steps,
    Definitions,
    Flow,
    Partitions,
    Holds,
    Purge,
    Protocol,
):
    """The whole port: one transaction over every aggregate (what the runtime
    API and the Django adapter deal in). A service types its unit of work
    against the aggregates it uses (e.g. ``OperatorWork``)."""


W_co = TypeVar("W_co", bound=Transaction, covariant=True)


class UnitOfWorkFactory(Protocol[W_co]):
    """What a service is given: a clock and units of work of the kind it needs."""

    @property
    def clock(self) -> Clock: ...
    def begin(self) -> W_co: ...


class JobRepository(Protocol):
    def begin(
        self, *, runtime_user_id: int | None = None, owner_token: bytes | None = None
    ) -> UnitOfWork: ...
    def descriptor(self) -> RepositoryDescriptor: ...
