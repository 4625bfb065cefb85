"""Audited recovery of orphaned or ambiguous executions (seed ``RecoveryRequest``)."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from oxide_batch.domain.errors import (
    IllegalTransition,
    InvalidCharacters,
    InvalidState,
    InvalidTimestampOrder,
    InvalidTransitionTime,
    RecoveryFieldControlCharacter,
    RecoveryFieldEmpty,
    RecoveryFieldSurroundingWhitespace,
    RecoveryFieldTooLong,
    RecoveryNotAllowed,
)
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureSummary,
    JobExecution,
    StepExecution,
)
from oxide_batch.domain.lifecycle import (
    LifecycleTransition,
    compare_and_commit_chunk,
    compare_and_enrich,
    compare_and_transition,
    next_version,
    validate_expected_version,
)
from oxide_batch.domain.names import OperatorStringKind, has_surrounding_whitespace, is_control
from oxide_batch.domain.status import UNRESOLVED_STATUSES, BatchStatus, FailureCategory

EVIDENCE_DIGEST_BYTES = 32
E = TypeVar("E", JobExecution, StepExecution)


class RecoveryDisposition(enum.StrEnum):
    MARK_FAILED = "MARK_FAILED"
    ABANDON = "ABANDON"

    @property
    def resulting_status(self) -> BatchStatus:
        return (
            BatchStatus.FAILED
            if self is RecoveryDisposition.MARK_FAILED
            else (BatchStatus.ABANDONED)
        )


def _validate_text(value: str, kind: OperatorStringKind, field: str) -> str:
    """The seed's checks in its order, then the operator character set; errors
    name the request field."""
    if not value:
        raise RecoveryFieldEmpty(field=field)
    if len(value.encode("utf-8")) > kind.max_bytes:
        raise RecoveryFieldTooLong(field=field, max_bytes=kind.max_bytes)
    if has_surrounding_whitespace(value):
        raise RecoveryFieldSurroundingWhitespace(field=field)
    if any(is_control(character) for character in value):
        raise RecoveryFieldControlCharacter(field=field)
    if kind.pattern.fullmatch(value) is None:
        raise InvalidCharacters(kind=field, allowed=kind.allowed)
    return value


#: An operator's override note (contract §2.5.5): free text, UTF-8 bytes.
OVERRIDE_NOTE_MAX_BYTES = 1000


def validate_override_note(note: str) -> str:
    """The note an operator gives when recovering before the rules would
    (contract §2.5.5): 1–1000 UTF-8 bytes, no surrounding whitespace, no control
    characters (a line of text the audit shows as written)."""
    if not isinstance(note, str) or not note:
        raise RecoveryFieldEmpty(field="override_note")
    if len(note.encode("utf-8")) > OVERRIDE_NOTE_MAX_BYTES:
        raise RecoveryFieldTooLong(field="override_note", max_bytes=OVERRIDE_NOTE_MAX_BYTES)
    if has_surrounding_whitespace(note):
        raise RecoveryFieldSurroundingWhitespace(field="override_note")
    if any(is_control(character) for character in note):
        raise RecoveryFieldControlCharacter(field="override_note")
    return note


@dataclass(frozen=True, repr=False)
class RecoveryRequest:
    """A bounded, value-redacted request for one audited recovery decision.

    ``operator_reference`` is an audit correlation (the authenticated actor),
    not a credential. The evidence digest never appears in a repr.
    """

    expected_version: int
    disposition: RecoveryDisposition
    reason_code: str
    operator_reference: str
    evidence_digest: bytes
    failure: FailureSummary | None = None
    # What the execution's unfinished steps are resolved with (contract §2.5.6): the
    # execution's failure for MARK_FAILED; for ABANDON (whose execution gets no
    # new failure) STALE_RECOVERED with a server-generated id unless given.
    steps_failure: FailureSummary | None = None
    # Why the recovery was allowed (``Eligibility`` value) and the operator's
    # override note, when one was given; the decision records both.
    eligibility: str | None = None
    override_note: str | None = None
    # The evidence it was decided on, with its times (``RecoveryProposal.recorded``).
    evidence: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _validate_text(self.reason_code, OperatorStringKind.REASON_CODE, "reason_code")
        _validate_text(self.operator_reference, OperatorStringKind.ACTOR, "operator_reference")
        if self.override_note is not None:
            validate_override_note(self.override_note)
        if len(self.evidence_digest) != EVIDENCE_DIGEST_BYTES:
            raise InvalidCharacters(kind="evidence digest", allowed="exactly 32 bytes")
        if (self.disposition is RecoveryDisposition.MARK_FAILED) != (self.failure is not None):
            raise ValueError("MARK_FAILED carries exactly one failure; ABANDON carries none")
        if self.steps_failure is None:
            object.__setattr__(
                self,
                "steps_failure",
                self.failure or FailureSummary(FailureCategory.STALE_RECOVERED, new_failure_id()),
            )

    @classmethod
    def mark_failed(
        cls,
        *,
        expected_version: int,
        reason_code: str,
        operator_reference: str,
        evidence_digest: bytes,
        failure: FailureSummary,
        eligibility: str | None = None,
        override_note: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> RecoveryRequest:
        return cls(
            expected_version,
            RecoveryDisposition.MARK_FAILED,
            reason_code,
            operator_reference,
            evidence_digest,
            failure,
            eligibility=eligibility,
            override_note=override_note,
            evidence=evidence,
        )

    @classmethod
    def abandon(
        cls,
        *,
        expected_version: int,
        reason_code: str,
        operator_reference: str,
        evidence_digest: bytes,
        steps_failure: FailureSummary | None = None,
        eligibility: str | None = None,
        override_note: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> RecoveryRequest:
        return cls(
            expected_version,
            RecoveryDisposition.ABANDON,
            reason_code,
            operator_reference,
            evidence_digest,
            steps_failure=steps_failure,
            eligibility=eligibility,
            override_note=override_note,
            evidence=evidence,
        )

    def __repr__(self) -> str:
        return (
            f"RecoveryRequest(expected_version={self.expected_version}, "
            f"disposition={self.disposition.value}, reason_code={self.reason_code!r}, "
            f"operator_reference={self.operator_reference!r}, evidence_digest=<redacted>, "
            f"failure={self.failure!r})"
        )


@dataclass(frozen=True, repr=False)
class RecoveryDecision:
    """One append-only recovery audit record."""

    id: int
    job_execution_id: int
    execution_version: int
    prior_status: BatchStatus
    resulting_status: BatchStatus
    reason_code: str
    operator_reference: str
    evidence_digest: bytes
    decided_at: datetime
    # The unfinished steps resolved to FAILED with the decision, ascending.
    resolved_step_ids: tuple[int, ...] = ()
    # Why it was allowed (an ``Eligibility`` value; ``None`` for decisions
    # recorded before it was) and the operator's override note, if any.
    eligibility: str | None = None
    override_note: str | None = None
    # The evidence it was taken on, with its times (``None`` before schema 6).
    evidence: Mapping[str, Any] | None = None

    @classmethod
    def of(
        cls,
        decision_id: int,
        request: RecoveryRequest,
        prior: JobExecution,
        recovered: JobExecution,
        *,
        decided_at: datetime,
        resolved_step_ids: tuple[int, ...],
    ) -> RecoveryDecision:
        """The record of ``request`` applied to ``prior`` (which became
        ``recovered``) at ``decided_at``, resolving those steps."""
        return cls(
            id=decision_id,
            job_execution_id=prior.id,
            execution_version=prior.version,
            prior_status=prior.status,
            resulting_status=recovered.status,
            reason_code=request.reason_code,
            operator_reference=request.operator_reference,
            evidence_digest=request.evidence_digest,
            decided_at=decided_at,
            resolved_step_ids=resolved_step_ids,
            eligibility=request.eligibility,
            override_note=request.override_note,
            evidence=request.evidence,
        )

    @property
    def overridden(self) -> bool:
        """Whether an operator's override (and its note) allowed it."""
        return self.eligibility == "operator_override"

    def __repr__(self) -> str:
        return (
            f"RecoveryDecision(id={self.id}, job_execution_id={self.job_execution_id}, "
            f"execution_version={self.execution_version}, "
            f"prior_status={self.prior_status.value}, "
            f"resulting_status={self.resulting_status.value}, "
            f"reason_code={self.reason_code!r}, operator_reference={self.operator_reference!r}, "
            f"evidence_digest=<redacted>, decided_at={self.decided_at.isoformat()}, "
            f"resolved_step_ids={self.resolved_step_ids!r}, "
            f"eligibility={self.eligibility!r}, override_note={self.override_note!r})"
        )


