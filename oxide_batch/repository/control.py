"""Stop requests, ownership evidence, control observation and recovery evidence
in the Django adapter (contract §2.5.1, §2.5.2, §2.5.4).

Operator actions (a stop request, a claim) are not activity: they never move
``last_activity_at`` nor the version, so a running runtime's next CAS is not
disturbed. Only the owner's control observation counts as activity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Subquery

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain import events
from oxide_batch.domain.errors import InvalidState, JobExecutionNotFound
from oxide_batch.domain.evidence import (
    CheckpointEvidence,
    ExecutionControl,
    ExecutionView,
    LatestStep,
    RecoveryEvidence,
    StopResult,
    claimed_by_another,
    observation_stops,
    owner_claim_needs_write,
    same_token,
    stop_request_applies,
    unresolved_lost_write,
    validate_owner_token,
)
from oxide_batch.domain.execution import own_activity
from oxide_batch.domain.lifecycle import LifecycleTransition, compare_and_transition
from oxide_batch.domain.names import IdentifierKind, OperatorStringKind, validate_operator_string
from oxide_batch.domain.recovery import fenced_hint
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.facts import newest_step_write, owner_recorded_of
from oxide_batch.repository.records import (
    CONTROL_COLUMNS,
    JOB_EXECUTION_COLUMNS,
    STEP_EXECUTION_COLUMNS,
    WORKER_COLUMNS,
    Row,
    execution_columns,
    job_execution_from_row,
)
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
#: The execution's columns a recovery writes from (``recover_job_execution``).
RECOVERY_EXECUTION_COLUMNS = (*JOB_EXECUTION_COLUMNS, "failed_at", "stopping_at")
EVIDENCE_COLUMNS = (
    "id",
    "status",
    "attempt",
    "version",
    "failure_category",
    "owner_token",
    "updated_at",
    "last_activity_at",
    "last_observed_at",
    "stop_requested_at",
    "lost_write",
    "lost_write_resolution",
    "lease_ttl",
    *WORKER_COLUMNS,
)


def claimant_name(using: str) -> Subquery:
    """The username of the execution's claimant (``owner_user_id``: an id, not
    a foreign key — the row outlives the account; a gone account reads NULL)."""
    user_model = get_user_model()
    return Subquery(
        user_model.objects.using(using)
        .filter(pk=OuterRef("owner_user_id"))
        .values(user_model.USERNAME_FIELD)[:1]
    )


def recorded_token(row: Row) -> bytes | None:
    value = row["owner_token"]
    return None if value is None else bytes(value)


def execution_view_from_row(row: Row) -> ExecutionView:
    """A ``CONTROL_COLUMNS`` row as an ``ExecutionView`` (the token stays behind);
    with ``newest_step_write_at`` (:func:`oxide_batch.facts.newest_step_write`) when annotated."""
    return ExecutionView(
        execution=job_execution_from_row(row),
        stop_requested_at=row["stop_requested_at"],
        stop_requested_by=row["stop_requested_by"],
        owner_recorded=owner_recorded_of(row),
        last_observed_at=row["last_observed_at"],
        last_activity_at=row["last_activity_at"],
        newest_step_write_at=row.get("newest_step_write_at"),
        lease_ttl=row.get("lease_ttl"),
        worker=WorkerIdentity.from_row(row),
    )


def _evidence_query(using: str) -> Any:
    """One statement: the execution's evidence columns plus its latest step,
    newest step write, a COMPLETED partition and a flow decision as subqueries
    (every lookup uses an index led by the execution or step id)."""
    steps = models.StepExecution.objects.using(using).filter(job_execution_id=OuterRef("pk"))
    latest = steps.order_by("-id")

    def latest_column(column: str) -> Subquery:
        return Subquery(latest.values(column)[:1])

    return (
        models.JobExecution.objects.using(using)
        .annotate(
            latest_step_id=latest_column("id"),
            latest_step_name=latest_column("step_name"),
            latest_step_status=latest_column("status"),
            latest_step_version=latest_column("version"),
            latest_step_checkpoint=latest_column("checkpoint"),
            latest_step_checksum=latest_column("checkpoint_checksum"),
            newest_step_write_at=newest_step_write(using),
            owner_name=claimant_name(using),
            completed_partition=Exists(
                models.StepPartition.objects.using(using).filter(
                    step_execution__job_execution_id=OuterRef("pk"),
                    status=BatchStatus.COMPLETED.value,
                )
            ),
            committed_flow_decision=Exists(
                models.FlowDecision.objects.using(using).filter(job_execution_id=OuterRef("pk"))
            ),
        )
        .values(
            *EVIDENCE_COLUMNS,
            "latest_step_id",
            "latest_step_name",
            "latest_step_status",
            "latest_step_version",
            "latest_step_checkpoint",
            "latest_step_checksum",
            "newest_step_write_at",
            "completed_partition",
            "committed_flow_decision",
            "owner_name",
        )
    )


def evidence_from_row(row: Row) -> RecoveryEvidence:
    latest = None
    if row["latest_step_id"] is not None:
        checkpoint = None
        if row["latest_step_checkpoint"] is not None:
            checkpoint = CheckpointEvidence.from_stored(
                row["latest_step_checkpoint"], row["latest_step_checksum"]
            )
        latest = LatestStep(
            id=row["latest_step_id"],
            status=BatchStatus(row["latest_step_status"]),
            version=row["latest_step_version"],
            checkpoint=checkpoint,
            step_name=row["latest_step_name"],
        )
    category = row["failure_category"]
    return RecoveryEvidence(
        job_execution_id=row["id"],
        status=BatchStatus(row["status"]),
        attempt=row["attempt"],
        version=row["version"],
        owner_recorded=owner_recorded_of(row),
        failure_category=None if category is None else FailureCategory(category),
        # NULL only for rows written outside the adapter (the migration filled
        # the column from updated_at, the adapter sets it on every write).
        last_activity_at=own_activity(row["last_activity_at"], row["updated_at"]),
        last_observed_at=row["last_observed_at"],
        stop_requested_at=row["stop_requested_at"],
        newest_step_write_at=row["newest_step_write_at"],
        latest_step=latest,
        completed_partition=bool(row["completed_partition"]),
        committed_flow_decision=bool(row["committed_flow_decision"]),
        # Resolved by an operator: no longer a marker (contract §2.5.14).
        lost_write=unresolved_lost_write(row["lost_write"], row["lost_write_resolution"]),
        lease_ttl=row["lease_ttl"],
        owner=WorkerIdentity.from_row(row),
        owner_user=row["owner_name"],
    )


class ControlOperations(UnitOfWorkBase):
    """Operator stop requests, runtime ownership evidence and recovery evidence."""

    def _lock_control_row(self, pk: int) -> dict[str, Any]:
        row = self._lock_execution(pk, CONTROL_COLUMNS)
        if row is None:
            raise JobExecutionNotFound(id=pk)
        return row

    @operation
    def request_execution_stop(
        self, job_execution_id: int, expected_version: int, actor: str
    ) -> StopResult:
        """Record a durable stop request (who: ``actor``, when: the repository clock).

        Locks the execution row (``FOR NO KEY UPDATE``). STOPPING or finished →
        a no-op (``changed=False``): no version check, nothing written. UNKNOWN →
        ``InvalidState``. STARTING/STARTED → ``StaleVersion`` on a version
        mismatch, else writes ``stop_requested_at``/``stop_requested_by`` only —
        status, version, ``updated_at`` and ``last_activity_at`` stay; a second
        request overwrites who/when. Also ``JobExecutionNotFound`` and, for a bad
        actor, the operator-string errors (before any query).
        """
        validate_operator_string(actor, OperatorStringKind.ACTOR)
        pk = self._id(JOB_EXECUTION, job_execution_id)
        row = self._lock_control_row(pk)
        view = execution_view_from_row(row)
        who = events.Actor("operator")
        if not stop_request_applies(view.execution, expected_version):
            self._record(events.StopRequested(execution=view.execution, changed=False, actor=who))
            return StopResult(view, changed=False)
        now = self.now()
        self._update(
            models.JobExecution, pk, {"stop_requested_at": now, "stop_requested_by": actor}
        )
        row.update(stop_requested_at=now, stop_requested_by=actor)
        view = execution_view_from_row(row)
        self._record(events.StopRequested(execution=view.execution, changed=True, actor=who))
        return StopResult(view, changed=True)

    @operation
    def claim_execution_owner(
        self,
        job_execution_id: int,
        expected_version: int,
        owner_token: bytes,
        *,
        worker: WorkerIdentity | None = None,
    ) -> ExecutionView:
        """Record the runtime's 16-byte owner token, and the runtime user of this
        unit of work as the claimant (contract §2.5.2: from then on only that user's
        runtime writes are accepted; the owner holds a lease while it is active).

        Locks the execution row. Raises, in order: ``ExecutionOwned`` when another
        runtime user claimed it; ``StaleVersion``; ``ExecutionOwnershipNotAllowed``
        unless STARTING; ``ExecutionOwned`` when another token is recorded. The
        same token again is idempotent (nothing written). The version is checked,
        not bumped; a claim is not activity. A token that is not 16 bytes →
        ``InvalidCharacters`` (before any query). ``worker`` (decision 310) is
        recorded by the claim's own write; an idempotent repeat keeps the first.
        """
        token = validate_owner_token(owner_token)
        pk = self._id(JOB_EXECUTION, job_execution_id)
        row = self._lock_control_row(pk)
        self._check_claimant(pk, row["owner_user_id"])
        execution = job_execution_from_row(row)
        changed = owner_claim_needs_write(execution, expected_version, recorded_token(row), token)
        if changed:
            # The claimant user too: only its writes are accepted from now on (contract §2.5.2).
            # The TTL granted is recorded with the claim, in the same write: the
            # lease is one fact for every process (contract §2.5.3).
            written = {
                "owner_token": token,
                "owner_user_id": self._runtime_user_id,
                "lease_ttl": batch_settings.LEASE_TTL,
                # Who the owner is (decision 310): the same write, no other statement.
                **(worker or WorkerIdentity()).columns(),
            }
            self._update(models.JobExecution, pk, written)
            row.update(written)
        view = execution_view_from_row(row)
        self._record(
            events.ExecutionClaimed(execution=view.execution, changed=changed, actor=self._actor)
        )
        return view

    @operation
    def observe_execution_control(
        self, job_execution_id: int, owner_token: bytes
    ) -> ExecutionControl:
        """The runtime's poll: does it own the execution, is a stop pending?

        Locks the execution row and writes once. ``owner_matches``: the recorded
        token equals ``owner_token`` (none recorded → false) and the claimant is
        this unit of work's runtime user (when both are known); ``stop_requested``:
        a stop request is recorded (never cleared here). When both hold on a
        STARTING/STARTED execution it moves to STOPPING in the same write
        (version + 1). Every observation records ``last_observed_at``; only the
        owner's also moves ``last_activity_at`` (renewing its lease). Another
        runtime user's observation of a claimed execution writes nothing
        (contract §2.5.2: only the claimant writes). The owner of an execution a
        recovery resolved is fenced (contract §2.5.6): its observation writes
        nothing and is refused as its writes are, ``InvalidState``. Raises
        ``JobExecutionNotFound``, and ``InvalidCharacters`` for a token that is
        not 16 bytes.
        """
        token = validate_owner_token(owner_token)
        pk = self._id(JOB_EXECUTION, job_execution_id)
        row = self._lock_control_row(pk)
        execution = job_execution_from_row(row)
        other_user = claimed_by_another(row["owner_user_id"], self._runtime_user_id)
        owner_matches = same_token(recorded_token(row), token) and not other_user
        if other_user:
            # Another user's poll of a claimed execution: told it is not the owner,
            # and it changes nothing — not even the evidence an operator recovers on.
            view = execution_view_from_row(row)
            control = ExecutionControl(view, False, row["stop_requested_at"] is not None)
            self._record(self._observed_fact(control))
            return control
        if owner_matches and execution.recovery_decision_id is not None:
            raise InvalidState(
                id=pk, status=execution.status, hint=fenced_hint(execution.recovery_decision_id)
            )
        stop_requested = row["stop_requested_at"] is not None
        now = self.now()
        written: dict[str, Any] = {"last_observed_at": now}
        if owner_matches:
            written["last_activity_at"] = now
        stops = observation_stops(
            execution.status, owner_matches=owner_matches, stop_requested=stop_requested
        )
        if stops:
            metadata, version = compare_and_transition(
                execution.metadata,
                execution.version,
                execution.version,
                LifecycleTransition(BatchStatus.STOPPING, at=now),
            )
            written.update(execution_columns(row, metadata, version, now))
        self._update(models.JobExecution, pk, written)
        row.update(written)
        control = ExecutionControl(execution_view_from_row(row), owner_matches, stop_requested)
        if stops:
            self._record(
                events.ExecutionTransitioned(
                    execution=control.execution.execution, prior=execution.status, actor=self._actor
                )
            )
        self._record(self._observed_fact(control))
        return control

    def _observed_fact(self, control: ExecutionControl) -> events.ControlObserved:
        return events.ControlObserved(
            execution=control.execution.execution,
            owner_matches=control.owner_matches,
            stop_requested=control.stop_requested,
            actor=self._actor,
        )

    @operation
    def recovery_evidence(self, job_execution_id: int, *, lock: bool = False) -> RecoveryEvidence:
        """The durable evidence a recovery proposal is made of (a read).

        One statement; with ``lock=True`` the execution row and then its step
        rows (in id order) are first locked ``FOR NO KEY UPDATE`` (three
        statements) and kept for ``recover_job_execution``, so the evidence read
        afterwards sees every commit that
        preceded the locks and neither the execution nor its steps (chunk
        commits, step transitions) can move until this unit of work ends — what
        an audited recovery needs between recomputing the proposal and
        ``recover_job_execution``. Raises ``JobExecutionNotFound``.
        """
        pk = self._id(JOB_EXECUTION, job_execution_id)
        if lock:
            # The rows as locked are kept for the recovery that follows in this
            # unit of work (``recover_job_execution``): it locks neither again.
            execution = self._lock_row(models.JobExecution, pk, RECOVERY_EXECUTION_COLUMNS)
            if execution is None:
                raise JobExecutionNotFound(id=pk)
            steps = list(
                models.StepExecution.objects.using(self._using)
                .select_for_update(no_key=True)
                .filter(job_execution_id=pk)
                .order_by("id")
                .values(*STEP_EXECUTION_COLUMNS)
            )
            self._recovery_locked[pk] = (self._operations, execution, steps)
        row = _evidence_query(self._using).filter(pk=pk).first()
        if row is None:
            raise JobExecutionNotFound(id=pk)
        return evidence_from_row(row)

    @operation
    def recovery_evidence_many(
        self, job_execution_ids: Sequence[int]
    ) -> dict[int, RecoveryEvidence]:
        """The evidence of many executions in one statement (a read, no lock),
        keyed by id in ascending id order; an id without a row is left out.

        Each value equals ``recovery_evidence(id)`` read at the same moment — the
        same query, filtered by ``id IN (…)`` instead of ``id = …`` — so a
        proposal and its digest do not depend on how the evidence was read.
        Raises ``ZeroIdentifier`` / ``IdentifierOutOfRange`` for a bad id
        (before any query); no query at all for an empty list.
        """
        pks = sorted({self._id(JOB_EXECUTION, value) for value in job_execution_ids})
        if not pks:
            return {}
        rows = _evidence_query(self._using).filter(pk__in=pks).order_by("pk")
        return {row["id"]: evidence_from_row(row) for row in rows}
