"""What the API returns, as typed, immutable values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from oxide_batch.client.wire import parse_instant
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.flow import FlowTarget, FlowTransitionKind, TerminalKind
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope, StateLimits
from oxide_batch.domain.status import BatchStatus, FailureCategory

_READ_LIMITS = StateLimits(1024 * 1024, 64)


def _instant(value: Any) -> datetime:
    parsed = parse_instant(value)
    assert parsed is not None
    return parsed


def _counts(document: Mapping[str, Any]) -> ExecutionCounts:
    return ExecutionCounts(
        **{name: int(value) for name, value in document.items() if name not in _SKIP_MEMBERS}
    )


_SKIP_MEMBERS = frozenset({"read_skip", "process_skip", "write_skip"})


@dataclass(frozen=True)
class SkipCounts:
    """A step's skipped items by phase (``counts.read_skip`` … of an answer; 0
    from a server older than the skip ledger). The server derives them from the
    skips sent with the chunk commits."""

    read: int = 0
    process: int = 0
    write: int = 0

    @property
    def total(self) -> int:
        return self.read + self.process + self.write

    @classmethod
    def from_counts(cls, document: Mapping[str, Any]) -> SkipCounts:
        return cls(
            int(document.get("read_skip", 0)),
            int(document.get("process_skip", 0)),
            int(document.get("write_skip", 0)),
        )


def _failure(document: Mapping[str, Any] | None) -> FailureSummary | None:
    if document is None:
        return None
    return FailureSummary(FailureCategory(document["category"]), int(document["failure_id"]))


def _envelope(document: Any, kind: EnvelopeKind) -> StateEnvelope | None:
    if document is None:
        return None
    return StateEnvelope.from_json(document, kind=kind, limits=_READ_LIMITS)


@dataclass(frozen=True)
class Definition:
    job_name: str
    revision: str
    format: int
    digest: str
    registered_at: datetime

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Definition:
        return cls(
            document["job_name"],
            document["revision"],
            int(document["format"]),
            document["digest"],
            _instant(document["registered_at"]),
        )


@dataclass(frozen=True)
class Instance:
    id: int
    job_name: str
    key_digest: str
    parameters: tuple[Mapping[str, Any], ...]
    created_at: datetime
    hold: Mapping[str, Any] | None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Instance:
        return cls(
            int(document["id"]),
            document["job_name"],
            document["key_digest"],
            tuple(document["parameters"]),
            _instant(document["created_at"]),
            document["hold"],
        )


@dataclass(frozen=True)
class WriteControl:
    """The execution's control state a runtime write carrying the owner token
    answers with (contract §4.2): a stop is requested, the token is the
    recorded owner's, the row is fenced (finished, UNKNOWN or recovered). It is
    the chunk boundary's observation of control; the write moves nothing."""

    stop_requested: bool
    owner_matches: bool
    fenced: bool

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> WriteControl | None:
        if document is None:
            return None
        return cls(
            bool(document["stop_requested"]),
            bool(document["owner_matches"]),
            bool(document["fenced"]),
        )


@dataclass(frozen=True)
class _Run:
    """What job executions and steps share."""

    id: int
    job_instance_id: int
    status: BatchStatus
    exit_code: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    updated_at: datetime
    counts: ExecutionCounts
    failure: FailureSummary | None
    version: int
    # contract §2.5.3's activity (None from a server older than the member); keyword-only
    # with a default so values built by hand need not name it.
    last_activity_at: datetime | None = field(default=None, kw_only=True)
    # The control state of a write's answer (None from a read, or a write that
    # carried no owner token); not part of the row, so not compared.
    control: WriteControl | None = field(default=None, kw_only=True, compare=False)
    # The skip counts beside ``counts`` (issue 42).
    skip_counts: SkipCounts = field(default_factory=SkipCounts, kw_only=True)

    @staticmethod
    def _common(document: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": int(document["id"]),
            "job_instance_id": int(document["job_instance_id"]),
            "status": BatchStatus(document["status"]),
            "exit_code": document["exit_code"],
            "created_at": _instant(document["created_at"]),
            "started_at": parse_instant(document["started_at"]),
            "ended_at": parse_instant(document["ended_at"]),
            "updated_at": _instant(document["updated_at"]),
            "counts": _counts(document["counts"]),
            "skip_counts": SkipCounts.from_counts(document["counts"]),
            "failure": _failure(document["failure"]),
            "version": int(document["version"]),
            "last_activity_at": parse_instant(document.get("last_activity_at")),
            "control": WriteControl.from_json(document.get("control")),
        }


