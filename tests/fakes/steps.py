"""Step executions and their state in the fake (the port's ``Steps``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from oxide_batch.domain.canonical import parse_strict
from oxide_batch.domain.errors import (
    InvalidDefinitionUpgrade,
    InvalidState,
    RestartStateNotFound,
    StepExecutionExists,
)
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    JobExecution,
    StepExecution,
)
from oxide_batch.domain.fused import (
    fenced_finishing_chunk,
    fenced_transition_with_exit,
    started_on_creation,
)
from oxide_batch.domain.launch import step_takes_over
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_identifier, validate_name
from oxide_batch.domain.recovery import fenced_enrich
from oxide_batch.domain.skips import SkipEntry, skip_counts
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope, StoredState
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository.steps import STEP_PARENT_HINT, STEP_PARENT_STATUSES, StepState
from tests.fakes.base import UnitOfWorkBase
from tests.fakes.tables import StepStored, by_id


class StepOperations(UnitOfWorkBase):
    """Step executions and their state in the fake (the port's ``Steps``)."""

    # -- Steps (the whole Protocol: ``tests.fakes`` checks it) ----------------------

    def create_step_execution(
        self,
        job_execution_id: int,
        step_name: str,
        *,
        node_id: str | None = None,
        allow_start_if_complete: bool = False,
        started: bool = False,
        worker: WorkerIdentity | None = None,
    ) -> StepExecution:
        validate_name(step_name, NameKind.STEP)
        node = validate_name(node_id if node_id is not None else step_name, NameKind.NODE)
        parent = self._step_parent(job_execution_id)
        source = self._restart_source(parent, step_name, allow_start_if_complete)
        return self._insert_step(parent, step_name, node, source, started=started, worker=worker)

    def _step_parent(self, job_execution_id: int) -> JobExecution:
        """The execution a step is created under: claimed by this unit of work's
        runtime user (or none), STARTING or STARTED."""
        row = self._execution(job_execution_id)
        parent = row.execution
        self._check_claimant(row)
        if parent.status not in STEP_PARENT_STATUSES:
            raise InvalidState(id=parent.id, status=parent.status, hint=STEP_PARENT_HINT)
        return parent

    def _insert_step(
        self,
        parent: JobExecution,
        step_name: str,
        node: str,
        source: StepExecution | None,
        *,
        started: bool,
        worker: WorkerIdentity | None = None,
    ) -> StepExecution:
        """Store a STARTING step (STARTED at version 1 when ``started``) taking over
        ``source``'s counts and state, verified first (``FaultStateCorrupt``, no row)."""
        steps = self._open().steps.values()
        if any(
            s.job_execution_id == parent.id and (s.step_name == step_name or s.node_id == node)
            for s in steps
        ):
            raise StepExecutionExists(job_execution_id=parent.id, step_name=step_name)
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
            worker=worker if worker is not None and worker.known else None,
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
        """The newest earlier row of the step — or of the step the attempt's
        upgrade edge maps onto it — that a restarted step takes over, by the
        domain's rule (the adapter's ``_restart_source`` and ``_takeover``)."""
        if parent.restart_of_id is None:
            return None
        earlier = [
            s
            for s in self._open().steps.values()
            if s.job_instance_id == parent.job_instance_id and s.job_execution_id != parent.id
        ]
        source_name = step_name
        if parent.upgrade_id is not None:
            mapping: dict[str, str] = parse_strict(
                self._open().upgrades[parent.upgrade_id].step_mapping
            )
            mapped = next((s for s, t in mapping.items() if t == step_name), None)
            if mapped is None:
                if any(s.step_name == step_name for s in earlier):
                    raise InvalidDefinitionUpgrade(execution_id=parent.id)
                return None
            source_name = mapped
        named = [s for s in earlier if s.step_name == source_name]
        if not named:
            if source_name != step_name:
                raise RestartStateNotFound(execution_id=parent.id, step_name=step_name)
            return None
        return self._takeover(step_name, max(named, key=by_id), allow_start_if_complete)

    def _takeover(
        self, step_name: str, source: StepExecution, allow_start_if_complete: bool
    ) -> StepExecution | None:
        """``source`` when the new step takes it over, ``None`` when it starts fresh
        (``step_takes_over``: a COMPLETED worker of a partition that never
        completed reruns)."""
        rerun = (
            source.status is BatchStatus.COMPLETED
            and not allow_start_if_complete
            and any(
                row.partition.worker_step_execution_id == source.id
                and row.partition.status is not BatchStatus.COMPLETED
                for row in self._open().partitions.values()
            )
        )
        takes_over = step_takes_over(
            source.status,
            step_name=step_name,
            earlier_id=source.id,
            allow_start_if_complete=allow_start_if_complete,
            partition_rerun=rerun,
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
        written = self._write_step(step, metadata, version, now)
        self._keep_failure_detail(
            step.job_instance_id, step.job_execution_id, step.id, transition, now
        )
        return written

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
        skips: Sequence[SkipEntry] = (),
    ) -> StepExecution:
        # The skip counts only: the ledger's rows are the Django adapter's (its
        # reads are selectors, not port operations).
        if skips:
            counts = counts.plus(skip_counts(skips))
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
