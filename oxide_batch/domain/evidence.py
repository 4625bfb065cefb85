"""Operator control and evidence-based recovery (contract §2.5).

Stop requests and ownership evidence
    An operator's stop request records who and when on a STARTING or STARTED
    execution under a version check, without changing status, version or
    activity; on STOPPING or a finished execution it is a no-op that skips the
    version check; UNKNOWN refuses it. Ownership: a 16-byte token claimed while
    STARTING, never shown (only "owner recorded"), which gives its owner a lease
    (below). The owner's control observation turns a pending stop into STOPPING.

Recovery proposal
    ``RecoveryEvidence`` is what the repository reads about one execution;
    ``propose_recovery`` adds eligibility and inactivity for a given clock
    instant, and ``check_recovery`` applies contract §2.5.5's check order when an
    operator sends a recovery back.

Owner leases (contract §2.5.3)
    A claimed execution's owner holds a lease of the lease TTL: it expires TTL
    after the owner's latest activity (its writes to the execution and its
    steps, its control observations — the activity of contract §2.5.3). Nothing stores
    it: ``lease_expires_at`` derives it from the activity already recorded. An
    owned execution whose lease expired is eligible at once
    (``Eligibility.LEASE_EXPIRED``); one without an owner keeps the inactivity
    rule of the stale threshold (``Eligibility.INACTIVE``). An operator who
    knows the worker is gone may recover earlier with an override and a note
    (``Eligibility.OPERATOR_OVERRIDE``).

Evidence digest (``RecoveryEvidence.digest``)
    Lowercase hex SHA-256 of ``canonical_bytes`` (compact JSON, keys sorted by
    bytes, UTF-8) of this object::

        {"v": "oxide-batch.recovery-evidence.v1",
         "job_execution_id": <int>, "status": "<durable status code>",
         "attempt": <int>, "version": <int>, "owner_recorded": <bool>,
         "last_activity_at": <instant>, "last_observed_at": <instant|null>,
         "newest_step_write_at": <instant|null>, "stop_requested_at": <instant|null>,
         "latest_step": null | {"id": <int>, "status": "<code>", "version": <int>,
             "checkpoint": null | {"schema": <str|null>, "schema_version": <int|null>,
                                   "size": <int>, "intact": <bool>}},
         "markers": {"unknown_commit": <bool>, "completed_partition": <bool>,
                     "committed_flow_decision": <bool>}}

    An instant is RFC 3339 UTC with milliseconds (``2026-01-01T00:00:00.000Z``).
    ``size`` is the stored checkpoint's UTF-8 byte length; ``intact`` is false
    (schema fields null) when the stored checkpoint does not verify. The clock
    instant of the proposal and the inactivity derived from it are excluded, so
    re-proposing unchanged evidence later gives the same digest; any durable
    change (a chunk commit, a step transition, a stop request, an observation,
    a version bump) changes it. This module imports no Django.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from oxide_batch.domain.canonical import canonical_bytes, sha256_hex
from oxide_batch.domain.errors import (
    ExecutionAlreadyActive,
    ExecutionNotStale,
    ExecutionOwned,
    ExecutionOwnershipNotAllowed,
    InvalidCharacters,
    InvalidState,
    RecoveryEvidenceStale,
    RecoveryNotAllowed,
    UnresolvedRecoveryRequired,
)
from oxide_batch.domain.execution import JobExecution, own_activity
from oxide_batch.domain.lifecycle import validate_expected_version
from oxide_batch.domain.names import OWNER_TOKEN_BYTES
from oxide_batch.domain.recovery import RecoveryDisposition, validate_recoverable
from oxide_batch.domain.state import EnvelopeKind, StoredStateCorrupt, load_stored
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity, describe_worker, worker_data

S = BatchStatus
EVIDENCE_DIGEST_VERSION = "oxide-batch.recovery-evidence.v1"
UNKNOWN_EFFECT = "UNKNOWN_EFFECT"
MIN_STALE_AFTER = timedelta(minutes=1)
MAX_STALE_AFTER = timedelta(hours=24)
DEFAULT_STALE_AFTER = timedelta(minutes=15)
MIN_LEASE_TTL = timedelta(seconds=5)
MAX_LEASE_TTL = timedelta(hours=24)
DEFAULT_LEASE_TTL = timedelta(seconds=60)
# A stop request records who/when only here; STOPPING and finished are no-ops.
STOP_RECORDABLE = frozenset({S.STARTING, S.STARTED})
STOP_NO_OP = frozenset({S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.ABANDONED})
CONTROL_STOPPABLE = frozenset({S.STARTING, S.STARTED})
STALE_CHECKED = frozenset({S.STARTING, S.STARTED, S.STOPPING})


def validate_stale_after(threshold: timedelta) -> timedelta:
    """The stale threshold must be 1 min – 24 h (``ValueError`` otherwise)."""
    if not MIN_STALE_AFTER <= threshold <= MAX_STALE_AFTER:
        raise ValueError("the recovery stale threshold must be between 1 minute and 24 hours")
    return threshold


def validate_lease_ttl(ttl: timedelta) -> timedelta:
    """The owner lease's TTL must be 5 s – 24 h (``ValueError`` otherwise)."""
    if not MIN_LEASE_TTL <= ttl <= MAX_LEASE_TTL:
        raise ValueError("the owner lease TTL must be between 5 seconds and 24 hours")
    return ttl


