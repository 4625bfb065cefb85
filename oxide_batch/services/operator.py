"""Audited, idempotent operator actions: stop, abandon, recover
(contract §2.5.1, §2.5.5, §2.5.8, §2.5.9).

Every action carries an operation id. A request is first looked up by
``(action, operation_id)``: the same request digest replays the recorded
outcome (nothing acts twice, a refusal replays as the same error); another
digest is ``operation_id_conflict``. Otherwise the effect and its APPLIED audit
row commit together; a refusal by a rule rolls the effect back and records a
REJECTED row in its own transaction. Not-found, conflicts of operation ids and
infrastructure failures are not audited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from oxide_batch.conf import batch_settings
from oxide_batch.domain import events
from oxide_batch.domain.errors import (
    ConcurrentModification,
    InvalidCharacters,
    InvalidState,
    JobExecutionNotFound,
    OperationIdConflict,
    OxideBatchError,
    rebuild_error,
)
from oxide_batch.domain.evidence import (
    RecoveryEvidence,
    RecoveryProposal,
    check_recovery,
    default_failure_category,
    propose_recovery,
)
from oxide_batch.domain.execution import FailureSummary, JobExecution
from oxide_batch.domain.flow import DIGEST_HEX
from oxide_batch.domain.lifecycle import ABANDONABLE, LifecycleTransition
from oxide_batch.domain.lost_write import LostWriteResolution, validate_note
from oxide_batch.domain.operator import (
    OperatorAction,
    OperatorRecord,
    OperatorRecordDraft,
    RecordOutcome,
)
from oxide_batch.domain.recovery import (
    FAILURE_ID_GIVEN,
    RecoveryDecision,
    RecoveryDisposition,
    RecoveryRequest,
    new_failure_id,
    validate_override_note,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.repository import hooks
from oxide_batch.repository.port import (
    AdminHistory,
    Control,
    Executions,
    OperatorAudit,
    Transaction,
    UnitOfWorkFactory,
)
from oxide_batch.services.audit import (
    Actor,
    Outcome,
    is_rule_refusal,
    request_digest,
    validate_operation_id,
    validate_reason_code,
)

S = BatchStatus


def history_message(request: _Request, done: _Effect, record: OperatorRecord) -> str:
    """The admin history's line of an applied operator action: what changed,
    why, and the audit rows that tell the rest (Django shows it as text)."""
    execution = done.execution
    reason = f", reason {request.reason_code}" if request.reason_code else ""
    audit = f"operator request #{record.id} ({request.operation_id})"
    if request.action is OperatorAction.RECOVER and done.decision is not None:
        decision = done.decision
        how = " with an override" if decision.overridden else ""
        return (
            f"Recovered{how}: {done.prior_status.value} → {execution.status.value}{reason}; "
            f"recovery decision #{decision.id}; {audit}"
        )
    if request.action is OperatorAction.RESOLVE_LOST_WRITE:
        if not done.changed:
            return f"Lost write: nothing to resolve{reason}; {audit}"
        return f"Lost write resolved ({execution.status.value}){reason}: {request.note}; {audit}"
    if request.action is OperatorAction.ABANDON:
        if not done.changed:
            return f"Abandon: nothing to change (already ABANDONED){reason}; {audit}"
        return f"Abandoned: {done.prior_status.value} → ABANDONED{reason}; {audit}"
    if not done.changed:
        return f"Stop request: nothing to change ({execution.status.value}); {audit}"
    return (
        f"Stop requested ({execution.status.value}: the runtime stops at its next check); {audit}"
    )


@dataclass(frozen=True)
class OperatorResult:
    """What an operator endpoint answers: ``{outcome, changed, operation_id,
    execution, record}`` (recover adds ``decision``)."""

    outcome: Outcome
    changed: bool
    operation_id: str
    # ``None`` only in a replay after the execution was purged.
    execution: JobExecution | None
    record: OperatorRecord
    decision: RecoveryDecision | None = None


@dataclass(frozen=True)
class _Effect:
    execution: JobExecution
    changed: bool
    prior_status: BatchStatus
    decision: RecoveryDecision | None = None


@dataclass(frozen=True)
class _Request:
    action: OperatorAction
    execution_id: int
    # None for a request that compares no version (a lost write's resolution).
    expected_version: int | None
    operation_id: str
    actor: Actor
    digest: str
    reason_code: str | None = None
    note: str | None = None


class OperatorWork(Transaction, Executions, Control, OperatorAudit, AdminHistory, Protocol):
    """What the operator actions use of the repository port: executions, their
    control and recovery, the operator audit and the admin history, in one
    transaction (the Django adapter's unit of work, or the tests' in-memory fake)."""


class OperatorService:
    """Stop, abandon and recover executions on behalf of an authenticated actor.
    Built by :func:`oxide_batch.services.bootstrap.operator_service`."""

    def __init__(
        self,
        repository: UnitOfWorkFactory[OperatorWork],
        *,
        stale_after: timedelta | None = None,
        lease_ttl: timedelta | None = None,
    ) -> None:
        self.repository = repository
        self.stale_after: timedelta = stale_after or batch_settings.RECOVERY_STALE_AFTER
        self.lease_ttl: timedelta = lease_ttl or batch_settings.LEASE_TTL

    def _propose(self, evidence: RecoveryEvidence, now: datetime) -> RecoveryProposal:
        return propose_recovery(
            evidence, now=now, stale_after=self.stale_after, lease_ttl=self.lease_ttl
        )

    # -- reads ------------------------------------------------------------------------

    def propose(self, execution_id: int) -> RecoveryProposal:
        """The recovery proposal of an execution: evidence, markers, eligibility
        (with the reason code when not eligible) and the evidence digest. A
        proposal for an ineligible execution is still a proposal."""
        with self.repository.begin() as uow:
            evidence = uow.recovery_evidence(execution_id)
            proposal = self._propose(evidence, uow.now())
        hooks.report(events.RecoveryProposed(proposal=proposal))
        return proposal

    def propose_many(self, execution_ids: Sequence[int]) -> dict[int, RecoveryProposal]:
        """The proposals of many executions, keyed by id in ascending id order,
        from one read of their evidence at one clock instant (a bounded number of
        statements, whatever the count). Each equals ``propose(id)`` at that
        instant; an id without an execution is left out (``propose`` raises
        ``JobExecutionNotFound`` for it)."""
        with self.repository.begin() as uow:
            evidences = uow.recovery_evidence_many(execution_ids)
            now = uow.now()
        proposals = {pk: self._propose(evidence, now) for pk, evidence in evidences.items()}
        for proposal in proposals.values():
            hooks.report(events.RecoveryProposed(proposal=proposal))
        return proposals

    # -- actions ----------------------------------------------------------------------

    def stop(
        self, execution_id: int, *, expected_version: int, actor: Actor, operation_id: str
    ) -> OperatorResult:
        """Record a durable stop request (STARTING/STARTED), a no-op when already
        STOPPING or finished, ``invalid_state`` on UNKNOWN."""
        request = self._request(
            OperatorAction.STOP, execution_id, expected_version, actor, operation_id
        )

        def effect(uow: OperatorWork) -> _Effect:
            stopped = uow.request_execution_stop(execution_id, expected_version, actor.reference)
            execution = stopped.execution.execution
            return _Effect(execution, stopped.changed, execution.status)

        return self._execute(request, effect)

    def abandon(
        self,
        execution_id: int,
        *,
        expected_version: int,
        reason_code: str,
        actor: Actor,
        operation_id: str,
    ) -> OperatorResult:
        """STOPPED or FAILED (:data:`ABANDONABLE`) → ABANDONED (the instance never
        runs again); already ABANDONED → no-op without a version check; anything
        else → ``invalid_state``."""
        request = self._request(
            OperatorAction.ABANDON,
            execution_id,
            expected_version,
            actor,
            operation_id,
            reason_code=validate_reason_code(reason_code),
        )

        def effect(uow: OperatorWork) -> _Effect:
            current = uow.get_job_execution(execution_id)
            if current.status is S.ABANDONED:
                return _Effect(current, False, current.status)
            if current.status not in ABANDONABLE:
                raise InvalidState(id=execution_id, status=current.status)
            abandoned = uow.transition_job_execution(
                execution_id, expected_version, LifecycleTransition(S.ABANDONED), by_operator=True
            )
            return _Effect(abandoned, True, current.status)

        return self._execute(request, effect)

    def recover(
        self,
        execution_id: int,
        *,
        expected_version: int,
        disposition: RecoveryDisposition,
        reason_code: str,
        evidence_digest: str,
        actor: Actor,
        operation_id: str,
        failure_category: FailureCategory | None = None,
        failure_id: int | None = None,
        override_note: str | None = None,
    ) -> OperatorResult:
        """Recompute the proposal under the execution lock and resolve it.

        Check order (contract §2.5.5): ``stale_version``, ``recovery_not_allowed``,
        ``execution_not_stale`` (skipped with ``override_note``: the operator's
        statement that the worker is gone, contract §2.5.5), ``recovery_evidence_stale``,
        ``unresolved_recovery_required``. MARK_FAILED's failure defaults to
        ``UNKNOWN_COMMIT`` when the unknown-commit marker is set, else
        ``STALE_RECOVERED``, with a server-generated failure id. The decision
        records why it was allowed and the override's note.
        """
        if DIGEST_HEX.fullmatch(evidence_digest) is None:
            raise InvalidCharacters(kind="evidence_digest", allowed="64 lowercase hex characters")
        if override_note is not None:
            validate_override_note(override_note)
        arguments: dict[str, Any] = {
            "disposition": disposition.value,
            "evidence_digest": evidence_digest,
            "failure_category": failure_category.value if failure_category else None,
            "failure_id": failure_id,
        }
        if override_note is not None:
            # Only when given: earlier requests' digests stay what they were.
            arguments["override_note"] = override_note
        request = self._request(
            OperatorAction.RECOVER,
            execution_id,
            expected_version,
            actor,
            operation_id,
            reason_code=validate_reason_code(reason_code),
            arguments=arguments,
        )

        def effect(uow: OperatorWork) -> _Effect:
            evidence = uow.recovery_evidence(execution_id, lock=True)
            proposal = self._propose(evidence, uow.now())
            eligibility = check_recovery(
                proposal,
                expected_version=expected_version,
                evidence_digest_hex=evidence_digest,
                disposition=disposition,
                reason_code=reason_code,
                override=override_note is not None,
            )
            # The execution's failure (MARK_FAILED), which its unfinished steps
            # carry too; ABANDON's steps carry the default category (contract §2.5.6:
            # the category is MARK_FAILED's only) and the execution keeps its own.
            default = default_failure_category(proposal)
            failure = FailureSummary(
                (failure_category or default)
                if disposition is RecoveryDisposition.MARK_FAILED
                else default,
                failure_id or new_failure_id(),
            )
            # Whether the failure id is the operator's (a key of their logs)
            # or the server's (no log holds it): the console says which.
            recorded = {**proposal.recorded(), FAILURE_ID_GIVEN: failure_id is not None}
            if disposition is RecoveryDisposition.MARK_FAILED:
                recovery = RecoveryRequest.mark_failed(
                    expected_version=expected_version,
                    reason_code=reason_code,
                    operator_reference=actor.reference,
                    evidence_digest=bytes.fromhex(evidence_digest),
                    failure=failure,
                    eligibility=eligibility.value,
                    override_note=override_note,
                    evidence=recorded,
                )
            else:
                recovery = RecoveryRequest.abandon(
                    expected_version=expected_version,
                    reason_code=reason_code,
                    operator_reference=actor.reference,
                    evidence_digest=bytes.fromhex(evidence_digest),
                    steps_failure=failure,
                    eligibility=eligibility.value,
                    override_note=override_note,
                    evidence=recorded,
                )
            result = uow.recover_job_execution(
                execution_id, recovery, operator_user_id=actor.user_id
            )
            return _Effect(result.execution, True, evidence.status, result.decision)

        return self._execute(request, effect)

    def resolve_lost_write(
        self, execution_id: int, *, reason_code: str, note: str, actor: Actor, operation_id: str
    ) -> OperatorResult:
        """An operator's decision on the execution's lost-write marker (contract
        §2.5.14): whatever its status, the marker stops refusing the instance's
        launch or restart and counting as an unknown commit. No version is
        compared; no unresolved marker → ``changed`` false."""
        request = replace(
            self._request(
                OperatorAction.RESOLVE_LOST_WRITE,
                execution_id,
                None,
                actor,
                operation_id,
                reason_code=validate_reason_code(reason_code),
                arguments={"note": validate_note(note)},
            ),
            note=note,
        )
        resolution = LostWriteResolution(actor.reference, reason_code, note, request.operation_id)

        def effect(uow: OperatorWork) -> _Effect:
            done = uow.resolve_lost_write(execution_id, resolution)
            return _Effect(done.execution, done.changed, done.execution.status)

        return self._execute(request, effect)

    # -- the audited, idempotent frame --------------------------------------------

    @staticmethod
    def _request(
        action: OperatorAction,
        execution_id: int,
        expected_version: int | None,
        actor: Actor,
        operation_id: str,
        *,
        reason_code: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> _Request:
        digest = request_digest(
            action=action.value,
            target=f"execution:{execution_id}",
            expected_version=expected_version,
            reason_code=reason_code,
            arguments=arguments,
        )
        return _Request(
            action,
            execution_id,
            expected_version,
            validate_operation_id(operation_id),
            actor,
            digest,
            reason_code,
        )

    def _execute(
        self, request: _Request, effect: Callable[[OperatorWork], _Effect]
    ) -> OperatorResult:
        replayed = self._replay(request)
        if replayed is not None:
            return replayed
        try:
            with self.repository.begin() as uow:
                done = effect(uow)
                record = uow.append_operator_request(self._draft(request, done))
                if record is None:
                    # A concurrent identical request won: ours rolls back and replays.
                    uow.rollback()
                else:
                    uow.record_admin_history(
                        actor=request.actor.reference,
                        user_id=request.actor.user_id,
                        target="jobexecution",
                        object_id=request.execution_id,
                        message=history_message(request, done, record),
                    )
                    uow.commit()
                    return OperatorResult(
                        Outcome.APPLIED,
                        done.changed,
                        request.operation_id,
                        done.execution,
                        record,
                        done.decision,
                    )
        except OxideBatchError as error:
            if not is_rule_refusal(error):
                raise
            # A concurrent identical request may have won (its effect is why ours
            # was refused): then ours is a replay of it, not a refusal.
            replayed = self._replay(request)
            if replayed is not None:
                return replayed
            if self._reject(request, error):
                raise
        replayed = self._replay(request)
        if replayed is None:
            raise ConcurrentModification()
        return replayed

    def _replay(self, request: _Request) -> OperatorResult | None:
        with self.repository.begin() as uow:
            record = uow.find_operator_request(request.action, request.operation_id)
            if record is None:
                return None
            if record.request_digest != request.digest:
                raise OperationIdConflict(
                    action=request.action.value, operation_id=request.operation_id
                )
            hooks.report(events.OperatorRequestReplayed(record=record))
            if record.outcome is RecordOutcome.REJECTED:
                assert record.rejection_code is not None
                error = rebuild_error(record.rejection_code, record.rejection_details or {})
                error.replayed = True  # type: ignore[attr-defined]
                raise error
            # The audit row outlives what it describes: after a purge the replay
            # still answers the recorded outcome, without the execution.
            try:
                execution: JobExecution | None = uow.get_job_execution(request.execution_id)
            except JobExecutionNotFound:
                execution = None
            decision = (
                uow.recovery_decision(request.execution_id)
                if execution is not None and request.action is OperatorAction.RECOVER
                else None
            )
        return OperatorResult(
            Outcome.REPLAYED, record.changed, request.operation_id, execution, record, decision
        )

    def _reject(self, request: _Request, error: OxideBatchError) -> bool:
        """Record a refusal in its own transaction; ``False`` when another request
        with the operation id was recorded first (the caller replays it)."""
        draft = replace(
            self._draft(request, None),
            outcome=RecordOutcome.REJECTED,
            rejection_code=error.code,
            rejection_details=error.details(),
        )
        with self.repository.begin() as uow:
            if uow.append_operator_request(draft) is None:
                return False
            uow.commit()
        return True

    @staticmethod
    def _draft(request: _Request, done: _Effect | None) -> OperatorRecordDraft:
        return OperatorRecordDraft(
            action=request.action,
            operation_id=request.operation_id,
            actor=request.actor.reference,
            actor_user_id=request.actor.user_id,
            request_digest=request.digest,
            outcome=RecordOutcome.APPLIED,
            job_instance_id=done.execution.job_instance_id if done else None,
            job_execution_id=request.execution_id,
            reason_code=request.reason_code,
            observed_version=request.expected_version,
            prior_status=done.prior_status if done else None,
            result_status=done.execution.status if done else None,
            changed=done.changed if done else False,
        )
