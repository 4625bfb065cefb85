"""Step executions in the Django adapter."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.canonical import parse_strict
from oxide_batch.domain.errors import (
    FaultStateCorrupt,
    InvalidDefinitionUpgrade,
    InvalidState,
    JobExecutionNotFound,
    RestartStateNotFound,
    StepExecutionExists,
    StepExecutionNotFound,
)
from oxide_batch.domain.execution import (
    COUNT_FIELDS,
    ExecutionCounts,
    ExecutionMetadata,
    StepExecution,
)
from oxide_batch.domain.fused import (
    fenced_finishing_chunk,
    fenced_transition_with_exit,
    started_on_creation,
)
from oxide_batch.domain.launch import step_takes_over
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_new_name
from oxide_batch.domain.recovery import fenced_enrich
from oxide_batch.domain.state import (
    EnvelopeKind,
    StateEnvelope,
    StoredState,
    StoredStateCorrupt,
    load_stored,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository.failure_details import detail_to_keep
from oxide_batch.repository.plans import hold_to_declared_start_limit
from oxide_batch.repository.records import (
    STEP_EXECUTION_COLUMNS,
    metadata_columns,
    step_execution_from_row,
)
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

STATE_COLUMNS = ("checkpoint", "checkpoint_checksum", "context", "context_checksum")
TAKEOVER_COLUMNS = (*(f"{name}_count" for name in COUNT_FIELDS), *STATE_COLUMNS)
JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
STEP_PARENT_STATUSES = frozenset({BatchStatus.STARTING, BatchStatus.STARTED})
STEP_PARENT_HINT = "steps are created while the job execution is STARTING or STARTED"


@dataclass(frozen=True)
class StepState:
    """A step with its durable state (payloads only for the checkpoint reader)."""

    step: StepExecution
    checkpoint: StateEnvelope | None
    context: StateEnvelope | None


def _load(row: dict[str, Any], column: str, kind: EnvelopeKind) -> StateEnvelope | None:
    """The verified envelope of ``column`` (``None`` when unset); ``FaultStateCorrupt``
    when it does not verify or only one of text and checksum is stored."""
    text, checksum = row[column], row[f"{column}_checksum"]
    if text is None and checksum is None:
        return None
    if text is None or checksum is None:
        raise FaultStateCorrupt()
    try:
        return load_stored(text, checksum, kind=kind)
    except StoredStateCorrupt:
        raise FaultStateCorrupt() from None


def verified_takeover(source: dict[str, Any]) -> dict[str, Any]:
    """The state columns a restarted step copies from ``source``, after verifying
    both envelopes (contract §2.3.2: taking over state verifies it — ``FaultStateCorrupt``
    otherwise). CPU only: the row is already read."""
    _load(source, "checkpoint", EnvelopeKind.CHECKPOINT)
    _load(source, "context", EnvelopeKind.CONTEXT)
    return {column: source[column] for column in STATE_COLUMNS}


class StepOperations(UnitOfWorkBase):
    """Creation, lifecycle CAS and reads of step executions."""

    @operation
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
        """A STARTING step (version 0) under a STARTING or STARTED job execution;
        with ``started`` (contract §4.2) it is inserted STARTED instead — the table's
        STARTING → STARTED applied before the insert: ``started_at`` set,
        version 1, where create and start leave it, in one row write. What it
        took over is kept for the answer (:meth:`created_step_state`).

        Locks the job execution (``FOR NO KEY UPDATE``: it is not changed, but
        its status must not move underneath). Raises ``ExecutionOwned`` when
        another runtime user claimed it, ``InvalidState`` for any other parent
        status and ``StepExecutionExists`` for a repeated name or node.
        ``node_id`` defaults to the step name. A node the execution's flow plan
        declares a ``start_limit`` for is held to it (``StartLimitExceeded``).

        In a restart attempt the step takes over counts, checkpoint and context
        of the newest row of the same step — or of the step the attempt's upgrade
        edge maps onto it — across all earlier attempts, when that row is
        restartable; it starts fresh when there is none. The earlier row's status
        decides (:func:`~oxide_batch.domain.launch.step_takes_over`): COMPLETED →
        ``NotRestartable`` unless ``allow_start_if_complete`` (then fresh) or it
        was the worker of a partition that never completed (fresh); ABANDONED or
        UNKNOWN → ``NotRestartable``. With an edge in use: a step that has earlier
        state but no mapping → ``InvalidDefinitionUpgrade``; a mapped source step
        without a row → ``RestartStateNotFound``. A checkpoint or context to take
        over that does not verify → ``FaultStateCorrupt`` and no step is created.
        ``worker`` (decision 310: who runs it, a partition worker's step above
        all) is written by the step's insert.
        """
        validate_new_name(step_name, NameKind.STEP)
        node = validate_new_name(node_id if node_id is not None else step_name, NameKind.NODE)
        parent_id = self._id(JOB_EXECUTION, job_execution_id)
        parent = self._lock_step_parent(parent_id)
        hold_to_declared_start_limit(self._using, parent, node)
        source = None
        if parent["restart_of_id"] is not None:
            source = self._restart_source(parent_id, parent, step_name)
            source = self._takeover(step_name, source, allow_start_if_complete)
        return self._insert_step(
            parent_id, parent, step_name, node, source, started=started, worker=worker
        )

    def _lock_step_parent(self, parent_id: int) -> dict[str, Any]:
        """Lock the job execution a step is created under: its claimant must be
        this unit of work's runtime user (or none), its status STARTING/STARTED.
        Read with its definition's manifest, for the plan's node attributes."""
        parent = (
            models.JobExecution.objects.using(self._using)
            .select_for_update(no_key=True, of=("self",))
            .filter(pk=parent_id)
            .values(
                "job_instance_id",
                "status",
                "restart_of_id",
                "owner_user_id",
                "owner_token",
                "stop_requested_at",
                "recovery_decision_id",
                "upgrade__step_mapping",
                "definition__manifest_format",
                "definition__manifest",
            )
            .first()
        )
        if parent is None:
            raise JobExecutionNotFound(id=parent_id)
        self._claimed_by(parent_id, parent)
        status = BatchStatus(parent["status"])
        if status not in STEP_PARENT_STATUSES:
            raise InvalidState(id=parent_id, status=status, hint=STEP_PARENT_HINT)
        return dict(parent)

    def _takeover(
        self, step_name: str, source: dict[str, Any] | None, allow_start_if_complete: bool
    ) -> dict[str, Any] | None:
        """``source`` when the new step takes it over, ``None`` when it starts
        fresh; ``NotRestartable`` when the earlier row's status refuses it
        (:func:`~oxide_batch.domain.launch.step_takes_over`). The partition check
        (a COMPLETED worker of a partition that never completed) is one more
        read, made only for a COMPLETED row."""
        if source is None:
            return None
        status = BatchStatus(source["status"])
        rerun = (
            status is BatchStatus.COMPLETED
            and not allow_start_if_complete
            and models.StepPartition.objects.using(self._using)
            .filter(worker_step_execution_id=source["id"])
            .exclude(status=BatchStatus.COMPLETED.value)
            .exists()
        )
        takes_over = step_takes_over(
            status,
            step_name=step_name,
            earlier_id=source["id"],
            allow_start_if_complete=allow_start_if_complete,
            partition_rerun=rerun,
        )
        return source if takes_over else None

    def _restart_source(
        self, execution_id: int, parent: dict[str, Any], step_name: str
    ) -> dict[str, Any] | None:
        """The earlier step row whose state a restarted step may take over (its
        status decides: :meth:`_takeover`)."""
        earlier = (
            models.StepExecution.objects.using(self._using)
            .filter(job_instance_id=parent["job_instance_id"])
            .exclude(job_execution_id=execution_id)
            .order_by("-id")
        )
        source_name = step_name
        if parent["upgrade__step_mapping"] is not None:
            mapping: dict[str, str] = parse_strict(parent["upgrade__step_mapping"])
            mapped = next((s for s, t in mapping.items() if t == step_name), None)
            if mapped is None:
                if earlier.filter(step_name=step_name).exists():
                    raise InvalidDefinitionUpgrade(execution_id=execution_id)
                return None
            source_name = mapped
        # Locked (a step row of an earlier execution, after this one's: the
        # global order), so a late chunk commit of the earlier attempt cannot
        # land between this read and the takeover. Same one statement.
        row: dict[str, Any] | None = (
            earlier.filter(step_name=source_name)
            .select_for_update(no_key=True)
            .values("id", "status", *TAKEOVER_COLUMNS)
            .first()
        )
        if row is None and source_name != step_name:
            raise RestartStateNotFound(execution_id=execution_id, step_name=step_name)
        return row

    def _insert_step(
        self,
        parent_id: int,
        parent: dict[str, Any],
        step_name: str,
        node: str,
        source: dict[str, Any] | None,
        *,
        started: bool = False,
        worker: WorkerIdentity | None = None,
        owned: Mapping[str, Any] | None = None,
    ) -> StepExecution:
        """Insert a STARTING step (STARTED at version 1 when ``started``),
        taking over ``source``'s counts and state. ``owned``: a claimed
        partition worker's own columns (issue 43: its token, lease TTL, partition).

        ``source``'s checkpoint and context are verified before anything is
        written: one that does not verify → ``FaultStateCorrupt``, no row.
        """
        now = self.now()
        metadata = ExecutionMetadata.starting(now)
        state: dict[str, Any] = {}
        checkpoint = context = None
        if source is not None:
            state = verified_takeover(source)
            checkpoint = _load(source, "checkpoint", EnvelopeKind.CHECKPOINT)
            context = _load(source, "context", EnvelopeKind.CONTEXT)
            counts = ExecutionCounts(*(source[f"{name}_count"] for name in COUNT_FIELDS))
            metadata = dataclasses.replace(metadata, counts=counts)
        version = 0
        if started:
            metadata, version = started_on_creation(metadata, now)
        new_id = self._insert_unless_conflict(
            models.StepExecution,
            {
                "job_instance": parent["job_instance_id"],
                "job_execution": parent_id,
                "step_name": step_name,
                "node_id": node,
                **metadata_columns(metadata, version, now),
                "last_activity_at": now,
                **state,
                **(worker.columns() if worker is not None else {}),
                **(owned or {}),
            },
        )
        if new_id is None:
            raise StepExecutionExists(job_execution_id=parent_id, step_name=step_name)
        step = StepExecution(
            id=new_id,
            metadata=metadata,
            version=version,
            updated_at=now,
            job_instance_id=parent["job_instance_id"],
            job_execution_id=parent_id,
            step_name=step_name,
            node_id=node,
            last_activity_at=now,
            worker=worker if worker is not None and worker.known else None,
        )
        self._created_steps[new_id] = StepState(step, checkpoint, context)
        self._record(events.StepCreated(step=step, actor=self._actor))
        if started:
            self._record(
                events.StepTransitioned(step=step, prior=BatchStatus.STARTING, actor=self._actor)
            )
        return step

    def created_step_state(self, step_execution_id: int) -> StepState | None:
        """A step this unit of work created, with the checkpoint and context it
        took over (verified; ``None`` each when it started fresh) — what the
        answer to a step create carries, no query added."""
        return self._created_steps.get(step_execution_id)

    @operation
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
        """One chunk's durable progress, as one CAS on a STARTED step.

        ``finish`` (contract §4.2) ends the step with this chunk: after the chunk's
        rules, the step moves to ``finish.target`` by the lifecycle table and
        stores ``exit_code`` when given — the same one write, version + 1. A
        refusal (any of them) writes nothing: the step stays STARTED.

        ``counts`` are the chunk's deltas, added under the lock (the result
        carries the totals); ``checkpoint`` and ``context``, when given, replace
        the stored envelopes (checked against the repository's limits). One
        locking read and one write: BEGIN, SELECT … FOR NO KEY UPDATE, UPDATE,
        COMMIT. ``StaleVersion`` first, then ``InvalidState``, ``CountExhausted``.
        """
        pk = self._id(STEP_EXECUTION, step_execution_id)
        extra: dict[str, Any] = {}
        for column, envelope, kind in (
            ("checkpoint", checkpoint, EnvelopeKind.CHECKPOINT),
            ("context", context, EnvelopeKind.CONTEXT),
        ):
            if envelope is not None:
                # Checked against this repository's limits whoever built it.
                stored = StoredState.checked(envelope, kind=kind, limits=self._state_limits)
                extra[column], extra[f"{column}_checksum"] = stored.text, stored.checksum
        return self._compare_and_swap(
            models.StepExecution,
            pk,
            STEP_EXECUTION_COLUMNS,
            step_execution_from_row,
            lambda missing: StepExecutionNotFound(id=missing),
            lambda current, now: fenced_finishing_chunk(
                current,
                expected_version,
                counts,
                None if finish is None else finish.stamped(now),
                exit_code,
            ),
            extra,
            facts=self._chunk_facts,
            activity=True,
        )

    def _chunk_facts(self, prior: StepExecution, step: StepExecution) -> list[events.Event]:
        """The chunk, at the version the row ends at; a finishing chunk also
        the step's end (contract §4.2)."""
        facts: list[events.Event] = [
            events.ChunkCommitted(step=step, version=step.version, actor=self._actor)
        ]
        if step.status is not prior.status:
            facts.append(events.StepTransitioned(step=step, prior=prior.status, actor=self._actor))
        return facts

    @operation
    def step_state(self, step_execution_id: int) -> StepState:
        """The step with its latest checkpoint and context, checksums verified.

        A stored envelope that does not verify → ``FaultStateCorrupt`` (fail
        closed: never guess).
        """
        pk = self._id(STEP_EXECUTION, step_execution_id)
        row = self._read_row(models.StepExecution, pk, (*STEP_EXECUTION_COLUMNS, *STATE_COLUMNS))
        if row is None:
            raise StepExecutionNotFound(id=pk)
        return StepState(
            step=step_execution_from_row(row),
            checkpoint=_load(row, "checkpoint", EnvelopeKind.CHECKPOINT),
            context=_load(row, "context", EnvelopeKind.CONTEXT),
        )

    @operation
    def get_step_execution(self, step_execution_id: int) -> StepExecution:
        pk = self._id(STEP_EXECUTION, step_execution_id)
        row = self._read_row(models.StepExecution, pk, STEP_EXECUTION_COLUMNS)
        if row is None:
            raise StepExecutionNotFound(id=pk)
        return step_execution_from_row(row)

    @operation
    def step_executions(self, job_execution_id: int) -> list[StepExecution]:
        """The job execution's steps in creation order."""
        pk = self._id(JOB_EXECUTION, job_execution_id)
        rows = (
            models.StepExecution.objects.using(self._using)
            .filter(job_execution_id=pk)
            .order_by("id")
            .values(*STEP_EXECUTION_COLUMNS)
        )
        return [step_execution_from_row(row) for row in rows]

    @operation
    def transition_step_execution(
        self,
        step_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        exit_code: str | None = None,
    ) -> StepExecution:
        """CAS transition of a step; steps follow the full lifecycle table.
        ``exit_code`` is stored by the same write (version + 1, contract §4.2)."""
        return self._compare_and_swap(
            models.StepExecution,
            self._id(STEP_EXECUTION, step_execution_id),
            STEP_EXECUTION_COLUMNS,
            step_execution_from_row,
            lambda pk: StepExecutionNotFound(id=pk),
            lambda current, now: fenced_transition_with_exit(
                current, expected_version, transition.stamped(now), exit_code, runtime_job=False
            ),
            facts=lambda prior, step: (
                events.StepTransitioned(step=step, prior=prior.status, actor=self._actor),
            ),
            activity=True,
            # Read only for a failure that carries a detail: a transition
            # without one never reaches the detail's module (the hot path).
            failure_detail=detail_to_keep(transition.failure) if transition.sends_detail else None,
        )

    @operation
    def enrich_step_exit_status(
        self, step_execution_id: int, expected_version: int, exit_code: str
    ) -> StepExecution:
        """CAS exit-code enrichment of a step; the status never changes."""
        return self._compare_and_swap(
            models.StepExecution,
            self._id(STEP_EXECUTION, step_execution_id),
            STEP_EXECUTION_COLUMNS,
            step_execution_from_row,
            lambda pk: StepExecutionNotFound(id=pk),
            lambda current, now: fenced_enrich(current, expected_version, exit_code),
            facts=lambda _, step: (events.StepExitCodeRecorded(step=step, actor=self._actor),),
            activity=True,
        )