class Eligibility(enum.StrEnum):
    """Why a recovery proposal is eligible (the decision records it)."""

    UNKNOWN_STATUS = "unknown_status"  # UNKNOWN: always, an operator decides its effect
    INACTIVE = "inactive"  # no owner recorded, inactive longer than the stale threshold
    LEASE_EXPIRED = "lease_expired"  # the owner's lease expired
    OPERATOR_OVERRIDE = "operator_override"  # an operator said the worker is gone (a note)


def lease_expiry(
    status: BatchStatus, owner_recorded: bool, activity_at: datetime, ttl: timedelta
) -> datetime | None:
    """When the owner's lease of an active execution expires: TTL after its
    latest activity; ``None`` when no owner is recorded or the execution is not
    active (a finished or UNKNOWN execution holds no lease)."""
    if not owner_recorded or status not in STALE_CHECKED:
        return None
    return activity_at + ttl


def granted_ttl(recorded: timedelta | None, default: timedelta) -> timedelta:
    """contract §2.5.3: the lease TTL a claim was granted is the one every process
    uses for that execution, whatever its own ``OXIDE_BATCH_LEASE_TTL`` says;
    ``default`` only for a claim recorded before the grant was kept."""
    return default if recorded is None else recorded


# -------------------------------------------------------------- the lost-write marker


def unresolved_lost_write(
    marker: Mapping[str, Any] | None, resolution: Mapping[str, Any] | None
) -> bool:
    """Whether a stored marker waits for an operator."""
    return marker is not None and resolution is None