@dataclass(frozen=True)
class Lease:
    """The owner's lease of an active, claimed execution (contract §2.5.3): it expires
    ``ttl_seconds`` after the owner's latest activity, at ``expires_at``."""

    ttl_seconds: int
    expires_at: datetime

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> Lease | None:
        if document is None:
            return None
        return cls(int(document["ttl_seconds"]), _instant(document["expires_at"]))


@dataclass(frozen=True)
class Execution(_Run):
    job_name: str
    attempt: int
    stop_requested: bool
    stop_requested_at: datetime | None
    owner_recorded: bool
    last_observed_at: datetime | None
    definition: Mapping[str, Any] | None
    # None without an owner, once finished, or from a server older than leases.
    lease: Lease | None = field(default=None, kw_only=True)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Execution:
        return cls(
            **cls._common(document),
            job_name=document["job_name"],
            attempt=int(document["attempt"]),
            stop_requested=bool(document["stop_requested"]),
            stop_requested_at=parse_instant(document["stop_requested_at"]),
            owner_recorded=bool(document["owner_recorded"]),
            last_observed_at=parse_instant(document["last_observed_at"]),
            definition=document["definition"],
            lease=Lease.from_json(document.get("lease")),
        )


@dataclass(frozen=True)
class Step(_Run):
    job_execution_id: int
    step_name: str
    node_id: str

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Step:
        return cls(
            **cls._common(document),
            job_execution_id=int(document["job_execution_id"]),
            step_name=document["step_name"],
            node_id=document["node_id"],
        )


@dataclass(frozen=True)
class StepState:
    step: Step
    checkpoint: StateEnvelope | None
    context: StateEnvelope | None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> StepState:
        return cls(
            Step.from_json(document["step"]),
            _envelope(document["checkpoint"], EnvelopeKind.CHECKPOINT),
            _envelope(document["context"], EnvelopeKind.CONTEXT),
        )

    @classmethod
    def from_started_step(cls, document: Mapping[str, Any]) -> StepState:
        """A step created STARTED: the step with what it took over inline."""
        return cls(
            Step.from_json(document),
            _envelope(document.get("checkpoint"), EnvelopeKind.CHECKPOINT),
            _envelope(document.get("context"), EnvelopeKind.CONTEXT),
        )


@dataclass(frozen=True)
class Control:
    execution: Execution
    owner_matches: bool
    stop_requested: bool

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Control:
        return cls(
            Execution.from_json(document["execution"]),
            bool(document["owner_matches"]),
            bool(document["stop_requested"]),
        )


@dataclass(frozen=True)
class Partition:
    id: int
    step_execution_id: int
    key: str
    ordinal: int
    status: BatchStatus
    exit_code: str
    counts: ExecutionCounts
    version: int
    worker_step_execution_id: int | None
    context: StateEnvelope | None = None
    skip_counts: SkipCounts = field(default_factory=SkipCounts, kw_only=True)
    # How many times a claim gave it to a new worker after a failed one (remote
    # partitions, issue 43); 0 from a server older than the member.
    retries: int = field(default=0, kw_only=True)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Partition:
        worker = document["worker_step_execution_id"]
        return cls(
            int(document["id"]),
            int(document["step_execution_id"]),
            document["key"],
            int(document["ordinal"]),
            BatchStatus(document["status"]),
            document["exit_code"],
            _counts(document["counts"]),
            int(document["version"]),
            None if worker is None else int(worker),
            _envelope(document.get("context"), EnvelopeKind.PARTITION_CONTEXT),
            skip_counts=SkipCounts.from_counts(document["counts"]),
            retries=int(document.get("retries", 0)),
        )


@dataclass(frozen=True)
class FlowDecision:
    id: int
    job_execution_id: int
    sequence: int
    source_node_id: str
    source_step_execution_id: int | None
    kind: FlowTransitionKind
    observed_outcome: str
    target: FlowTarget
    plan_fingerprint: str
    input_digest: str
    reused_decision_id: int | None
    decided_at: datetime

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> FlowDecision:
        target = document["target"]
        return cls(
            int(document["id"]),
            int(document["job_execution_id"]),
            int(document["sequence"]),
            document["source_node_id"],
            document["source_step_execution_id"],
            FlowTransitionKind(document["kind"]),
            document["observed_outcome"],
            FlowTarget(
                node=target.get("node"),
                terminal=None if "terminal" not in target else TerminalKind(target["terminal"]),
            ),
            document["plan_fingerprint"],
            document["input_digest"],
            document["reused_decision_id"],
            _instant(document["decided_at"]),
        )


# ------------------------------------------------------------------------ operator


