"""The reconciliation rule after ``CommitOutcomeUnknown`` (no server): applied
only at ``expected + 1`` in the state the write produces, not applied at
``expected``, superseded otherwise; re-reads retried while ``Unavailable``,
bounded, and when they give up the outcome is still unknown; at most one
resend, never after "applied" or "superseded"; a resend refused as stale is
reconciled once more (the first request may have committed late)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from oxide_batch.client import Execution, Outcome, Reconciliation, Step, StepState, Superseded
from oxide_batch.client.reconcile import chunk_outcome, reread, settle, transition_outcome
from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory

S = BatchStatus
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN: dict[str, Any] = {
    "id": 7,
    "job_instance_id": 3,
    "status": S.STARTING,
    "exit_code": "UNKNOWN",
    "created_at": NOW,
    "started_at": None,
    "ended_at": None,
    "updated_at": NOW,
    "counts": ExecutionCounts(),
    "failure": None,
    "version": 4,
}
EXECUTION = Execution(
    **RUN,
    job_name="nightly",
    attempt=1,
    stop_requested=False,
    stop_requested_at=None,
    owner_recorded=False,
    last_observed_at=None,
    definition=None,
)
STEP = Step(
    **{**RUN, "status": S.STARTED, "counts": ExecutionCounts(read=10, written=9)},
    job_execution_id=7,
    step_name="load",
    node_id="load",
)
OOM = FailureSummary(FailureCategory.USER_COMPONENT, 1)
OTHER = FailureSummary(FailureCategory.USER_COMPONENT, 2)


def row(**changes: object) -> Execution:
    return dataclasses.replace(EXECUTION, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "status", "failure", "expected"),
    [
        (row(version=5, status=S.STARTED), S.STARTED, None, Outcome.APPLIED),
        (row(version=4), S.STARTED, None, Outcome.NOT_APPLIED),
        # A write at expected + 1 that left another state is someone else's.
        (row(version=5, status=S.STOPPING), S.STARTED, None, Outcome.SUPERSEDED),
        # Ours may have applied, but another write followed: not ours to judge.
        (row(version=6, status=S.STARTED), S.STARTED, None, Outcome.SUPERSEDED),
        (row(version=5, status=S.FAILED, failure=OOM), S.FAILED, OOM, Outcome.APPLIED),
        (row(version=5, status=S.FAILED, failure=OTHER), S.FAILED, OOM, Outcome.SUPERSEDED),
        (row(version=3), S.STARTED, None, Outcome.SUPERSEDED),
    ],
)
def test_a_transition_reconciles_by_version_then_state(current, status, failure, expected):
    assert transition_outcome(current, 4, status, failure) is expected


CHECKPOINT = StateEnvelope("reader.offset", 1, {"offset": 20})
CONTEXT = StateEnvelope("job.context", 1, {"file": "a.csv"})
DELTA = ExecutionCounts(read=10, written=10)


def state(
    version: int,
    counts: ExecutionCounts,
    checkpoint: StateEnvelope | None = CHECKPOINT,
    context: StateEnvelope | None = None,
) -> StepState:
    return StepState(dataclasses.replace(STEP, version=version, counts=counts), checkpoint, context)


def stopped(found: StepState) -> StepState:
    return dataclasses.replace(found, step=dataclasses.replace(found.step, status=S.STOPPING))


ADVANCED = ExecutionCounts(read=20, written=19)


@pytest.mark.parametrize(
    ("current", "checkpoint", "context", "expected"),
    [
        (state(5, ADVANCED), CHECKPOINT, None, Outcome.APPLIED),
        (state(4, STEP.counts, checkpoint=None), CHECKPOINT, None, Outcome.NOT_APPLIED),
        # Another chunk (other deltas, or another checkpoint) won the version.
        (state(5, ExecutionCounts(read=11, written=9)), CHECKPOINT, None, Outcome.SUPERSEDED),
        (
            state(5, ADVANCED, StateEnvelope("reader.offset", 1, {"offset": 21})),
            CHECKPOINT,
            None,
            Outcome.SUPERSEDED,
        ),
        (state(6, ADVANCED.plus(DELTA)), CHECKPOINT, None, Outcome.SUPERSEDED),
        # A chunk commit never moves the status or the exit code.
        (stopped(state(5, ADVANCED)), CHECKPOINT, None, Outcome.SUPERSEDED),
        # An envelope not sent is kept by the commit, so it is not compared.
        (state(5, ADVANCED, checkpoint=None), None, None, Outcome.APPLIED),
        (state(5, ADVANCED, context=CONTEXT), CHECKPOINT, CONTEXT, Outcome.APPLIED),
        (state(5, ADVANCED, context=None), CHECKPOINT, CONTEXT, Outcome.SUPERSEDED),
    ],
)
def test_a_chunk_commit_reconciles_by_version_counts_and_envelopes(
    current, checkpoint, context, expected
):
    assert chunk_outcome(current, STEP, DELTA, checkpoint, context) is expected


def test_a_reread_is_retried_while_unavailable_with_growing_pauses():
    answers: list[object] = [Unavailable(), Unavailable(), Unavailable(), EXECUTION]
    pauses: list[float] = []

    def read() -> Execution:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    assert reread(read, attempts=5, sleep=pauses.append) == EXECUTION
    assert pauses == [0.25, 0.5, 1.0]


def test_a_reread_gives_up_after_its_attempts():
    calls: list[int] = []
    pauses: list[float] = []

    def read() -> Execution:
        calls.append(1)
        raise Unavailable()

    with pytest.raises(Unavailable):
        reread(read, attempts=6, sleep=pauses.append)
    assert len(calls) == 6
    assert pauses == [0.25, 0.5, 1.0, 2.0, 2.0]


def test_a_reread_does_not_retry_other_errors():
    calls: list[int] = []

    def read() -> Execution:
        calls.append(1)
        raise StaleVersion(expected=1, actual=2)

    with pytest.raises(StaleVersion):
        reread(read, sleep=lambda _: None)
    assert calls == [1]


class Sender:
    """A mutation whose first ``unknown`` sends lose their answer."""

    def __init__(self, unknown: int, answer: Execution) -> None:
        self.unknown = unknown
        self.answer = answer
        self.sent = 0

    def __call__(self) -> Execution:
        self.sent += 1
        if self.sent <= self.unknown:
            raise CommitOutcomeUnknown()
        return self.answer


APPLIED_ROW = row(version=5, status=S.STARTED)


def found(outcome: Outcome, current: Execution) -> object:
    return lambda: Reconciliation(outcome, current)


def test_settle_returns_the_row_read_when_applied_without_sending_again():
    send = Sender(1, row(version=99))
    assert settle(send, 4, found(Outcome.APPLIED, APPLIED_ROW)) == APPLIED_ROW
    assert send.sent == 1


def test_settle_sends_once_more_when_not_applied():
    send = Sender(1, APPLIED_ROW)
    assert settle(send, 4, found(Outcome.NOT_APPLIED, row())) == APPLIED_ROW
    assert send.sent == 2


def test_settle_raises_superseded_and_never_sends_again():
    send = Sender(1, APPLIED_ROW)
    other = row(version=5, status=S.STOPPING)
    with pytest.raises(Superseded) as raised:
        settle(send, 4, found(Outcome.SUPERSEDED, other))
    assert (raised.value.expected_version, raised.value.current) == (4, other)
    assert send.sent == 1


def test_settle_lets_a_second_unknown_outcome_propagate():
    send = Sender(2, APPLIED_ROW)
    with pytest.raises(CommitOutcomeUnknown):
        settle(send, 4, found(Outcome.NOT_APPLIED, row()))
    assert send.sent == 2


def test_without_reconcile_the_unknown_outcome_propagates():
    send = Sender(1, APPLIED_ROW)
    with pytest.raises(CommitOutcomeUnknown):
        settle(send, 4, None)
    assert send.sent == 1


def test_settle_lets_a_first_stale_version_propagate_without_reconciling():
    reconciled: list[int] = []

    def send() -> Execution:
        raise StaleVersion(expected=4, actual=5)

    def reconcile() -> Reconciliation[Execution]:
        reconciled.append(1)
        return Reconciliation(Outcome.APPLIED, APPLIED_ROW)

    with pytest.raises(StaleVersion):
        settle(send, 4, reconcile)
    assert reconciled == []


# -- when the re-reads give up, and when the resend meets stale_version --------------


class Script:
    """Answers (rows or errors to raise) given out in order; counts the calls."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_settle_reports_an_unknown_outcome_when_every_reread_is_unavailable():
    send = Sender(1, APPLIED_ROW)
    read = Script(Unavailable(), Unavailable(), Unavailable())
    pauses: list[float] = []

    def reconcile() -> Reconciliation[Execution]:
        current = reread(read, attempts=3, sleep=pauses.append)
        return Reconciliation(transition_outcome(current, 4, S.STARTED), current)

    # Not Unavailable ("nothing was answered, a retry is safe"): the write may
    # have committed.
    with pytest.raises(CommitOutcomeUnknown) as raised:
        settle(send, 4, reconcile)
    assert isinstance(raised.value.__cause__, Unavailable)
    assert (read.calls, pauses) == (3, [0.25, 0.5])
    assert send.sent == 1  # never resent on an unknown


