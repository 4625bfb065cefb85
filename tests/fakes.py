"""An in-memory fake of the repository port, for the services' tests (decision 200).

``FakeJobRepository`` satisfies ``UnitOfWorkFactory[OperatorWork]`` and
``UnitOfWorkFactory[RetentionWork]``: its unit of work implements the port's
``Transaction``, ``Executions``, ``Control``, ``OperatorAudit``,
``AdminHistory``, ``Steps``, ``Holds`` and ``Purge`` Protocols. Every rule comes from the
domain (the lifecycle table, the fence, the recovery and stop rules, the purge
plan's staleness), so a rule changed there changes here too; what the fake
owns is storage. The behavioural contract tests (``@pytest.mark.contract`` in
tests/repository/) run against it and the Django adapter alike.

The unit of work works on a copy of the tables and publishes it on
``commit()``; leaving the ``with`` block without it drops the copy. One
transaction at a time: a commit after another unit of work committed since
this one began is refused (``ConcurrentModification``) — there are no row
locks to wait on. Ids come from per-table sequences a rollback does not take
back, as PostgreSQL's.

Not covered (a ``NotImplementedError`` says so): job definitions (a digest;
every attempt runs the built-in definition, id 1), flow steps and decisions,
partitions — ``Definitions``, ``Flow`` and ``Partitions`` are the adapter's
alone. So the evidence's partition and flow markers are always false and the
purge counts none of either. The lost-write marker is set as the adapter sets
it, on the execution the refused unit of work last touched.
"""

from __future__ import annotations

