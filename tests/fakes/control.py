"""Stops, ownership, evidence and recovery in the fake (the port's ``Control``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from oxide_batch.domain.errors import InvalidState
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
    validate_owner_token,
)
from oxide_batch.domain.lifecycle import LifecycleTransition, compare_and_transition
from oxide_batch.domain.lost_write import LostWriteResolution, ResolvedLostWrite
from oxide_batch.domain.names import (
    IdentifierKind,
    OperatorStringKind,
    validate_identifier,
    validate_operator_string,
)
from oxide_batch.domain.recovery import (
    RecoveryDecision,
    RecoveryRequest,
    RecoveryResult,
    fenced_hint,
    recovered_execution,
    resolved_step,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from tests.fakes.base import UnitOfWorkBase
from tests.fakes.tables import ExecutionRow, StepStored, by_id

S = BatchStatus


class ControlOperations(UnitOfWorkBase):
    """Stops, ownership, evidence and recovery in the fake (the port's ``Control``)."""

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

    def resolve_lost_write(
        self, job_execution_id: int, resolution: LostWriteResolution
    ) -> ResolvedLostWrite:
        """The adapter's rule; the fake's ``lost_write`` is the unresolved marker."""
        validate_operator_string(resolution.actor, OperatorStringKind.ACTOR)
        validate_operator_string(resolution.reason_code, OperatorStringKind.REASON_CODE)
        validate_operator_string(resolution.operation_id, OperatorStringKind.OPERATION_ID)
        row = self._execution(job_execution_id)
        if not row.lost_write:
            return ResolvedLostWrite(row.execution, changed=False)
        self._put(dataclasses.replace(row, lost_write=False))
        return ResolvedLostWrite(row.execution, changed=True)

    def claim_execution_owner(
        self,
        job_execution_id: int,
        expected_version: int,
        owner_token: bytes,
        *,
        worker: WorkerIdentity | None = None,
    ) -> ExecutionView:
        token = validate_owner_token(owner_token)
        row = self._execution(job_execution_id)
        self._check_claimant(row, token=False)
        if owner_claim_needs_write(row.execution, expected_version, row.owner_token, token):
            known = worker if worker is not None and worker.known else None
            row = dataclasses.replace(
                row, owner_token=token, owner_user_id=self._runtime_user_id, worker=known
            )
            self._put(row)
        return row.view()

    def observe_execution_control(
        self, job_execution_id: int, owner_token: bytes
    ) -> ExecutionControl:
        token = validate_owner_token(owner_token)
        row = self._execution(job_execution_id)
        execution = row.execution
        other_user = claimed_by_another(row.owner_user_id, self._runtime_user_id)
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
            owner=row.worker,
            failure_category=None if failure is None else failure.category,
            last_activity_at=row.last_activity_at,
            last_observed_at=row.last_observed_at,
            stop_requested_at=row.stop_requested_at,
            newest_step_write_at=max(
                (s.last_activity_at for s in steps if s.last_activity_at), default=None
            ),
            latest_step=latest,
            completed_partition=any(
                p.partition.status is BatchStatus.COMPLETED
                and p.partition.step_execution_id in {s.id for s in steps}
                for p in self._open().partitions.values()
            ),
            committed_flow_decision=any(
                d.decision.job_execution_id == execution.id
                for d in self._open().flow_decisions.values()
            ),
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
        resolved_ids = tuple(step.id for step in resolved)
        decision = RecoveryDecision.of(
            decision_id, request, prior, recovered, decided_at=now, resolved_step_ids=resolved_ids
        )
        tables.decisions[decision_id] = decision
        tables.decision_users[decision_id] = operator_user_id
        recovered = dataclasses.replace(recovered, recovery_decision_id=decision_id)
        self._put(row.with_execution(recovered, now))  # it failed now, by the decision
        for step in resolved:
            tables.steps[step.id] = step
        return RecoveryResult(execution=recovered, decision=decision)

    def recovery_decision(self, job_execution_id: int) -> RecoveryDecision | None:
        pk = validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        found = [d for d in self._open().decisions.values() if d.job_execution_id == pk]
        return max(found, key=by_id, default=None)