@dataclass(frozen=True)
class RecoveryResult:
    """The recovered execution and the decision that produced it (one commit)."""

    execution: JobExecution
    decision: RecoveryDecision


#: The key of a decision's record (``RecoveryDecision.evidence``) that says
#: whether its failure id was the operator's (true) or generated (false).
FAILURE_ID_GIVEN = "failure_id_given"


def new_failure_id() -> int:
    """A server-generated failure id (contract §2.5.5): random, positive, 63 bits."""
    return secrets.randbelow(2**63 - 1) + 1


def resolved_step(
    step: StepExecution, failure: FailureSummary, decided_at: datetime
) -> StepExecution:
    """An unfinished step of a recovered execution, resolved with the decision
    (contract §2.5.6): FAILED with ``failure``, ended at the decision time, version + 1
    — through the lifecycle table (every unfinished status may become FAILED)."""
    metadata, version = compare_and_transition(
        step.metadata,
        step.version,
        step.version,
        LifecycleTransition(BatchStatus.FAILED, failure=failure, at=decided_at),
    )
    return step.with_state(metadata, version, decided_at)


def refuse_fenced(
    row: JobExecution | StepExecution, expected_version: int, target: BatchStatus | None = None
) -> None:
    """The fence of contract §2.5.6: a row a recovery resolved takes no runtime write.

    Nothing for a row no recovery resolved. Otherwise ``StaleVersion`` first
    (the old worker's version is one behind), then ``IllegalTransition`` for a
    transition to ``target`` or ``InvalidState`` for any other write. The
    ``fenced_*`` CAS helpers apply every lifecycle rule first and the fence last,
    so it only refuses what the rules alone would allow (FAILED → ABANDONED of a
    step, an exit enrichment).
    """
    if row.recovery_decision_id is None:
        return
    validate_expected_version(expected_version, row.version)
    if target is not None:
        raise IllegalTransition(from_status=row.status, to_status=target, allowed=[])
    raise InvalidState(id=row.id, status=row.status, hint=fenced_hint(row.recovery_decision_id))