def lost_write_view(
    marker: Mapping[str, Any] | None, resolution: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The marker as the API and the commands show it: ``None``, or
    ``{expected_version, stored_version, recorded_at, resolved_at}`` (``resolved_at``
    null until an operator resolved it)."""
    if marker is None:
        return None
    return {
        "expected_version": marker.get("expected_version"),
        "stored_version": marker.get("stored_version"),
        "recorded_at": marker.get("detected_at"),
        "resolved_at": None if resolution is None else resolution.get("resolved_at"),
    }


def validate_owner_token(token: bytes) -> bytes:
    """An owner token is exactly 16 bytes (``InvalidCharacters`` otherwise)."""
    if not isinstance(token, bytes) or len(token) != OWNER_TOKEN_BYTES:
        raise InvalidCharacters(kind="owner token", allowed="exactly 16 bytes")
    return token


def same_token(recorded: bytes | None, token: bytes) -> bool:
    """The full token is equal; no recorded token never matches."""
    return recorded is not None and hmac.compare_digest(recorded, token)


def claimed_by_another(claimant: int | None, runtime_user: int | None) -> bool:
    """Another runtime user claimed the execution (contract §2.5.2: only the
    claimant writes). An unclaimed execution, or a unit of work that works for
    no runtime user, is nobody else's."""
    return claimant is not None and runtime_user is not None and claimant != runtime_user


# ------------------------------------------------------------------ control values


@dataclass(frozen=True)
class ExecutionView:
    """A job execution with its operator-facing control evidence.

    The owner token itself is never carried: only whether one is recorded.
    ``last_activity_at`` is the row's own activity; ``newest_step_write_at`` is
    filled by the reads that look at the steps too (the selectors), and
    :attr:`activity_at` combines them.
    """

    execution: JobExecution
    stop_requested_at: datetime | None = None
    stop_requested_by: str | None = None
    owner_recorded: bool = False
    last_observed_at: datetime | None = None
    last_activity_at: datetime | None = None
    newest_step_write_at: datetime | None = None
    # The lease TTL the owner's claim was granted (contract §2.5.3: one fact for
    # every process); ``None`` for a claim recorded before it was kept.
    lease_ttl: timedelta | None = None
    # What the runtime said of itself with its claim (decision 310).
    worker: WorkerIdentity | None = None

    @property
    def activity_at(self) -> datetime:
        """contract §2.5.3's activity (the API's ``last_activity_at``); a row without
        the column (written outside the adapter) counts from ``updated_at``."""
        own = own_activity(self.last_activity_at, self.execution.updated_at)
        return latest_activity(own, self.newest_step_write_at)

    @property
    def id(self) -> int:
        return self.execution.id

    @property
    def status(self) -> BatchStatus:
        return self.execution.status

    @property
    def version(self) -> int:
        return self.execution.version

    @property
    def stop_requested(self) -> bool:
        return self.stop_requested_at is not None

    def granted_ttl(self, default: timedelta) -> timedelta:
        """The TTL the claim was granted; ``default`` (the reader's setting) only
        for a claim recorded before the grant was kept."""
        return granted_ttl(self.lease_ttl, default)

    def lease_expires_at(self, default_ttl: timedelta) -> datetime | None:
        """The owner's lease expiry (:func:`lease_expiry`) for the granted TTL
        (``default_ttl`` only where none was recorded)."""
        return lease_expiry(
            self.status, self.owner_recorded, self.activity_at, self.granted_ttl(default_ttl)
        )


@dataclass(frozen=True)
class StopResult:
    """A stop request's outcome: ``changed`` is false for the no-op path."""

    execution: ExecutionView
    changed: bool


@dataclass(frozen=True)
class ExecutionControl:
    """What the runtime learns from one control observation."""

    execution: ExecutionView
    owner_matches: bool
    stop_requested: bool


def stop_request_applies(execution: JobExecution, expected_version: int) -> bool:
    """Whether a stop request records who/when (``True``) or is a no-op (``False``).

    STOPPING and finished executions are no-ops without a version check;
    UNKNOWN → ``InvalidState``; STARTING/STARTED → ``StaleVersion`` on mismatch.
    """
    status = execution.status
    if status in STOP_NO_OP:
        return False
    if status not in STOP_RECORDABLE:
        raise InvalidState(id=execution.id, status=status)
    validate_expected_version(expected_version, execution.version)
    return True


def owner_claim_needs_write(
    execution: JobExecution, expected_version: int, recorded: bytes | None, token: bytes
) -> bool:
    """Whether a claim records ``token`` (``False``: the same token is already there).

    Checked in order: ``StaleVersion``; not STARTING →
    ``ExecutionOwnershipNotAllowed``; another token recorded → ``ExecutionOwned``.
    """
    validate_expected_version(expected_version, execution.version)
    if execution.status is not S.STARTING:
        raise ExecutionOwnershipNotAllowed(id=execution.id, status=execution.status)
    if recorded is None:
        return True
    if same_token(recorded, token):
        return False
    raise ExecutionOwned(id=execution.id)


def observation_stops(status: BatchStatus, *, owner_matches: bool, stop_requested: bool) -> bool:
    """The owner seeing a pending stop moves a STARTING/STARTED execution to STOPPING."""
    return owner_matches and stop_requested and status in CONTROL_STOPPABLE


# ------------------------------------------------------------------------ evidence


def instant_text(instant: datetime | None) -> str | None:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-01-01T00:00:00.000Z``."""
    if instant is None:
        return None
    if instant.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class CheckpointEvidence:
    """A stored checkpoint's descriptor, without its payload."""

    schema: str | None
    schema_version: int | None
    size: int
    intact: bool

    @classmethod
    def from_stored(cls, text: str, checksum: str | None) -> CheckpointEvidence:
        """Describe stored envelope text; one that does not verify is ``intact=False``
        (evidence in its own right — a proposal never fails on it)."""
        size = len(text.encode("utf-8"))
        try:
            envelope = load_stored(text, checksum or "", kind=EnvelopeKind.CHECKPOINT)
        except StoredStateCorrupt:
            return cls(None, None, size, intact=False)
        return cls(envelope.schema, envelope.schema_version, size, intact=True)

    def encoded(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "schema_version": self.schema_version,
            "size": self.size,
            "intact": self.intact,
        }


@dataclass(frozen=True)
class LatestStep:
    """The execution's newest step (highest id).

    ``step_name`` is for people reading the proposal; it is not digested (a
    step's name never changes, and its id is digested already).
    """

    id: int
    status: BatchStatus
    version: int
    checkpoint: CheckpointEvidence | None
    step_name: str | None = None

    def encoded(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status.value,
            "version": self.version,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.encoded(),
        }


def latest_activity(own: datetime, newest_step_write: datetime | None) -> datetime:
    """contract §2.5.3's activity of an execution: the later of its own (runtime writes and
    the owner's observations, the row's ``last_activity_at``) and its newest step
    write (transition, chunk commit: the steps' ``last_activity_at``)."""
    return own if newest_step_write is None else max(own, newest_step_write)


@dataclass(frozen=True)
class RecoveryEvidence:
    """The durable evidence about one execution that a recovery decides on.

    ``last_activity_at`` is the execution row's own activity (its latest runtime
    write or owner observation) and ``newest_step_write_at`` the newest
    ``last_activity_at`` of its steps (their runtime writes) — the digest
    covers both under these names (encoding v1); :attr:`activity_at` is the
    later of the two.
    """

    job_execution_id: int
    status: BatchStatus
    attempt: int
    version: int
    owner_recorded: bool
    failure_category: FailureCategory | None
    last_activity_at: datetime
    last_observed_at: datetime | None
    stop_requested_at: datetime | None
    newest_step_write_at: datetime | None
    latest_step: LatestStep | None
    completed_partition: bool
    committed_flow_decision: bool
    # A write was refused as ``version_ahead``: an acknowledged write was lost.
    lost_write: bool = False
    # The lease TTL the owner's claim was granted (not digested: fixed at the claim).
    lease_ttl: timedelta | None = None
    # Who the owner is (decision 314): its worker identity and runtime user, fixed
    # at the claim like the TTL, so not digested; kept with a decision's evidence.
    owner: WorkerIdentity | None = None
    owner_user: str | None = None

    @property
    def unknown_commit(self) -> bool:
        """UNKNOWN, or failure category UNKNOWN_COMMIT, or the latest step UNKNOWN,
        or a lost write detected (``version_ahead``): what the runtime last did
        may not be what is stored."""
        return (
            self.status is S.UNKNOWN
            or self.failure_category is FailureCategory.UNKNOWN_COMMIT
            or (self.latest_step is not None and self.latest_step.status is S.UNKNOWN)
            or self.lost_write
        )

    @property
    def activity_at(self) -> datetime:
        """contract §2.5.3's activity: the latest of the execution's own activity
        (``last_activity_at``) and its steps' writes — what the API and the
        commands call ``last_activity_at`` on an execution and a proposal."""
        return latest_activity(self.last_activity_at, self.newest_step_write_at)

    def inactivity(self, now: datetime) -> timedelta:
        """``now`` minus the activity; never negative (a clock behind the
        evidence reads as "just active", which is never stale)."""
        return max(timedelta(0), now - self.activity_at)

    def encoded(self) -> dict[str, Any]:
        """The digest's input (see the module docstring)."""
        return {
            "v": EVIDENCE_DIGEST_VERSION,
            "job_execution_id": self.job_execution_id,
            "status": self.status.value,
            "attempt": self.attempt,
            "version": self.version,
            "owner_recorded": self.owner_recorded,
            "last_activity_at": instant_text(self.last_activity_at),
            "last_observed_at": instant_text(self.last_observed_at),
            "newest_step_write_at": instant_text(self.newest_step_write_at),
            "stop_requested_at": instant_text(self.stop_requested_at),
            "latest_step": None if self.latest_step is None else self.latest_step.encoded(),
            "markers": {
                "unknown_commit": self.unknown_commit,
                "completed_partition": self.completed_partition,
                "committed_flow_decision": self.committed_flow_decision,
            },
        }

    def digest(self) -> str:
        """64 lowercase hex characters; independent of any clock reading."""
        return sha256_hex(canonical_bytes(self.encoded()))


# ------------------------------------------------------------------------ proposal


@dataclass(frozen=True)
class RecoveryProposal:
    """Evidence, eligibility and the evidence digest an operator sends back.

    ``reason_code`` is ``recovery_not_allowed`` or ``execution_not_stale`` when
    not eligible, else ``None``; ``eligibility`` says why it is eligible (else
    ``None``). ``threshold`` is the inactivity the rule waits for: the lease TTL
    when an owner is recorded, else the stale threshold; ``lease_expires_at`` is
    the owner's lease expiry (``None`` without an owner or once finished).
    """

    evidence: RecoveryEvidence
    eligible: bool
    reason_code: str | None
    inactive_for: timedelta
    threshold: timedelta
    evidence_digest: str
    eligibility: Eligibility | None = None
    lease_ttl: timedelta = DEFAULT_LEASE_TTL
    lease_expires_at: datetime | None = None

    @property
    def job_execution_id(self) -> int:
        return self.evidence.job_execution_id

    @property
    def version(self) -> int:
        return self.evidence.version

    @property
    def unknown_commit(self) -> bool:
        return self.evidence.unknown_commit

    @property
    def rule(self) -> str | None:
        """The rule that decides an active execution: ``lease`` (an owner is
        recorded) or ``inactivity``; ``None`` for any other status."""
        if self.evidence.status not in STALE_CHECKED:
            return None
        return "lease" if self.evidence.owner_recorded else "inactivity"

    def recorded(self) -> dict[str, Any]:
        """What a decision keeps of the evidence it was taken on, with its times
        (JSON-ready): the digest's input (``evidence``), the activity it
        combines, the rule, the inactivity and threshold at the decision, the
        lease expiry, and who the owner was (decision 314: ``owner``, the
        answers' ``worker`` shape, and ``owner_text``, the line an operator read)."""
        evidence = self.evidence
        return {
            "evidence": evidence.encoded(),
            "owner": worker_data(evidence.owner, evidence.owner_user),
            "owner_text": describe_worker(evidence.owner, evidence.owner_user),
            "last_activity_at": instant_text(evidence.activity_at),
            "lease_expires_at": instant_text(self.lease_expires_at),
            "rule": self.rule,
            "inactive_seconds": int(self.inactive_for.total_seconds()),
            "threshold_seconds": int(self.threshold.total_seconds()),
        }


def propose_recovery(
    evidence: RecoveryEvidence,
    *,
    now: datetime,
    stale_after: timedelta,
    lease_ttl: timedelta = DEFAULT_LEASE_TTL,
) -> RecoveryProposal:
    """UNKNOWN is always eligible; STARTING/STARTED/STOPPING with an owner
    recorded once its lease expired (inactive strictly longer than the TTL
    its claim was granted, ``lease_ttl`` where none is recorded), without one
    once inactive strictly longer than ``stale_after``; any other status never
    (``recovery_not_allowed``).
    ``ValueError`` for a threshold outside 1 min – 24 h or a TTL outside 5 s – 24 h.
    """
    validate_stale_after(stale_after)
    validate_lease_ttl(lease_ttl)
    lease_ttl = granted_ttl(evidence.lease_ttl, lease_ttl)
    inactive = evidence.inactivity(now)
    reason: str | None = None
    eligibility: Eligibility | None = None
    threshold = lease_ttl if evidence.owner_recorded else stale_after
    if evidence.status in STALE_CHECKED:
        if inactive <= threshold:
            reason = ExecutionNotStale.code
        elif evidence.owner_recorded:
            eligibility = Eligibility.LEASE_EXPIRED
        else:
            eligibility = Eligibility.INACTIVE
    elif evidence.status is S.UNKNOWN:
        eligibility = Eligibility.UNKNOWN_STATUS
    else:
        reason = RecoveryNotAllowed.code
    return RecoveryProposal(
        evidence=evidence,
        eligible=reason is None,
        reason_code=reason,
        inactive_for=inactive,
        threshold=threshold,
        evidence_digest=evidence.digest(),
        eligibility=eligibility,
        lease_ttl=lease_ttl,
        lease_expires_at=lease_expiry(
            evidence.status, evidence.owner_recorded, evidence.activity_at, lease_ttl
        ),
    )


def check_recovery(
    proposal: RecoveryProposal,
    *,
    expected_version: int,
    evidence_digest_hex: str,
    disposition: RecoveryDisposition,
    reason_code: str,
    override: bool = False,
) -> Eligibility:
    """Refuse a recovery in contract §2.5.5's order, given a proposal recomputed now.

    ``StaleVersion`` → ``RecoveryNotAllowed`` → ``ExecutionNotStale`` (skipped
    with ``override``: an operator's statement that the worker is gone) →
    ``RecoveryEvidenceStale`` (the digest the operator saw differs) →
    ``UnresolvedRecoveryRequired`` (MARK_FAILED of an unknown commit without
    the reason ``UNKNOWN_EFFECT``). Returns why the recovery may go on: the
    proposal's eligibility, or ``OPERATOR_OVERRIDE`` when only the override
    made it eligible.
    """
    evidence = proposal.evidence
    execution_id = evidence.job_execution_id
    validate_recoverable(execution_id, evidence.status, expected_version, evidence.version)
    if proposal.reason_code == ExecutionNotStale.code and not override:
        raise ExecutionNotStale(
            id=execution_id,
            inactive_seconds=int(proposal.inactive_for.total_seconds()),
            threshold_seconds=int(proposal.threshold.total_seconds()),
            lease_expires_at=instant_text(proposal.lease_expires_at),
        )
    if evidence_digest_hex.lower() != proposal.evidence_digest:
        raise RecoveryEvidenceStale(id=execution_id)
    if requires_unknown_effect(disposition, evidence.unknown_commit, reason_code):
        raise UnresolvedRecoveryRequired(id=execution_id)
    return proposal.eligibility or Eligibility.OPERATOR_OVERRIDE


def requires_unknown_effect(
    disposition: RecoveryDisposition, unknown_commit: bool, reason_code: str
) -> bool:
    """contract §2.5.5's rule, in one place (the service's check and the console's form
    read it): marking an unknown commit FAILED needs the reason code
    ``UNKNOWN_EFFECT`` — its effect may have happened."""
    return (
        disposition is RecoveryDisposition.MARK_FAILED
        and unknown_commit
        and reason_code != UNKNOWN_EFFECT
    )


def default_failure_category(proposal: RecoveryProposal) -> FailureCategory:
    """contract §2.5.5: UNKNOWN_COMMIT with the unknown-commit marker, else STALE_RECOVERED."""
    if proposal.unknown_commit:
        return FailureCategory.UNKNOWN_COMMIT
    return FailureCategory.STALE_RECOVERED


def already_active(
    refusal: ExecutionAlreadyActive,
    view: ExecutionView,
    *,
    now: datetime,
    lease_ttl: timedelta,
    stale_after: timedelta,
) -> ExecutionAlreadyActive:
    """``refusal`` (a launch while ``view``'s attempt is unresolved) with what an
    operator needs to decide: its last activity, its owner's lease expiry and
    the next step — wait, let the watchdog act, or recover it (the command)."""
    activity = view.activity_at
    expires = view.lease_expires_at(lease_ttl)
    pk = view.id
    show = f"manage.py batch_show {pk}"
    force = f"manage.py batch_recover {pk} --force --note '…' (after {show})"
    if view.status is S.UNKNOWN:
        step = (
            "its last commit may or may not have applied, so no watchdog acts on it: an "
            f"operator decides ({show}, then manage.py batch_recover {pk} --reason "
            "UNKNOWN_EFFECT …, or the console's recover action)"
        )
    elif expires is not None and expires > now:
        step = (
            "if its worker is alive, wait for it to finish; if the worker is gone, the "
            "watchdog (manage.py batch_watchdog) fails it once the lease expires, or an "
            f"operator recovers it now: {force}"
        )
    elif expires is not None:
        step = (
            "its owner's lease has expired: the watchdog (manage.py batch_watchdog) fails it "
            f"on its next pass, or an operator recovers it: {show}, then manage.py "
            f"batch_recover {pk} …"
        )
    else:
        stale_at = instant_text(activity + stale_after)
        step = (
            "no owner is recorded, so no watchdog acts on it: an operator may recover it once "
            f"it has been inactive until {stale_at}, or earlier with an override: {force}"
        )
    return ExecutionAlreadyActive(
        instance_id=refusal.instance_id,
        execution_id=refusal.execution_id,
        status=refusal.status,
        last_activity_at=instant_text(activity),
        owner_recorded=view.owner_recorded,
        lease_expires_at=instant_text(expires),
        next_step=step,
    )
