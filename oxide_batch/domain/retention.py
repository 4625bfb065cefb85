"""Retention values: holds, audit records, purge criteria, plans and their digest.

A purge works on whole instances (contract §2.5.11). The survey produces a
:class:`PurgePlan`; apply takes it back whole, recomputes its digest and
re-checks every candidate with :func:`stale_candidates` under lock, so a
forged or edited plan can never purge what a survey would not have offered.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol

from oxide_batch.domain.canonical import canonical_bytes, sha256_hex
from oxide_batch.domain.errors import DomainError
from oxide_batch.domain.instants import RFC3339_INSTANT
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_identifier, validate_name
from oxide_batch.domain.operator import RecordOutcome
from oxide_batch.domain.status import BatchStatus

PLAN_DIGEST_VERSION = "oxide-batch.retention-plan.v1"
MAX_BATCH_BOUND = 1000
DEFAULT_PURGE_STATUSES = frozenset(
    {BatchStatus.STOPPED, BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.ABANDONED}
)
# The digest and every rendering list statuses in this fixed order.
STATUS_ORDER = (
    BatchStatus.STOPPED,
    BatchStatus.FAILED,
    BatchStatus.COMPLETED,
    BatchStatus.ABANDONED,
)
PURGE_KINDS = (
    "flow_decisions",
    "step_partitions",
    "step_executions",
    "job_executions",
    "job_instances",
)
DEFAULT_PURGE_REASON = "SCHEDULED_PURGE"


# --------------------------------------------------------------------------- errors


class InvalidPurgeRequest(DomainError):
    """A purge request or plan that is not well formed (the API's ``invalid_request``)."""


@dataclass(eq=False)
class BatchBoundOutOfRange(InvalidPurgeRequest):
    code: ClassVar[str] = "batch_bound_out_of_range"
    bound: int

    @property
    def message(self) -> str:
        return f"the batch bound must be 1 to {MAX_BATCH_BOUND}, not {self.bound}"


@dataclass(eq=False)
class EmptyStatusSet(InvalidPurgeRequest):
    code: ClassVar[str] = "empty_status_set"

    @property
    def message(self) -> str:
        return "a purge needs at least one status"


@dataclass(eq=False)
class NonTerminalStatus(InvalidPurgeRequest):
    code: ClassVar[str] = "non_terminal_status"
    status: str

    @property
    def message(self) -> str:
        return f"status {self.status} cannot be purged: choose among " + ", ".join(
            status.value for status in STATUS_ORDER
        )


@dataclass(eq=False)
class AgeBoundTooSmall(InvalidPurgeRequest):
    """The cutoff is younger than ``OXIDE_BATCH_PURGE_MIN_AGE`` (or than the audit minimum)."""

    code: ClassVar[str] = "age_bound_too_small"
    minimum_seconds: int

    @property
    def message(self) -> str:
        return f"the cutoff must be at least {self.minimum_seconds}s in the past"


@dataclass(eq=False)
class MalformedPurgePlan(InvalidPurgeRequest):
    code: ClassVar[str] = "malformed_purge_plan"
    reason: str

    @property
    def message(self) -> str:
        return f"malformed purge plan: {self.reason}"


# --------------------------------------------------------------------- audit values


class RetentionAction(enum.StrEnum):
    HOLD = "HOLD"
    RELEASE_HOLD = "RELEASE_HOLD"
    APPLY_PURGE = "APPLY_PURGE"


class AuditedActor(Protocol):
    """Who acts (``services.audit.Actor`` fits): an actor reference and a user id."""

    @property
    def reference(self) -> str: ...

    @property
    def user_id(self) -> int | None: ...


@dataclass(frozen=True)
class RetentionHold:
    """The single hold of an instance: it only blocks purge, never lifecycle actions."""

    job_instance_id: int
    actor: str
    reason_code: str
    placed_at: datetime
    actor_user_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job_instance_id": self.job_instance_id,
            "actor": self.actor,
            "reason_code": self.reason_code,
            "placed_at": format_instant(self.placed_at),
        }