@dataclass(frozen=True)
class RecoveryProposal:
    """What an operator reads before recovering: send ``version`` and
    ``evidence_digest`` back. ``evidence`` is the digest's input as served."""

    job_execution_id: int
    status: BatchStatus
    version: int
    eligible: bool
    reason_code: str | None
    markers: Mapping[str, bool]
    inactive_seconds: int
    threshold_seconds: int
    default_failure_category: FailureCategory
    evidence_digest: str
    evidence: Mapping[str, Any]
    # Why it is eligible (unknown_status, inactive, lease_expired), the rule that
    # decides an active execution (lease, inactivity) and the owner's lease expiry.
    eligibility: str | None = None
    rule: str | None = None
    lease_expires_at: datetime | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RecoveryProposal:
        return cls(
            int(document["job_execution_id"]),
            BatchStatus(document["status"]),
            int(document["version"]),
            bool(document["eligible"]),
            document["reason_code"],
            dict(document["markers"]),
            int(document["inactive_seconds"]),
            int(document["threshold_seconds"]),
            FailureCategory(document["default_failure_category"]),
            document["evidence_digest"],
            dict(document["evidence"]),
            eligibility=document.get("eligibility"),
            rule=document.get("rule"),
            lease_expires_at=parse_instant(document.get("lease_expires_at")),
        )


@dataclass(frozen=True)
class OperatorOutcome:
    """An operator action's answer: APPLIED now or REPLAYED (``replayed``), whether
    it ``changed`` anything, the execution, its audit ``record`` (and the recovery
    ``decision``)."""

    outcome: str
    replayed: bool
    changed: bool
    operation_id: str
    # None only in a replay after the execution was purged.
    execution: Execution | None
    record: Mapping[str, Any]
    decision: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> OperatorOutcome:
        return cls(
            document["outcome"],
            bool(document["replayed"]),
            bool(document["changed"]),
            document["operation_id"],
            None if document["execution"] is None else Execution.from_json(document["execution"]),
            dict(document["record"]),
            document.get("decision"),
        )


@dataclass(frozen=True)
class HoldOutcome:
    """A hold placed or released: ``hold`` is ``None`` once released."""

    outcome: str
    replayed: bool
    changed: bool
    operation_id: str
    hold: Mapping[str, Any] | None
    record: Mapping[str, Any]

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> HoldOutcome:
        return cls(
            document["outcome"],
            bool(document["replayed"]),
            bool(document["changed"]),
            document["operation_id"],
            document["hold"],
            dict(document["record"]),
        )


@dataclass(frozen=True)
class SkippedItem:
    """One row of the skip ledger (``GET steps/{id}/skips``,
    ``GET executions/{id}/skips``): an item a step left out of a chunk.
    ``chunk``: the step's committed count after the commit that recorded it;
    ``detail``: the failure's type and message as the server kept them (a
    viewer's token reads the type only; ``None`` when none was kept)."""

    id: int
    step_execution_id: int
    step_name: str
    job_execution_id: int
    phase: str
    item: str
    chunk: int
    category: FailureCategory
    detail: FailureDetail | None
    recorded_at: datetime

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SkippedItem:
        detail = document.get("detail")
        return cls(
            int(document["id"]),
            int(document["step_execution_id"]),
            document["step_name"],
            int(document["job_execution_id"]),
            document["phase"],
            document["item"],
            int(document["chunk"]),
            FailureCategory(document["category"]),
            None if detail is None else FailureDetail(detail.get("type"), detail.get("message")),
            _instant(document["recorded_at"]),
        )


#: The phases a skip is recorded under (wire: ``skips[].phase``).
SKIP_PHASES = ("read", "process", "write")
#: Skips one chunk commit may carry at most (the server refuses more).
MAX_SKIPS_PER_COMMIT = 1000


@dataclass(frozen=True)
class Skip:
    """An item left out of a chunk, sent with the chunk's commit (one ledger row):
    its phase, its key or ordinal (1..256 UTF-8 bytes, visible characters), the
    failure's category (policy-eligible: the server refuses others) and detail
    (type and message; never a traceback)."""

    phase: str
    item: str
    category: FailureCategory
    detail: FailureDetail | None = None

    def __post_init__(self) -> None:
        if self.phase not in SKIP_PHASES:
            raise ValueError(f"a skip's phase is one of {', '.join(SKIP_PHASES)}")

    def as_json(self) -> dict[str, Any]:
        failure: dict[str, Any] = {"category": FailureCategory(self.category).value}
        if self.detail is not None:
            failure["detail"] = {
                name: value
                for name, value in (("type", self.detail.type), ("message", self.detail.message))
                if value is not None
            }
        return {"phase": self.phase, "item": self.item, "failure": failure}
