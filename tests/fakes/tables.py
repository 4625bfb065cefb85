"""What the fake stores: its rows and tables."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from oxide_batch.domain.definitions import JobDefinition
from oxide_batch.domain.errors import FaultStateCorrupt
from oxide_batch.domain.evidence import ExecutionView
from oxide_batch.domain.execution import (
    JobExecution,
    JobInstance,
    StepExecution,
    failed_at_after,
    stopping_at_after,
)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.flow import FlowDecision
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.domain.partitions import StepPartition
from oxide_batch.domain.recovery import RecoveryDecision
from oxide_batch.domain.retention import RetentionHold, RetentionRecord
from oxide_batch.domain.state import (
    EnvelopeKind,
    StateEnvelope,
    StoredState,
    StoredStateCorrupt,
    load_stored,
)
from oxide_batch.domain.worker import WorkerIdentity


@dataclass(frozen=True)
class ExecutionRow:
    """A job execution with what its row holds besides the domain value."""

    execution: JobExecution
    last_activity_at: datetime
    stop_requested_at: datetime | None = None
    stop_requested_by: str | None = None
    owner_token: bytes | None = None
    owner_user_id: int | None = None
    last_observed_at: datetime | None = None
    failed_at: datetime | None = None
    stopping_at: datetime | None = None
    lost_write: bool = False
    # Who runs it (decision 310), recorded with the claim.
    worker: WorkerIdentity | None = None

    def with_execution(self, execution: JobExecution, now: datetime) -> ExecutionRow:
        """The row holding ``execution`` as written at ``now``: a move to FAILED
        records ``failed_at`` once, a move to STOPPING ``stopping_at``, as the
        adapter's columns."""
        return replace(
            self,
            execution=execution,
            failed_at=failed_at_after(self.failed_at, execution.status, now),
            stopping_at=stopping_at_after(self.stopping_at, execution.status, now),
        )

    def view(self, newest_step_write_at: datetime | None = None) -> ExecutionView:
        return ExecutionView(
            execution=self.execution,
            stop_requested_at=self.stop_requested_at,
            stop_requested_by=self.stop_requested_by,
            owner_recorded=self.owner_token is not None,
            last_observed_at=self.last_observed_at,
            last_activity_at=self.last_activity_at,
            newest_step_write_at=newest_step_write_at,
            worker=self.worker,
        )


@dataclass(frozen=True)
class StoredExecution:
    """An execution's stored columns under the model's names (what a test reads
    of ``models.JobExecution`` on the adapter)."""

    status: str
    version: int
    updated_at: datetime
    stop_requested_at: datetime | None
    stop_requested_by: str | None
    owner_token: bytes | None
    last_activity_at: datetime
    last_observed_at: datetime | None


@dataclass(frozen=True)
class StepStored:
    """What a step row holds of its state: each envelope's text and checksum."""

    checkpoint: StoredState | None = None
    context: StoredState | None = None

    def load(self, kind: EnvelopeKind) -> StateEnvelope | None:
        """The verified envelope (``FaultStateCorrupt`` when it does not verify)."""
        stored = self.checkpoint if kind is EnvelopeKind.CHECKPOINT else self.context
        if stored is None:
            return None
        try:
            return load_stored(stored.text, stored.checksum, kind=kind)
        except StoredStateCorrupt:
            raise FaultStateCorrupt() from None


@dataclass(frozen=True)
class InstanceRow:
    instance: JobInstance
    hold: RetentionHold | None = None


@dataclass(frozen=True)
class DetailRow:
    """A kept failure detail (``ob_failure_detail``)."""

    id: int
    job_instance_id: int
    job_execution_id: int
    step_execution_id: int | None
    failure_id: int
    detail: FailureDetail
    recorded_at: datetime


@dataclass(frozen=True)
class AdminHistoryEntry:
    """One line of the admin's history (Django's ``LogEntry`` in the adapter)."""

    user_id: int
    target: str
    object_id: int
    message: str


@dataclass(frozen=True)
class DefinitionRow:
    """A registered definition with its canonical manifest text."""

    definition: JobDefinition
    manifest: str


@dataclass(frozen=True)
class UpgradeRow:
    """A registered upgrade edge between two stored definitions."""

    job_name: str
    key: str
    from_id: int
    to_id: int
    step_mapping: str


@dataclass(frozen=True)
class DecisionRow:
    """A committed flow decision and the instance it belongs to."""

    decision: FlowDecision
    job_instance_id: int


@dataclass(frozen=True)
class PartitionRow:
    """A partition as stored: the value (its context left out) and the stored context."""

    partition: StepPartition
    context: StoredState | None = None


@dataclass
class Tables:
    """What the fake stores, by id; a unit of work works on a copy."""

    instances: dict[int, InstanceRow] = field(default_factory=dict)
    executions: dict[int, ExecutionRow] = field(default_factory=dict)
    steps: dict[int, StepExecution] = field(default_factory=dict)
    # A step's stored checkpoint and context, by step id (absent: neither).
    step_states: dict[int, StepStored] = field(default_factory=dict)
    decisions: dict[int, RecoveryDecision] = field(default_factory=dict)
    decision_users: dict[int, int | None] = field(default_factory=dict)
    operator_requests: dict[int, OperatorRecord] = field(default_factory=dict)
    retention_records: dict[int, RetentionRecord] = field(default_factory=dict)
    admin_history: list[AdminHistoryEntry] = field(default_factory=list)
    # The purge.failed events written (outcome, candidates, job filter).
    purge_failures: list[tuple[str, int, str | None]] = field(default_factory=list)
    definitions: dict[int, DefinitionRow] = field(default_factory=dict)
    upgrades: dict[int, UpgradeRow] = field(default_factory=dict)
    flow_decisions: dict[int, DecisionRow] = field(default_factory=dict)
    partitions: dict[int, PartitionRow] = field(default_factory=dict)
    failure_details: dict[int, DetailRow] = field(default_factory=dict)

    def copy(self) -> Tables:
        fresh = Tables()
        for name, value in vars(self).items():
            setattr(fresh, name, copy.copy(value))
        return fresh


def by_id(row: Any) -> int:
    return int(row.id)