@dataclass(frozen=True)
class PurgeCounts:
    """Rows per kind, in deletion order (child before parent)."""

    flow_decisions: int = 0
    step_partitions: int = 0
    step_executions: int = 0
    job_executions: int = 0
    job_instances: int = 0

    def plus(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(*(getattr(self, kind) + getattr(other, kind) for kind in PURGE_KINDS))

    @property
    def total(self) -> int:
        return sum(getattr(self, kind) for kind in PURGE_KINDS)

    def as_dict(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in PURGE_KINDS}


@dataclass(frozen=True)
class RetentionRecordDraft:
    """What a retention action appends, in the transaction of its effect."""

    action: RetentionAction
    operation_id: str
    actor: str
    reason_code: str
    request_digest: str
    changed: bool
    actor_user_id: int | None = None
    job_instance_id: int | None = None
    plan_digest: str | None = None
    batch_bound: int | None = None
    counts: PurgeCounts = PurgeCounts()
    # A refusal by a rule: REJECTED with the problem's code and fields.
    outcome: RecordOutcome = RecordOutcome.APPLIED
    rejection_code: str | None = None
    rejection_details: dict[str, Any] | None = None


@dataclass(frozen=True)
class RetentionRecord(RetentionRecordDraft):
    """An appended retention audit row."""

    id: int = field(kw_only=True)
    applied_at: datetime = field(kw_only=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action.value,
            "operation_id": self.operation_id,
            "actor": self.actor,
            "reason_code": self.reason_code,
            "request_digest": self.request_digest,
            "job_instance_id": self.job_instance_id,
            "plan_digest": self.plan_digest,
            "batch_bound": self.batch_bound,
            "counts": self.counts.as_dict(),
            "changed": self.changed,
            "outcome": self.outcome.value,
            "rejection_code": self.rejection_code,
            "rejection_details": self.rejection_details,
            "applied_at": format_instant(self.applied_at),
        }


# ------------------------------------------------------------------ purge criteria


def format_instant(instant: datetime) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-01-01T00:00:00.000Z``."""
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_instant(text: str, name: str = "cutoff") -> datetime:
    """An RFC 3339 instant with an offset (:data:`RFC3339_INSTANT`), else
    ``MalformedPurgePlan`` — control characters, junk before or after it, a
    missing offset and impossible dates included."""
    if RFC3339_INSTANT.fullmatch(text) is None:
        raise MalformedPurgePlan(reason=f"{name} is not an RFC 3339 instant with an offset")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise MalformedPurgePlan(reason=f"{name} is not a valid instant") from None


def _millis(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise MalformedPurgePlan(reason="the cutoff must carry a time zone")
    utc = instant.astimezone(UTC)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000)


def purge_statuses(statuses: Iterable[BatchStatus | str] | None) -> frozenset[BatchStatus]:
    """The chosen statuses: a non-empty subset of the finished ones (default: all four)."""
    if statuses is None:
        return DEFAULT_PURGE_STATUSES
    chosen: set[BatchStatus] = set()
    for status in statuses:
        try:
            value = BatchStatus(status)
        except ValueError:
            raise NonTerminalStatus(status=str(status)) from None
        if not value.is_finished:
            raise NonTerminalStatus(status=value.value)
        chosen.add(value)
    if not chosen:
        raise EmptyStatusSet()
    return frozenset(chosen)


@dataclass(frozen=True)
class PurgeCriteria:
    """Which instances a survey offers: finished before ``cutoff``, of ``job_name``
    (any job when ``None``), every execution in ``statuses``; at most ``bound``."""

    cutoff: datetime
    job_name: str | None = None
    statuses: frozenset[BatchStatus] = DEFAULT_PURGE_STATUSES
    bound: int = MAX_BATCH_BOUND

    def __post_init__(self) -> None:
        object.__setattr__(self, "cutoff", _millis(self.cutoff))
        object.__setattr__(self, "statuses", purge_statuses(self.statuses))
        if self.job_name is not None:
            validate_name(self.job_name, NameKind.JOB)
        if isinstance(self.bound, bool) or not isinstance(self.bound, int):
            raise MalformedPurgePlan(reason="the batch bound must be an integer")
        if not 1 <= self.bound <= MAX_BATCH_BOUND:
            raise BatchBoundOutOfRange(bound=self.bound)

    @property
    def ordered_statuses(self) -> list[str]:
        return [status.value for status in STATUS_ORDER if status in self.statuses]

    def to_json(self) -> dict[str, Any]:
        """``{cutoff, job_name, statuses, bound}`` (as a survey answers them)."""
        return {
            "cutoff": format_instant(self.cutoff),
            "job_name": self.job_name,
            "statuses": self.ordered_statuses,
            "bound": self.bound,
        }

    def check_age(self, now: datetime, min_age: timedelta) -> None:
        """``AgeBoundTooSmall`` unless the cutoff is at least ``min_age`` before ``now``."""
        if self.cutoff > now - min_age:
            raise AgeBoundTooSmall(minimum_seconds=int(min_age.total_seconds()))


# ------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class ObservedExecution:
    """An execution of a candidate, with the version the survey observed."""

    id: int
    version: int


@dataclass(frozen=True)
class PurgeCandidate:
    """A whole instance and every one of its executions (id order)."""

    instance_id: int
    executions: tuple[ObservedExecution, ...]

    def __post_init__(self) -> None:
        validate_identifier(IdentifierKind.JOB_INSTANCE, self.instance_id)
        if not self.executions:
            raise MalformedPurgePlan(reason=f"candidate {self.instance_id} has no executions")
        for execution in self.executions:
            validate_identifier(IdentifierKind.JOB_EXECUTION, execution.id)
            if isinstance(execution.version, bool) or execution.version < 0:
                raise MalformedPurgePlan(reason="an execution version is negative")

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "executions": [{"id": e.id, "version": e.version} for e in self.executions],
        }


@dataclass(frozen=True)
class PurgePlan:
    """One surveyed batch. ``counts`` and ``held_excluded`` inform; the digest
    covers the criteria and every candidate's executions with their versions."""

    criteria: PurgeCriteria
    candidates: tuple[PurgeCandidate, ...]
    counts: PurgeCounts
    held_excluded: int
    plan_digest: str = field(default="")

    def __post_init__(self) -> None:
        if len(self.candidates) > self.criteria.bound:
            raise MalformedPurgePlan(reason="more candidates than the batch bound")
        if len({candidate.instance_id for candidate in self.candidates}) != len(self.candidates):
            raise MalformedPurgePlan(reason="an instance is listed twice")
        if not self.plan_digest:
            object.__setattr__(self, "plan_digest", self.computed_digest())

    @property
    def instance_ids(self) -> list[int]:
        return [candidate.instance_id for candidate in self.candidates]

    def computed_digest(self) -> str:
        """SHA-256 of the canonical JSON of criteria and candidates (never the counts)."""
        document = {
            "v": PLAN_DIGEST_VERSION,
            **self.criteria.to_json(),
            "candidates": [
                [c.instance_id, [[e.id, e.version] for e in c.executions]] for c in self.candidates
            ],
        }
        return sha256_hex(canonical_bytes(document))

    def to_json(self) -> dict[str, Any]:
        """The contract §2.5.11 survey shape."""
        return {
            **self.criteria.to_json(),
            "candidates": [candidate.to_json() for candidate in self.candidates],
            "counts": self.counts.as_dict(),
            "held_excluded": self.held_excluded,
            "plan_digest": self.plan_digest,
        }

    @classmethod
    def from_json(cls, document: Any) -> PurgePlan:
        """A plan handed back whole (API, files). Shape errors are
        ``MalformedPurgePlan``; the digest is kept as given, so apply can tell
        an edited plan (``retention_plan_stale``)."""
        try:
            cutoff = parse_instant(_field(document, "cutoff", str))
            criteria = PurgeCriteria(
                cutoff=cutoff,
                job_name=_field(document, "job_name", (str, type(None))),
                statuses=purge_statuses(_field(document, "statuses", list)),
                bound=_field(document, "bound", int),
            )
            candidates = tuple(
                PurgeCandidate(
                    _field(item, "instance_id", int),
                    tuple(
                        ObservedExecution(_field(e, "id", int), _field(e, "version", int))
                        for e in _field(item, "executions", list)
                    ),
                )
                for item in _field(document, "candidates", list)
            )
            counts = _field(document, "counts", dict)
            return cls(
                criteria=criteria,
                candidates=candidates,
                counts=PurgeCounts(**{kind: _field(counts, kind, int) for kind in PURGE_KINDS}),
                held_excluded=_field(document, "held_excluded", int),
                plan_digest=_digest(_field(document, "plan_digest", str)),
            )
        except DomainError:
            raise
        except (TypeError, ValueError) as error:
            raise MalformedPurgePlan(reason=str(error)) from None


def _field(document: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(document, Mapping) or name not in document:
        raise MalformedPurgePlan(reason=f"missing {name}")
    value = document[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MalformedPurgePlan(reason=f"{name} has the wrong type")
    return value


def _digest(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise MalformedPurgePlan(reason="plan_digest is not 64 lowercase hex characters")
    return value


# --------------------------------------------------------------- re-check at apply


@dataclass(frozen=True)
class InstanceState:
    """What apply reads under lock about one candidate instance: its job, whether
    it is held, and each execution as (id, version, status, ended before the cutoff)."""

    job_name: str
    held: bool
    executions: Sequence[tuple[int, int, BatchStatus, bool]]


def stale_candidates(plan: PurgePlan, observed: Mapping[int, InstanceState]) -> list[int]:
    """The candidates that are no longer eligible exactly as planned: gone, held,
    of another job, another execution set or version, a status outside the
    chosen set (which excludes active and UNKNOWN), or not ended before the cutoff."""
    criteria = plan.criteria
    stale = []
    for candidate in plan.candidates:
        state = observed.get(candidate.instance_id)
        planned = {(e.id, e.version) for e in candidate.executions}
        if (
            state is None
            or state.held
            or (criteria.job_name is not None and state.job_name != criteria.job_name)
            or {(id_, version) for id_, version, _, _ in state.executions} != planned
            or not all(
                status in criteria.statuses and ended for _, _, status, ended in state.executions
            )
        ):
            stale.append(candidate.instance_id)
    return stale