def fenced_transition(
    current: E, expected_version: int, transition: LifecycleTransition, *, runtime_job: bool = True
) -> tuple[ExecutionMetadata, int]:
    """A runtime's transition CAS behind the fence (:func:`refuse_fenced`)."""
    changed = compare_and_transition(
        current.metadata, current.version, expected_version, transition, runtime_job=runtime_job
    )
    refuse_fenced(current, expected_version, transition.target)
    return changed


def fenced_enrich(
    current: E, expected_version: int, exit_code: str
) -> tuple[ExecutionMetadata, int]:
    """A runtime's exit enrichment behind the fence."""
    changed = compare_and_enrich(current.metadata, current.version, expected_version, exit_code)
    refuse_fenced(current, expected_version)
    return changed


def fenced_hint(decision_id: int) -> str:
    """What a fenced worker is told (contract §2.5.6): the decision that resolved its
    row, and that it must stop."""
    return (
        f"recovery decision {decision_id} resolved it: its worker is fenced and must stop "
        "writing (the next run of the job is a restart)"
    )


def fenced_chunk(
    current: StepExecution, expected_version: int, counts: ExecutionCounts
) -> tuple[ExecutionMetadata, int]:
    """A chunk commit behind the fence (a resolved step is FAILED: the rules
    refuse it already, ``InvalidState`` saying which decision fenced it)."""
    try:
        changed = compare_and_commit_chunk(
            current.metadata, current.version, expected_version, counts, execution_id=current.id
        )
    except InvalidState:
        if current.recovery_decision_id is None:
            raise
        raise InvalidState(
            id=current.id, status=current.status, hint=fenced_hint(current.recovery_decision_id)
        ) from None
    refuse_fenced(current, expected_version)
    return changed


def validate_recoverable(
    execution_id: int, status: BatchStatus, expected_version: int, actual_version: int
) -> None:
    """The first two refusals of a recovery, in this order (contract §2.5.5):
    ``StaleVersion`` (or ``VersionAhead``), then ``RecoveryNotAllowed`` unless
    the status is STARTING/STARTED/STOPPING/UNKNOWN. The one statement of the
    rule: the service's check (on the evidence) and the repository's recovery
    (on the locked row) both read it."""
    validate_expected_version(expected_version, actual_version)
    if status not in UNRESOLVED_STATUSES:
        raise RecoveryNotAllowed(id=execution_id, status=status)


def recovered_execution(
    prior: JobExecution, request: RecoveryRequest, decided_at: datetime
) -> JobExecution:
    """The execution after an audited recovery decision.

    Raises ``StaleVersion`` first, then ``RecoveryNotAllowed`` unless the status
    is STARTING/STARTED/STOPPING/UNKNOWN. The exit code and counts stay as they
    are; ``ended_at`` becomes the decision time; the version goes up by one. A
    failure already recorded is kept when the disposition carries none.
    """
    validate_recoverable(prior.id, prior.status, request.expected_version, prior.version)
    current = prior.metadata.timestamps
    try:
        timestamps = ExecutionTimestamps(current.created_at, current.started_at, decided_at)
    except InvalidTimestampOrder:
        raise InvalidTransitionTime() from None
    metadata = ExecutionMetadata(
        status=request.disposition.resulting_status,
        exit_code=prior.exit_code,
        timestamps=timestamps,
        counts=prior.counts,
        failure=request.failure or prior.failure,
    )
    return prior.with_state(metadata, next_version(prior.version), decided_at)
