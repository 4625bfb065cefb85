"""Reconciling a mutation whose commit outcome is unknown (stdlib only, no Django).

``CommitOutcomeUnknown`` means the request reached the repository but its answer
was lost: the write may or may not have committed. The rule, for a
compare-and-swap that expected ``expected_version``:

1. Re-read the row (retrying the read while the repository is ``Unavailable``,
   a bounded number of times). When every re-read fails the outcome is still
   unknown: :func:`settle` raises ``CommitOutcomeUnknown`` (from the last
   ``Unavailable``), never ``Unavailable`` — that would say nothing was
   written and a blind retry is safe.
2. ``version == expected_version + 1`` and the row is in the state the write
   produces (a transition: the target status, and its failure when one was
   sent; a chunk commit: status and exit code unchanged, counts advanced by
   exactly the chunk's deltas, the checkpoint and context sent stored) ⇒
   **applied**: carry on from the row read.
3. ``version == expected_version`` ⇒ **not applied** (every committed
   mutation bumps the version): safe to send the same request again, once,
   with the same expected version. The first request may still be running on
   the server and commit after the re-read: then the resend meets
   ``StaleVersion`` for this very write, so that answer is reconciled once
   more — applied ⇒ the row read, anything else ⇒ superseded. A resend that
   gets no answer at all (``Unavailable``) leaves the first request's outcome
   open: ``CommitOutcomeUnknown``.
4. Anything else ⇒ **superseded**: someone else wrote; never retry blindly —
   re-plan from the row read, as after ``StaleVersion``.

Every mutation bumps the version by one, so "applied" cannot be confused with
a later write; it can only be confused with an identical write by someone
else, which leaves the row exactly as this one would have.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from oxide_batch.client.models import Execution, Step, StepState
from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.domain.status import BatchStatus

T = TypeVar("T")

REREAD_ATTEMPTS = 5
REREAD_FIRST_PAUSE = 0.25  # seconds, doubled after each Unavailable
REREAD_MAX_PAUSE = 2.0


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class Reconciliation(Generic[T]):
    """What a re-read after ``CommitOutcomeUnknown`` showed, and the row it read."""

    outcome: Outcome
    current: T


class Superseded(Exception):
    """After an unknown commit outcome the row is neither as this write left it
    nor untouched: someone else wrote. Re-plan from ``current`` (the execution
    or step read), as after ``StaleVersion``; never send the write again."""

    def __init__(self, expected_version: int, current: Any) -> None:
        super().__init__(
            f"sent at version {expected_version}; the row is now at version "
            f"{getattr(current, 'version', '?')} in a state this write does not produce"
        )
        self.expected_version = expected_version
        self.current = current


def _outcome(version: int, expected_version: int, produced: bool) -> Outcome:
    if version == expected_version:
        return Outcome.NOT_APPLIED
    if version == expected_version + 1 and produced:
        return Outcome.APPLIED
    return Outcome.SUPERSEDED


def transition_outcome(
    current: Execution | Step,
    expected_version: int,
    status: BatchStatus,
    failure: FailureSummary | None = None,
    exit_code: str | None = None,
) -> Outcome:
    """The rule for a transition to ``status`` (with ``failure`` and
    ``exit_code``, if they were sent)."""
    produced = (
        current.status is status
        and (failure is None or current.failure == failure)
        and (exit_code is None or current.exit_code == exit_code)
    )
    return _outcome(current.version, expected_version, produced)


def claim_outcome(current: Execution, expected_version: int) -> Outcome:
    """The rule for a claim: an owner recorded on a STARTING row."""
    produced = current.owner_recorded and current.status is BatchStatus.STARTING
    return _outcome(current.version, expected_version, produced)


def exit_code_outcome(current: Execution | Step, expected_version: int, exit_code: str) -> Outcome:
    """The rule for an exit-status write: the exit code stored."""
    return _outcome(current.version, expected_version, current.exit_code == exit_code)


def chunk_outcome(
    current: StepState,
    before: Step,
    counts: ExecutionCounts,
    checkpoint: StateEnvelope | None = None,
    context: StateEnvelope | None = None,
    *,
    finish: BatchStatus | None = None,
    exit_code: str | None = None,
) -> Outcome:
    """The rule for a chunk commit sent at ``before.version`` with deltas
    ``counts``: a chunk commit changes neither status nor exit code — unless it
    finishes its step (``finish``: that status, and ``exit_code`` when sent);
    an envelope not sent is not compared (the commit keeps it). A chunk with
    no deltas and no envelopes cannot be told from another status-preserving
    write."""
    step = current.step
    if finish is None:
        ended = (step.status, step.exit_code) == (before.status, before.exit_code)
    else:
        ended = step.status is finish and (exit_code is None or step.exit_code == exit_code)
    produced = (
        ended
        and step.counts == before.counts.plus(counts)
        and (checkpoint is None or current.checkpoint == checkpoint)
        and (context is None or current.context == context)
    )
    return _outcome(step.version, before.version, produced)


def reread(
    read: Callable[[], T],
    *,
    attempts: int = REREAD_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``read()``, again after each ``Unavailable`` (pausing 0.25 s, doubling up
    to 2 s), at most ``attempts`` times; the last ``Unavailable`` propagates."""
    pause = REREAD_FIRST_PAUSE
    for _ in range(attempts - 1):
        try:
            return read()
        except Unavailable:
            sleep(pause)
            pause = min(pause * 2, REREAD_MAX_PAUSE)
    return read()