import copy
import dataclasses
import hmac
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import (
    ConcurrentModification,
    ExecutionAlreadyActive,
    ExecutionOwned,
    FaultStateCorrupt,
    InvalidState,
    JobExecutionNotFound,
    JobInstanceNotFound,
    RetentionPlanStale,
    StepExecutionExists,
    StepExecutionNotFound,
    VersionAhead,
)
from oxide_batch.domain.evidence import (
    CheckpointEvidence,
    ExecutionControl,
    ExecutionView,
    LatestStep,
    RecoveryEvidence,
    StopResult,
    already_active,
    observation_stops,
    owner_claim_needs_write,
    same_token,
    stop_request_applies,
    validate_owner_token,
)
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    Launch,
    StepExecution,
)
from oxide_batch.domain.fused import (
    WriteControl,
    fenced_finishing_chunk,
    fenced_transition_with_exit,
    started_on_creation,
    with_exit_code,
)
from oxide_batch.domain.identifiers import IdentifierKind, validate_identifier
from oxide_batch.domain.launch import plan_new_attempt, step_takes_over
from oxide_batch.domain.lifecycle import LifecycleTransition, compare_and_transition
from oxide_batch.domain.names import (
    NameKind,
    OperatorStringKind,
    validate_name,
    validate_operator_string,
)
from oxide_batch.domain.operator import OperatorAction, OperatorRecord, OperatorRecordDraft
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.recovery import (
    RecoveryDecision,
    RecoveryRequest,
    RecoveryResult,
    fenced_enrich,
    fenced_hint,
    recovered_execution,
    resolved_step,
)
from oxide_batch.domain.retention import (
    AuditedActor,
    InstanceState,
    ObservedExecution,
    PurgeCandidate,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    RetentionAction,
    RetentionHold,
    RetentionRecord,
    RetentionRecordDraft,
    stale_candidates,
)
from oxide_batch.domain.state import (
    EnvelopeKind,
    StateEnvelope,
    StateLimits,
    StoredState,
    StoredStateCorrupt,
    load_stored,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.clock import Clock
from oxide_batch.repository.steps import STEP_PARENT_HINT, STEP_PARENT_STATUSES, StepState

if TYPE_CHECKING:
    from oxide_batch.repository.port import Steps
    from oxide_batch.services.operator import OperatorWork
    from oxide_batch.services.retention import RetentionWork

S = BatchStatus
#: The built-in definition every attempt of the fake runs.
BUILT_IN_DEFINITION = 1


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
    lost_write: bool = False

    def view(self, newest_step_write_at: datetime | None = None) -> ExecutionView:
        return ExecutionView(
            execution=self.execution,
            stop_requested_at=self.stop_requested_at,
            stop_requested_by=self.stop_requested_by,
            owner_recorded=self.owner_token is not None,
            last_observed_at=self.last_observed_at,
            last_activity_at=self.last_activity_at,
            newest_step_write_at=newest_step_write_at,
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
class AdminHistoryEntry:
    """One line of the admin's history (Django's ``LogEntry`` in the adapter)."""

    user_id: int
    target: str
    object_id: int
    message: str


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

    def copy(self) -> Tables:
        fresh = Tables()
        for name, value in vars(self).items():
            setattr(fresh, name, copy.copy(value))
        return fresh


class FakeJobRepository:
    """The in-memory repository: ``begin()`` a unit of work, as the adapter's."""

    def __init__(self, clock: Clock, *, state_limits: StateLimits | None = None) -> None:
        self.clock = clock
        self.state_limits = state_limits or StateLimits(
            batch_settings.STATE_MAX_BYTES, batch_settings.STATE_MAX_DEPTH
        )
        self.tables = Tables()
        self.commits = 0
        self._sequences: dict[str, Iterator[int]] = {}

    def begin(
        self, *, runtime_user_id: int | None = None, owner_token: bytes | None = None
    ) -> FakeUnitOfWork:
        return FakeUnitOfWork(self, runtime_user_id=runtime_user_id, owner_token=owner_token)

    def next_id(self, table: str) -> int:
        return next(self._sequences.setdefault(table, itertools.count(1)))

    def stored_execution(self, job_execution_id: int) -> StoredExecution:
        """The committed row of an execution, as the adapter's tests read a model row."""
        row = self.tables.executions[job_execution_id]
        return StoredExecution(
            status=row.execution.status.value,
            version=row.execution.version,
            updated_at=row.execution.updated_at,
            stop_requested_at=row.stop_requested_at,
            stop_requested_by=row.stop_requested_by,
            owner_token=row.owner_token,
            last_activity_at=row.last_activity_at,
            last_observed_at=row.last_observed_at,
        )

    def mark_lost_write(self, job_execution_id: int) -> None:
        """The adapter's marker of a ``version_ahead`` refusal, in a transaction
        of its own (the first detection is kept)."""
        row = self.tables.executions.get(job_execution_id)
        if row is not None and not row.lost_write:
            self.tables.executions[job_execution_id] = dataclasses.replace(row, lost_write=True)


class FakeUnitOfWork:
    """One transaction over a copy of the tables (see the module's docstring)."""

    def __init__(
        self,
        repository: FakeJobRepository,
        *,
        runtime_user_id: int | None = None,
        owner_token: bytes | None = None,
    ) -> None:
        self._repository = repository
        self._runtime_user_id = runtime_user_id
        self._owner_token = owner_token
        self._tables: Tables | None = None
        self._began_after = 0
        self._finished = False
        self._in_hand: int | None = None
        self._control: dict[int, WriteControl] = {}
        self._created_steps: dict[int, StepState] = {}

    # -- Transaction ----------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._tables is not None or self._finished:
            raise RuntimeError("a unit of work is entered once")
        self._tables = self._repository.tables.copy()
        self._began_after = self._repository.commits
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._finished:
            return
        self._finished = True
        if isinstance(exc, VersionAhead):
            if exc.job_execution_id is None:
                exc.job_execution_id = self._in_hand
            if exc.job_execution_id is not None:
                self._repository.mark_lost_write(exc.job_execution_id)

    def commit(self) -> None:
        tables = self._open()
        self._finished = True
        if self._repository.commits != self._began_after:
            raise ConcurrentModification()
        self._repository.tables = tables
        self._repository.commits += 1

    def rollback(self) -> None:
        self._open()
        self._finished = True

    def now(self) -> datetime:
        return self._repository.clock.now()

    def _open(self) -> Tables:
        if self._tables is None or self._finished:
            raise RuntimeError("the unit of work is not open")
        return self._tables

    # -- rows -----------------------------------------------------------------------

    def _instance(self, job_instance_id: int) -> InstanceRow:
        pk = validate_identifier(IdentifierKind.JOB_INSTANCE, job_instance_id)
        row = self._open().instances.get(pk)
        if row is None:
            raise JobInstanceNotFound(id=pk)
        return row

    def _execution(self, job_execution_id: int) -> ExecutionRow:
        pk = validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        row = self._open().executions.get(pk)
        if row is None:
            raise JobExecutionNotFound(id=pk)
        self._in_hand = pk
        self._remember(row)
        return row

    def _step(self, step_execution_id: int) -> StepExecution:
        pk = validate_identifier(IdentifierKind.STEP_EXECUTION, step_execution_id)
        step = self._open().steps.get(pk)
        if step is None:
            raise StepExecutionNotFound(id=pk)
        self._remember(self._execution(step.job_execution_id))
        return step

    def _put(self, row: ExecutionRow) -> None:
        self._open().executions[row.execution.id] = row
        self._remember(row)

    def _remember(self, row: ExecutionRow) -> None:
        self._control[row.execution.id] = WriteControl.of(
            recorded_token=row.owner_token,
            carried_token=self._owner_token,
            stop_requested_at=row.stop_requested_at,
            recovery_decision_id=row.execution.recovery_decision_id,
        )

    def _check_claimant(self, row: ExecutionRow, *, token: bool = True) -> None:
        """The adapter's ``_check_claimant``: another runtime user's claim, or
        (``token``) another recorded owner token, is ``ExecutionOwned``."""
        pk, claimant, runtime = row.execution.id, row.owner_user_id, self._runtime_user_id
        if claimant is not None and runtime is not None and claimant != runtime:
            raise ExecutionOwned(id=pk, other_user=True)
        carried, recorded = self._owner_token, row.owner_token
        if (
            token
            and carried is not None
            and recorded is not None
            and not hmac.compare_digest(recorded, carried)
        ):
            raise ExecutionOwned(id=pk, other_user=False)

    def _steps_of(self, job_execution_id: int) -> list[StepExecution]:
        steps = self._open().steps.values()
        return sorted((s for s in steps if s.job_execution_id == job_execution_id), key=_id)

    def _executions_of(self, job_instance_id: int) -> list[ExecutionRow]:
        rows = self._open().executions.values()
        found = [row for row in rows if row.execution.job_instance_id == job_instance_id]
        return sorted(found, key=lambda row: row.execution.attempt)

    # -- Executions -----------------------------------------------------------------

    def write_control(self, job_execution_id: int) -> WriteControl | None:
        return self._control.get(job_execution_id)

    def select_or_create_job_instance(self, key: JobInstanceKey) -> JobInstanceSelection:
        existing = self.find_job_instance(key)
        if existing is not None:
            return JobInstanceSelection(existing, created=False)
        instance = JobInstance(self._repository.next_id("instances"), key, self.now())
        self._open().instances[instance.id] = InstanceRow(instance)
        return JobInstanceSelection(instance, created=True)

    def find_job_instance(self, key: JobInstanceKey) -> JobInstance | None:
        for row in self._open().instances.values():
            if row.instance.job_name == key.job_name and row.instance.key.digest == key.digest:
                return row.instance
        return None

    def get_job_instance(self, job_instance_id: int) -> JobInstance:
        return self._instance(job_instance_id).instance

    def create_job_execution(
        self, job_instance_id: int, *, definition_digest: str | None = None
    ) -> JobExecution:
        return self._new_attempt(job_instance_id, definition_digest)

    def launch_job_execution(
        self, key: JobInstanceKey, owner_token: bytes, *, definition_digest: str | None = None
    ) -> Launch:
        token = validate_owner_token(owner_token)
        selection = self.select_or_create_job_instance(key)
        execution = self._new_attempt(selection.instance.id, definition_digest, token)
        return Launch(selection=selection, execution=execution)

    def _new_attempt(
        self, job_instance_id: int, digest: str | None, owner_token: bytes | None = None
    ) -> JobExecution:
        if digest is not None:
            raise NotImplementedError("the fake has no job definitions")
        instance = self._instance(job_instance_id).instance
        attempts = self._executions_of(instance.id)
        latest = attempts[-1].execution if attempts else None
        now = self.now()
        try:
            attempt = plan_new_attempt(instance.id, latest, now)
        except ExecutionAlreadyActive as refusal:
            active = attempts[-1]
            newest = max(
                (
                    s.last_activity_at
                    for s in self._steps_of(active.execution.id)
                    if s.last_activity_at
                ),
                default=None,
            )
            raise already_active(
                refusal,
                active.view(newest),
                now=now,
                lease_ttl=batch_settings.LEASE_TTL,
                stale_after=batch_settings.RECOVERY_STALE_AFTER,
            ) from None
        metadata, version = attempt.metadata, 0
        if owner_token is not None:
            metadata, version = started_on_creation(metadata, now)
        execution = JobExecution(
            id=self._repository.next_id("executions"),
            metadata=metadata,
            version=version,
            updated_at=now,
            job_instance_id=instance.id,
            job_name=instance.job_name,
            attempt=attempt.attempt,
            definition_id=BUILT_IN_DEFINITION,
            restart_of_id=attempt.restart_of_id,
        )
        owner_user = self._runtime_user_id if owner_token is not None else None
        self._put(ExecutionRow(execution, now, owner_token=owner_token, owner_user_id=owner_user))
        return execution

    def get_job_execution(self, job_execution_id: int) -> JobExecution:
        pk = validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        row = self._open().executions.get(pk)
        if row is None:
            raise JobExecutionNotFound(id=pk)
        return row.execution

    def job_executions(self, job_instance_id: int) -> list[JobExecution]:
        pk = validate_identifier(IdentifierKind.JOB_INSTANCE, job_instance_id)
        return [row.execution for row in self._executions_of(pk)]

    def transition_job_execution(
        self,
        job_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        by_runtime: bool = False,
        by_operator: bool = False,
        exit_code: str | None = None,
    ) -> JobExecution:
        row = self._execution(job_execution_id)
        self._check_claimant(row)
        current, now = row.execution, self.now()
        if by_runtime:
            metadata, version = fenced_transition_with_exit(
                current, expected_version, transition.stamped(now), exit_code
            )
        else:
            metadata, version = with_exit_code(
                compare_and_transition(
                    current.metadata, current.version, expected_version, transition.stamped(now)
                ),
                exit_code,
            )
        return self._write_execution(row, metadata, version, now, activity=not by_operator)

    def enrich_job_exit_status(
        self, job_execution_id: int, expected_version: int, exit_code: str
    ) -> JobExecution:
        row = self._execution(job_execution_id)
        self._check_claimant(row)
        now = self.now()
        metadata, version = fenced_enrich(row.execution, expected_version, exit_code)
        return self._write_execution(row, metadata, version, now, activity=True)

    def _write_execution(
        self,
        row: ExecutionRow,
        metadata: ExecutionMetadata,
        version: int,
        now: datetime,
        *,
        activity: bool,
    ) -> JobExecution:
        changed = row.execution.with_state(metadata, version, now)
        failed_at = row.failed_at
        if metadata.status is S.FAILED and failed_at is None:
            failed_at = now
        self._put(
            dataclasses.replace(
                row,
                execution=changed,
                failed_at=failed_at,
                last_activity_at=now if activity else row.last_activity_at,
            )
        )
        return changed

    def execution_image(self, job_execution_id: int) -> Mapping[str, Any] | None:
        """The adapter's row image is its own (the API's reads of extras); the
        fake keeps none."""
        return None

    # -- Control --------------------------------------------------------------------

    def request_execution_stop(
        self, job_execution_id: int, expected_version: int, actor: str
    ) -> StopResult:
        validate_operator_string(actor, OperatorStringKind.ACTOR)
        row = self._execution(job_execution_id)
        if not stop_request_applies(row.execution, expected_version):
            return StopResult(row.view(), changed=False)
        row = dataclasses.replace(row, stop_requested_at=self.now(), stop_requested_by=actor)
        self._put(row)
        return StopResult(row.view(), changed=True)

    def claim_execution_owner(
        self, job_execution_id: int, expected_version: int, owner_token: bytes
    ) -> ExecutionView:
        token = validate_owner_token(owner_token)
        row = self._execution(job_execution_id)
        self._check_claimant(row, token=False)
        if owner_claim_needs_write(row.execution, expected_version, row.owner_token, token):
            row = dataclasses.replace(row, owner_token=token, owner_user_id=self._runtime_user_id)
            self._put(row)
        return row.view()

    def observe_execution_control(
        self, job_execution_id: int, owner_token: bytes
    ) -> ExecutionControl:
        token = validate_owner_token(owner_token)
        row = self._execution(job_execution_id)
        execution, runtime, claimant = row.execution, self._runtime_user_id, row.owner_user_id
        other_user = claimant is not None and runtime is not None and claimant != runtime
        owner_matches = same_token(row.owner_token, token) and not other_user
        stop_requested = row.stop_requested_at is not None
        if other_user:
            return ExecutionControl(row.view(), False, stop_requested)
        if owner_matches and execution.recovery_decision_id is not None:
            raise InvalidState(
                id=execution.id,
                status=execution.status,
                hint=fenced_hint(execution.recovery_decision_id),
            )
        now = self.now()
        row = dataclasses.replace(
            row,
            last_observed_at=now,
            last_activity_at=now if owner_matches else row.last_activity_at,
        )
        if observation_stops(
            execution.status, owner_matches=owner_matches, stop_requested=stop_requested
        ):
            metadata, version = compare_and_transition(
                execution.metadata,
                execution.version,
                execution.version,
                LifecycleTransition(S.STOPPING, at=now),
            )
            row = dataclasses.replace(row, execution=execution.with_state(metadata, version, now))
        self._put(row)
        return ExecutionControl(row.view(), owner_matches, stop_requested)

    def recovery_evidence(self, job_execution_id: int, *, lock: bool = False) -> RecoveryEvidence:
        return self._evidence(self._execution(job_execution_id))

    def recovery_evidence_many(
        self, job_execution_ids: Sequence[int]
    ) -> dict[int, RecoveryEvidence]:
        pks = sorted(
            {validate_identifier(IdentifierKind.JOB_EXECUTION, v) for v in job_execution_ids}
        )
        rows = self._open().executions
        return {pk: self._evidence(rows[pk]) for pk in pks if pk in rows}

    def _evidence(self, row: ExecutionRow) -> RecoveryEvidence:
        execution = row.execution
        steps = self._steps_of(execution.id)
        latest = None
        if steps:
            newest = steps[-1]
            stored = self._open().step_states.get(newest.id, StepStored()).checkpoint
            checkpoint = (
                None
                if stored is None
                else CheckpointEvidence.from_stored(stored.text, stored.checksum)
            )
            latest = LatestStep(
                newest.id, newest.status, newest.version, checkpoint, newest.step_name
            )
        failure = execution.failure
        return RecoveryEvidence(
            job_execution_id=execution.id,
            status=execution.status,
            attempt=execution.attempt,
            version=execution.version,
            owner_recorded=row.owner_token is not None,
            failure_category=None if failure is None else failure.category,
            last_activity_at=row.last_activity_at,
            last_observed_at=row.last_observed_at,
            stop_requested_at=row.stop_requested_at,
            newest_step_write_at=max(
                (s.last_activity_at for s in steps if s.last_activity_at), default=None
            ),
            latest_step=latest,
            completed_partition=False,
            committed_flow_decision=False,
            lost_write=row.lost_write,
        )

    def recover_job_execution(
        self,
        job_execution_id: int,
        request: RecoveryRequest,
        *,
        operator_user_id: int | None = None,
    ) -> RecoveryResult:
        row = self._execution(job_execution_id)
        prior, now, tables = row.execution, self.now(), self._open()
        recovered = recovered_execution(prior, request, now)
        assert request.steps_failure is not None
        decision_id = self._repository.next_id("decisions")
        resolved = [
            dataclasses.replace(
                resolved_step(step, request.steps_failure, now), recovery_decision_id=decision_id
            )
            for step in self._steps_of(prior.id)
            if step.status.is_unresolved
        ]
        decision = RecoveryDecision(
            id=decision_id,
            job_execution_id=prior.id,
            execution_version=prior.version,
            prior_status=prior.status,
            resulting_status=recovered.status,
            reason_code=request.reason_code,
            operator_reference=request.operator_reference,
            evidence_digest=request.evidence_digest,
            decided_at=now,
            resolved_step_ids=tuple(step.id for step in resolved),
            eligibility=request.eligibility,
            override_note=request.override_note,
            evidence=request.evidence,
        )
        tables.decisions[decision_id] = decision
        tables.decision_users[decision_id] = operator_user_id
        recovered = dataclasses.replace(recovered, recovery_decision_id=decision_id)
        failed_at = row.failed_at
        if recovered.status is S.FAILED and failed_at is None:
            failed_at = now
        self._put(dataclasses.replace(row, execution=recovered, failed_at=failed_at))
        for step in resolved:
            tables.steps[step.id] = step
        return RecoveryResult(execution=recovered, decision=decision)

    def recovery_decision(self, job_execution_id: int) -> RecoveryDecision | None:
        pk = validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        found = [d for d in self._open().decisions.values() if d.job_execution_id == pk]
        return max(found, key=_id, default=None)

    # -- OperatorAudit and AdminHistory ---------------------------------------------

    def find_operator_request(
        self, action: OperatorAction, operation_id: str
    ) -> OperatorRecord | None:
        for record in self._open().operator_requests.values():
            if (record.action, record.operation_id) == (action, operation_id):
                return record
        return None

    def append_operator_request(self, draft: OperatorRecordDraft) -> OperatorRecord | None:
        if self.find_operator_request(draft.action, draft.operation_id) is not None:
            return None
        record = OperatorRecord(
            id=self._repository.next_id("operator_requests"),
            requested_at=self.now(),
            **vars(draft),
        )
        self._open().operator_requests[record.id] = record
        return record

    def record_admin_history(
        self, *, actor: str, user_id: int | None, target: str, object_id: int, message: str
    ) -> bool:
        if user_id is None:
            return False
        entry = AdminHistoryEntry(user_id, target, object_id, message)
        self._open().admin_history.append(entry)
        return True

    # -- Holds ----------------------------------------------------------------------

    def job_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        return self._instance(job_instance_id).hold

    def place_instance_hold(
        self, job_instance_id: int, actor: AuditedActor, reason_code: str
    ) -> RetentionHold:
        pk = validate_identifier(IdentifierKind.JOB_INSTANCE, job_instance_id)
        validate_operator_string(actor.reference, OperatorStringKind.ACTOR)
        validate_operator_string(reason_code, OperatorStringKind.REASON_CODE)
        row = self._instance(pk)
        hold = RetentionHold(pk, actor.reference, reason_code, self.now(), actor.user_id)
        self._open().instances[pk] = dataclasses.replace(row, hold=hold)
        return hold

    def release_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        row = self._instance(job_instance_id)
        if row.hold is not None:
            self._open().instances[row.instance.id] = dataclasses.replace(row, hold=None)
        return row.hold

    def find_retention_record(
        self, action: RetentionAction, operation_id: str
    ) -> RetentionRecord | None:
        return self.find_retention_records(action, [operation_id]).get(operation_id)

    def find_retention_records(
        self, action: RetentionAction, operation_ids: Sequence[str]
    ) -> dict[str, RetentionRecord]:
        wanted = set(operation_ids)
        return {
            record.operation_id: record
            for record in self._open().retention_records.values()
            if record.action is action and record.operation_id in wanted
        }

    def append_retention_record(self, draft: RetentionRecordDraft) -> RetentionRecord | None:
        if self.find_retention_record(draft.action, draft.operation_id) is not None:
            return None
        record = RetentionRecord(
            **{
                **vars(draft),
                "id": self._repository.next_id("retention_records"),
                "applied_at": self.now(),
            }
        )
        self._open().retention_records[record.id] = record
        return record

    # -- Purge ----------------------------------------------------------------------

    def purge_survey(self, criteria: PurgeCriteria, *, min_age: timedelta) -> PurgePlan:
        """The adapter's survey over the stored rows: the oldest eligible instances
        (by their latest end, then id), at most the bound."""
        criteria.check_age(self.now(), min_age)
        eligible: list[tuple[datetime, int, PurgeCandidate]] = []
        held = 0
        for row in self._open().instances.values():
            if criteria.job_name is not None and row.instance.job_name != criteria.job_name:
                continue
            executions = [r.execution for r in self._executions_of(row.instance.id)]
            ends = [e.ended_at for e in executions]
            if not executions or not all(
                e.status in criteria.statuses and e.ended_at is not None for e in executions
            ):
                continue
            latest_end = max(end for end in ends if end is not None)
            if latest_end >= criteria.cutoff:
                continue
            if row.hold is not None:
                held += 1
                continue
            observed = tuple(
                ObservedExecution(e.id, e.version) for e in sorted(executions, key=_id)
            )
            eligible.append(
                (latest_end, row.instance.id, PurgeCandidate(row.instance.id, observed))
            )
        eligible.sort(key=lambda found: (found[0], found[1]))
        candidates = tuple(found[2] for found in eligible[: criteria.bound])
        ids = {c.instance_id for c in candidates}
        steps = sum(1 for s in self._open().steps.values() if s.job_instance_id in ids)
        attempts = sum(len(c.executions) for c in candidates)
        return PurgePlan(
            criteria=criteria,
            candidates=candidates,
            counts=PurgeCounts(0, 0, steps, attempts, len(candidates)),
            held_excluded=held,
        )

    def apply_purge(self, plan: PurgePlan, *, min_age: timedelta) -> PurgeCounts:
        if plan.computed_digest() != plan.plan_digest:
            raise RetentionPlanStale()
        plan.criteria.check_age(self.now(), min_age)
        if not plan.candidates:
            return PurgeCounts()
        tables, cutoff = self._open(), plan.criteria.cutoff
        observed = {}
        for pk in plan.instance_ids:
            row = tables.instances.get(pk)
            if row is None:
                continue
            observed[pk] = InstanceState(
                row.instance.job_name,
                row.hold is not None,
                [
                    (e.id, e.version, e.status, e.ended_at is not None and e.ended_at < cutoff)
                    for e in sorted((r.execution for r in self._executions_of(pk)), key=_id)
                ],
            )
        if stale_candidates(plan, observed):
            raise RetentionPlanStale()
        ids = set(plan.instance_ids)
        steps = [pk for pk, s in tables.steps.items() if s.job_instance_id in ids]
        executions = [
            pk for pk, r in tables.executions.items() if r.execution.job_instance_id in ids
        ]
        for table, keys in ((tables.steps, steps), (tables.executions, executions)):
            for pk in keys:
                del table[pk]
        for pk in ids:
            del tables.instances[pk]
        return PurgeCounts(0, 0, len(steps), len(executions), len(ids))

    def _audit_rows(
        self, before: datetime
    ) -> dict[str, list[tuple[datetime, int, dict[int, Any]]]]:
        tables = self._open()
        sources: tuple[tuple[str, dict[int, Any], str], ...] = (
            ("recovery_decisions", tables.decisions, "decided_at"),
            ("operator_requests", tables.operator_requests, "requested_at"),
            ("retention_records", tables.retention_records, "applied_at"),
        )
        return {
            name: sorted(
                (getattr(row, column), pk, rows)
                for pk, row in rows.items()
                if getattr(row, column) < before
            )
            for name, rows, column in sources
        }

    def prune_audit(self, before: datetime, *, limit: int) -> dict[str, int]:
        pruned = {}
        for name, found in self._audit_rows(before).items():
            for _, pk, rows in found[:limit]:
                del rows[pk]
            pruned[name] = len(found[:limit])
        return pruned

    def count_prunable_audit(self, before: datetime) -> dict[str, int]:
        return {name: len(found) for name, found in self._audit_rows(before).items()}

    # -- Steps (what the services' evidence needs; not the whole Steps Protocol) -----

    def create_step_execution(
        self,
        job_execution_id: int,
        step_name: str,
        *,
        node_id: str | None = None,
        allow_start_if_complete: bool = False,
        started: bool = False,
    ) -> StepExecution:
        validate_name(step_name, NameKind.STEP)
        node = validate_name(node_id if node_id is not None else step_name, NameKind.NODE)
        row = self._execution(job_execution_id)
        parent = row.execution
        self._check_claimant(row)
        if parent.status not in STEP_PARENT_STATUSES:
            raise InvalidState(id=parent.id, status=parent.status, hint=STEP_PARENT_HINT)
        steps = self._open().steps.values()
        if any(
            s.job_execution_id == parent.id and (s.step_name == step_name or s.node_id == node)
            for s in steps
        ):
            raise StepExecutionExists(job_execution_id=parent.id, step_name=step_name)
        source = self._restart_source(parent, step_name, allow_start_if_complete)
        now = self.now()
        metadata, version = ExecutionMetadata.starting(now), 0
        state, checkpoint, context = StepStored(), None, None
        if source is not None:
            # Taking over state verifies it (contract §2.3.2): no step otherwise.
            state = self._open().step_states.get(source.id, StepStored())
            checkpoint = state.load(EnvelopeKind.CHECKPOINT)
            context = state.load(EnvelopeKind.CONTEXT)
            metadata = dataclasses.replace(metadata, counts=source.counts)
        if started:
            metadata, version = started_on_creation(metadata, now)
        step = StepExecution(
            id=self._repository.next_id("steps"),
            metadata=metadata,
            version=version,
            updated_at=now,
            job_instance_id=parent.job_instance_id,
            job_execution_id=parent.id,
            step_name=step_name,
            node_id=node,
            last_activity_at=now,
        )
        self._open().steps[step.id] = step
        if state != StepStored():
            self._open().step_states[step.id] = state
        self._created_steps[step.id] = StepState(step, checkpoint, context)
        return step

    def created_step_state(self, step_execution_id: int) -> StepState | None:
        return self._created_steps.get(step_execution_id)

    def step_state(self, step_execution_id: int) -> StepState:
        step = self._step(step_execution_id)
        state = self._open().step_states.get(step.id, StepStored())
        return StepState(
            step, state.load(EnvelopeKind.CHECKPOINT), state.load(EnvelopeKind.CONTEXT)
        )

    def _restart_source(
        self, parent: JobExecution, step_name: str, allow_start_if_complete: bool
    ) -> StepExecution | None:
        """The newest earlier row of the step a restarted step takes over (its
        counts: the fake keeps no checkpoint or context), by the domain's rule."""
        if parent.restart_of_id is None:
            return None
        earlier = [
            s
            for s in self._open().steps.values()
            if s.job_instance_id == parent.job_instance_id
            and s.job_execution_id != parent.id
            and s.step_name == step_name
        ]
        if not earlier:
            return None
        source = max(earlier, key=_id)
        takes_over = step_takes_over(
            source.status,
            step_name=step_name,
            earlier_id=source.id,
            allow_start_if_complete=allow_start_if_complete,
        )
        return source if takes_over else None

    def get_step_execution(self, step_execution_id: int) -> StepExecution:
        return self._step(step_execution_id)

    def step_executions(self, job_execution_id: int) -> list[StepExecution]:
        pk = validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        return self._steps_of(pk)

    def transition_step_execution(
        self,
        step_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        exit_code: str | None = None,
    ) -> StepExecution:
        step = self._step(step_execution_id)
        self._check_claimant(self._execution(step.job_execution_id))
        now = self.now()
        metadata, version = fenced_transition_with_exit(
            step, expected_version, transition.stamped(now), exit_code, runtime_job=False
        )
        return self._write_step(step, metadata, version, now)

    def enrich_step_exit_status(
        self, step_execution_id: int, expected_version: int, exit_code: str
    ) -> StepExecution:
        step = self._step(step_execution_id)
        self._check_claimant(self._execution(step.job_execution_id))
        metadata, version = fenced_enrich(step, expected_version, exit_code)
        return self._write_step(step, metadata, version, self.now())

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
    ) -> StepExecution:
        limits = self._repository.state_limits
        stored = {
            kind: StoredState.checked(envelope, kind=kind, limits=limits)
            for kind, envelope in (
                (EnvelopeKind.CHECKPOINT, checkpoint),
                (EnvelopeKind.CONTEXT, context),
            )
            if envelope is not None
        }
        step = self._step(step_execution_id)
        self._check_claimant(self._execution(step.job_execution_id))
        now = self.now()
        metadata, version = fenced_finishing_chunk(
            step,
            expected_version,
            counts,
            None if finish is None else finish.stamped(now),
            exit_code,
        )
        if stored:
            states = self._open().step_states
            kept = states.get(step.id, StepStored())
            states[step.id] = StepStored(
                stored.get(EnvelopeKind.CHECKPOINT, kept.checkpoint),
                stored.get(EnvelopeKind.CONTEXT, kept.context),
            )
        return self._write_step(step, metadata, version, now)

    def _write_step(
        self, step: StepExecution, metadata: ExecutionMetadata, version: int, now: datetime
    ) -> StepExecution:
        changed = dataclasses.replace(step.with_state(metadata, version, now), last_activity_at=now)
        self._open().steps[changed.id] = changed
        return changed


def _id(row: Any) -> int:
    return int(row.id)


if TYPE_CHECKING:
    # mypy proves the fake satisfies the Protocols the services are typed against.
    def _operator_work(uow: FakeUnitOfWork) -> OperatorWork:
        return uow

    def _retention_work(uow: FakeUnitOfWork) -> RetentionWork:
        return uow

    def _steps(uow: FakeUnitOfWork) -> Steps:
        return uow