def test_settle_finds_its_own_late_commit_when_the_resend_is_stale():
    # The re-read saw the row untouched while the first request still ran;
    # it committed before the resend arrived.
    send = Script(CommitOutcomeUnknown(), StaleVersion(expected=4, actual=5))
    reconcile = Script(
        Reconciliation(Outcome.NOT_APPLIED, row()),
        Reconciliation(Outcome.APPLIED, APPLIED_ROW),
    )
    assert settle(send, 4, reconcile) == APPLIED_ROW
    assert (send.calls, reconcile.calls) == (2, 2)


@pytest.mark.parametrize(
    "second",
    [
        Reconciliation(Outcome.SUPERSEDED, row(version=5, status=S.STOPPING)),
        Reconciliation(Outcome.SUPERSEDED, row(version=6, status=S.STARTED)),
        # Impossible after a stale resend (versions only grow); not ours all the same.
        Reconciliation(Outcome.NOT_APPLIED, row()),
    ],
)
def test_settle_raises_superseded_when_the_stale_resend_met_someone_else(second):
    send = Script(CommitOutcomeUnknown(), StaleVersion(expected=4, actual=5), APPLIED_ROW)
    reconcile = Script(Reconciliation(Outcome.NOT_APPLIED, row()), second)
    with pytest.raises(Superseded) as raised:
        settle(send, 4, reconcile)
    assert (raised.value.expected_version, raised.value.current) == (4, second.current)
    assert (send.calls, reconcile.calls) == (2, 2)  # never a third send


def test_settle_reports_an_unknown_outcome_when_the_reread_after_a_stale_resend_gives_up():
    send = Script(CommitOutcomeUnknown(), StaleVersion(expected=4, actual=5))
    reconcile = Script(Reconciliation(Outcome.NOT_APPLIED, row()), Unavailable())
    with pytest.raises(CommitOutcomeUnknown) as raised:
        settle(send, 4, reconcile)
    assert isinstance(raised.value.__cause__, Unavailable)
    assert (send.calls, reconcile.calls) == (2, 2)


def test_settle_reports_an_unknown_outcome_when_the_resend_is_not_answered():
    # The resend did nothing, but the first request may still commit: a blind
    # retry could meet it as stale_version.
    send = Script(CommitOutcomeUnknown(), Unavailable())
    reconcile = Script(Reconciliation(Outcome.NOT_APPLIED, row()))
    with pytest.raises(CommitOutcomeUnknown) as raised:
        settle(send, 4, reconcile)
    assert isinstance(raised.value.__cause__, Unavailable)
    assert (send.calls, reconcile.calls) == (2, 1)