def settle(
    send: Callable[[], T],
    expected_version: int,
    reconcile: Callable[[], Reconciliation[T]] | None,
) -> T:
    """``send()``; on ``CommitOutcomeUnknown`` (when ``reconcile`` is given) apply
    the rule: applied → the row read; not applied → ``send()`` once more;
    superseded → ``Superseded``. A second unknown outcome propagates; re-reads
    that all fail, or a resend never answered, raise ``CommitOutcomeUnknown``;
    a resend refused as ``StaleVersion`` is reconciled again (applied → the row
    read, otherwise ``Superseded``). A ``StaleVersion`` answering a write the
    transport sent again after ``Unavailable`` is reconciled too: applied → the
    row read, else that refusal."""
    try:
        return send()
    except StaleVersion as stale:
        # Sent again after ``Unavailable`` (the transport's retry): the answer
        # may be this very write, applied by an earlier send.
        if reconcile is None or not getattr(stale, "resent", False):
            raise
        found = _still_unknown_unless(reconcile)
        if found.outcome is Outcome.APPLIED:
            return found.current
        raise
    except CommitOutcomeUnknown:
        if reconcile is None:
            raise
    found = _still_unknown_unless(reconcile)
    if found.outcome is Outcome.APPLIED:
        return found.current
    if found.outcome is Outcome.SUPERSEDED:
        raise Superseded(expected_version, found.current)
    try:
        return send()
    except StaleVersion:
        # The first request may have committed after the re-read saw it unapplied.
        pass
    except Unavailable as lost:
        # The resend did nothing, but the first request may yet commit.
        raise CommitOutcomeUnknown() from lost
    found = _still_unknown_unless(reconcile)
    if found.outcome is Outcome.APPLIED:
        return found.current
    raise Superseded(expected_version, found.current)


def settle_create(send: Callable[[], T], find: Callable[[], T | None] | None) -> T:
    """``send()`` for a write that creates a row (no version to compare): on
    ``CommitOutcomeUnknown`` look for the row it would have made (``find()``,
    re-read while ``Unavailable``) and take it; when there is none, or for an
    idempotent write (``find`` is ``None``), ``send()`` once more. A second
    unknown outcome propagates."""
    try:
        return send()
    except CommitOutcomeUnknown:
        if find is not None:
            try:
                found = reread(find)
            except Unavailable as unanswered:
                raise CommitOutcomeUnknown() from unanswered
            if found is not None:
                return found
    return send()


