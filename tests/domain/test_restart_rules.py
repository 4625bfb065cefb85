"""Restart skips what completed (contract §2.3.2; the seed's ``validate_restart``): what a
step of a restart attempt does with its newest earlier row, decided by
``step_takes_over`` for every status × ``allow_start_if_complete`` × partition rerun."""

from __future__ import annotations

from enum import Enum

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import NotRestartable
from oxide_batch.domain.launch import step_takes_over
from oxide_batch.domain.lifecycle import validate_restart

S = BatchStatus
STEP = "load"
EARLIER_ID = 41


class Outcome(Enum):
    TAKE_OVER = "takes over counts, checkpoint and context"
    FRESH = "starts fresh"
    REFUSED = "not_restartable"


T, F, R = Outcome.TAKE_OVER, Outcome.FRESH, Outcome.REFUSED

# status → outcome for (allow, rerun) = (no, no), (yes, no), (no, yes), (yes, yes).
RULES: dict[BatchStatus, tuple[Outcome, Outcome, Outcome, Outcome]] = {
    # Left active by an attempt that ended: nothing can resolve it, Spring Batch re-runs it.
    S.STARTING: (T, T, T, T),
    S.STARTED: (T, T, T, T),
    S.STOPPING: (T, T, T, T),
    # The seed's validate_restart: the only restartable outcomes.
    S.STOPPED: (T, T, T, T),
    S.FAILED: (T, T, T, T),
    # Skipped unless asked to run again, or the worker of a partition that never completed.
    S.COMPLETED: (R, F, F, F),
    # Skipped whatever the request says.
    S.ABANDONED: (R, R, R, R),
    # Waits for an operator whatever the request says.
    S.UNKNOWN: (R, R, R, R),
}
FLAGS = [(False, False), (True, False), (False, True), (True, True)]
CASES = [
    pytest.param(
        status,
        allow,
        rerun,
        outcomes[index],
        id=f"{status.value}-allow={allow}-rerun={rerun}",
    )
    for status, outcomes in RULES.items()
    for index, (allow, rerun) in enumerate(FLAGS)
]


def decide(status: BatchStatus, *, allow: bool = False, rerun: bool = False) -> Outcome:
    try:
        takes_over = step_takes_over(
            status,
            step_name=STEP,
            earlier_id=EARLIER_ID,
            allow_start_if_complete=allow,
            partition_rerun=rerun,
        )
    except NotRestartable:
        return R
    return T if takes_over else F


def test_the_table_covers_every_status():
    assert set(RULES) == set(BatchStatus)
    assert len(CASES) == len(BatchStatus) * 4


@pytest.mark.parametrize(("status", "allow", "rerun", "expected"), CASES)
def test_the_earlier_rows_status_decides_what_a_restarted_step_does(status, allow, rerun, expected):
    assert decide(status, allow=allow, rerun=rerun) is expected


@pytest.mark.parametrize("status", list(BatchStatus), ids=str)
def test_every_outcome_the_seed_restarts_is_taken_over(status):
    """Agreement with the seed: what ``validate_restart`` accepts (STOPPED,
    FAILED) is always taken over, whatever the flags."""
    try:
        validate_restart(status)
    except NotRestartable:
        return
    assert {decide(status, allow=a, rerun=r) for a, r in FLAGS} == {T}


@pytest.mark.parametrize("status", [S.COMPLETED, S.ABANDONED, S.UNKNOWN], ids=str)
def test_a_refusal_names_the_step_the_earlier_row_and_its_status(status):
    with pytest.raises(NotRestartable) as refused:
        step_takes_over(status, step_name=STEP, earlier_id=EARLIER_ID)
    error = refused.value
    assert (error.code, error.status, error.step_name, error.step_execution_id) == (
        "not_restartable",
        status,
        STEP,
        EARLIER_ID,
    )
    assert error.details() == {
        "status": status.value,
        "step_name": STEP,
        "step_execution_id": EARLIER_ID,
    }
    assert f"'{STEP}' is {status.value} in an earlier attempt" in error.message
    assert f"(step execution {EARLIER_ID})" in error.message


MESSAGES = {
    # Says how to run it again.
    S.COMPLETED: ("a restart skips it", "allow_start_if_complete: true"),
    S.ABANDONED: ("a restart skips it",),
    # Says who must act first, and how.
    S.UNKNOWN: ("must be resolved first", "UNKNOWN_EFFECT"),
}


@pytest.mark.parametrize(("status", "phrases"), MESSAGES.items(), ids=str)
def test_a_refusal_says_what_to_do(status, phrases):
    with pytest.raises(NotRestartable) as refused:
        step_takes_over(status, step_name=STEP, earlier_id=EARLIER_ID)
    for phrase in phrases:
        assert phrase in refused.value.message
    # Only the COMPLETED refusal offers the flag: it changes nothing for the others.
    assert ("allow_start_if_complete" in refused.value.message) is (status is S.COMPLETED)


@pytest.mark.parametrize(("allow", "rerun"), FLAGS, ids=str)
def test_a_fresh_start_is_only_ever_a_completed_row(allow, rerun):
    fresh = {status for status in BatchStatus if decide(status, allow=allow, rerun=rerun) is F}
    assert fresh == ({S.COMPLETED} if allow or rerun else set())