def _still_unknown_unless(reconcile: Callable[[], Reconciliation[T]]) -> Reconciliation[T]:
    """``reconcile()``; re-reads that gave up leave the write's outcome unknown."""
    try:
        return reconcile()
    except Unavailable as unanswered:
        raise CommitOutcomeUnknown() from unanswered


class _Reads(Protocol):
    reread_attempts: int

    def execution(self, execution_id: int) -> Execution: ...
    def step(self, step_id: int) -> Step: ...
    def checkpoint(self, step: int | Step) -> StepState: ...


class ReconcilingReads:
    """The ``reconcile_*`` methods of :class:`~oxide_batch.client.RuntimeClient`."""

    #: How many times a reconciling re-read is tried while ``Unavailable``.
    reread_attempts = REREAD_ATTEMPTS

    def reconcile_transition(
        self: _Reads,
        execution_id: int,
        expected_version: int,
        status: BatchStatus | str,
        *,
        failure: FailureSummary | None = None,
        exit_code: str | None = None,
    ) -> Reconciliation[Execution]:
        """After ``CommitOutcomeUnknown`` on a transition: re-read the execution
        (again while ``Unavailable``, bounded) and classify it — applied at
        ``expected_version + 1`` in ``status`` (with ``exit_code`` when sent),
        not applied at ``expected_version``, superseded otherwise."""
        return _reconcile_transition(
            lambda: self.execution(execution_id),
            self.reread_attempts,
            expected_version,
            status,
            failure,
            exit_code,
        )

    def reconcile_step_transition(
        self: _Reads,
        step_id: int,
        expected_version: int,
        status: BatchStatus | str,
        *,
        failure: FailureSummary | None = None,
        exit_code: str | None = None,
    ) -> Reconciliation[Step]:
        """:meth:`reconcile_transition` for a step."""
        return _reconcile_transition(
            lambda: self.step(step_id),
            self.reread_attempts,
            expected_version,
            status,
            failure,
            exit_code,
        )

    def reconcile_chunk(
        self: _Reads,
        step: Step,
        counts: ExecutionCounts | Mapping[str, int] | None = None,
        checkpoint: StateEnvelope | Mapping[str, Any] | None = None,
        context: StateEnvelope | Mapping[str, Any] | None = None,
        *,
        finish: BatchStatus | None = None,
        exit_code: str | None = None,
    ) -> Reconciliation[StepState]:
        """After ``CommitOutcomeUnknown`` on a chunk commit sent at ``step.version``
        (``step`` as last received): re-read the step's state (again while
        ``Unavailable``, bounded) and classify it — applied at ``step.version + 1``
        with ``step.counts`` advanced by ``counts`` and the envelopes sent stored,
        not applied at ``step.version``, superseded otherwise."""
        current = reread(lambda: self.checkpoint(step.id), attempts=self.reread_attempts)
        outcome = chunk_outcome(
            current,
            step,
            _deltas(counts),
            _state(checkpoint, EnvelopeKind.CHECKPOINT),
            _state(context, EnvelopeKind.CONTEXT),
            finish=finish,
            exit_code=exit_code,
        )
        return Reconciliation(outcome, current)


R = TypeVar("R", Execution, Step)


def _reconcile_transition(
    read: Callable[[], R],
    attempts: int,
    expected_version: int,
    status: BatchStatus | str,
    failure: FailureSummary | None,
    exit_code: str | None = None,
) -> Reconciliation[R]:
    current = reread(read, attempts=attempts)
    outcome = transition_outcome(current, expected_version, BatchStatus(status), failure, exit_code)
    return Reconciliation(outcome, current)


def _deltas(counts: ExecutionCounts | Mapping[str, int] | None) -> ExecutionCounts:
    if isinstance(counts, ExecutionCounts):
        return counts
    return ExecutionCounts(**dict(counts or {}))


def _state(value: StateEnvelope | Mapping[str, Any] | None, kind: EnvelopeKind) -> Any:
    if value is None or isinstance(value, StateEnvelope):
        return value
    return StateEnvelope.from_json(dict(value), kind=kind)
