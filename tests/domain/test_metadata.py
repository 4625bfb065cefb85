"""Execution values and their invariants (contract §2; contract scenarios 1.7, 1.8)."""

from __future__ import annotations

import dataclasses

import pytest

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureCategory,
    FailureSummary,
    JobExecution,
)
from oxide_batch.domain.errors import (
    ActiveExecutionHasEndTime,
    CountExhausted,
    EmptyName,
    FailedExecutionMissingFailure,
    FinishedExecutionMissingEndTime,
    IdentifierOutOfRange,
    InvalidTimestampOrder,
    NameTooLong,
    ZeroIdentifier,
)
from oxide_batch.domain.failure_detail import FailureDetail
from tests.domain.builders import FINISHED, MAX_I64, UNRESOLVED, at, failure

S = BatchStatus
COUNT_FIELDS = ("read", "processed", "written", "filtered", "committed", "rolled_back")


def _metadata(status, *, started=101, ended=None, failure_summary=None, exit_code="UNKNOWN"):
    return ExecutionMetadata(
        status=status,
        exit_code=exit_code,
        timestamps=ExecutionTimestamps(
            at(100),
            None if started is None else at(started),
            None if ended is None else at(ended),
        ),
        failure=failure_summary,
    )


# ---------------------------------------------------------------- metadata invariants


@pytest.mark.parametrize("status", sorted(UNRESOLVED))
def test_an_active_or_unknown_execution_cannot_have_an_end_time(status):
    with pytest.raises(ActiveExecutionHasEndTime):
        _metadata(status, ended=102, failure_summary=failure())


@pytest.mark.parametrize("status", sorted(UNRESOLVED))
def test_an_active_or_unknown_execution_without_an_end_time_is_valid(status):
    assert _metadata(status).timestamps.ended_at is None


@pytest.mark.parametrize("status", sorted(FINISHED))
def test_a_finished_execution_requires_an_end_time(status):
    with pytest.raises(FinishedExecutionMissingEndTime):
        _metadata(status, failure_summary=failure())


@pytest.mark.parametrize("status", sorted(FINISHED))
def test_a_finished_execution_with_an_end_time_is_valid(status):
    assert _metadata(status, ended=102, failure_summary=failure()).status is status


def test_a_failed_execution_requires_a_failure_summary():
    with pytest.raises(FailedExecutionMissingFailure):
        _metadata(S.FAILED, ended=102)


@pytest.mark.parametrize("status", sorted(FINISHED - {S.FAILED}))
def test_only_failed_requires_a_failure_summary(status):
    assert _metadata(status, ended=102).failure is None


def test_a_missing_end_time_is_reported_before_a_missing_failure():
    with pytest.raises(FinishedExecutionMissingEndTime):
        _metadata(S.FAILED)


@pytest.mark.parametrize(
    ("exit_code", "error"), [("", EmptyName), ("X" * 65, NameTooLong)], ids=["empty", "65-bytes"]
)
def test_metadata_refuses_an_invalid_exit_code(exit_code, error):
    with pytest.raises(error):
        _metadata(S.STARTED, exit_code=exit_code)


def test_a_new_attempt_is_starting_with_exit_unknown_zero_counts_and_no_times():
    metadata = ExecutionMetadata.starting(at(200))
    assert metadata.status is S.STARTING
    assert metadata.exit_code == "UNKNOWN"
    assert metadata.counts == ExecutionCounts(0, 0, 0, 0, 0, 0)
    assert metadata.timestamps == ExecutionTimestamps(at(200), None, None)
    assert metadata.failure is None


def test_metadata_is_immutable():
    metadata = _metadata(S.STARTED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.status = S.COMPLETED  # type: ignore[misc]


# ------------------------------------------------------------------------ timestamps


@pytest.mark.parametrize(
    ("created", "started", "ended"),
    [
        pytest.param(100, 99, None, id="started-before-created"),
        pytest.param(100, 101, 100.5, id="ended-before-started"),
        pytest.param(100, None, 99, id="ended-before-created-never-started"),
        pytest.param(100, 99, 101, id="started-before-created-with-end"),
    ],
)
def test_timestamps_out_of_order_are_refused(created, started, ended):
    with pytest.raises(InvalidTimestampOrder):
        ExecutionTimestamps(
            at(created),
            None if started is None else at(started),
            None if ended is None else at(ended),
        )


@pytest.mark.parametrize(
    ("created", "started", "ended"),
    [(100, None, None), (100, 100, None), (100, 100, 100), (100, None, 100), (100, 101, 102)],
)
def test_timestamps_in_order_are_accepted(created, started, ended):
    timestamps = ExecutionTimestamps(
        at(created),
        None if started is None else at(started),
        None if ended is None else at(ended),
    )
    assert timestamps.created_at == at(created)


# ---------------------------------------------------------------------------- counts


@pytest.mark.parametrize("field", COUNT_FIELDS)
def test_a_negative_count_is_refused(field):
    with pytest.raises(ValueError, match=field):
        ExecutionCounts(**{field: -1})


@pytest.mark.parametrize("field", COUNT_FIELDS)
def test_a_count_above_the_bigint_limit_is_count_exhausted(field):
    with pytest.raises(CountExhausted):
        ExecutionCounts(**{field: MAX_I64 + 1})


@pytest.mark.parametrize("field", COUNT_FIELDS)
def test_a_count_at_the_bigint_limit_is_accepted(field):
    assert getattr(ExecutionCounts(**{field: MAX_I64}), field) == MAX_I64


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_a_count_must_be_a_plain_int(value):
    with pytest.raises(ValueError, match="read"):
        ExecutionCounts(read=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", COUNT_FIELDS)
def test_adding_counts_past_the_limit_is_count_exhausted(field):
    with pytest.raises(CountExhausted):
        ExecutionCounts(**{field: MAX_I64}).plus(ExecutionCounts(**{field: 1}))


def test_adding_counts_adds_field_by_field():
    total = ExecutionCounts(1, 2, 3, 4, 5, 6).plus(ExecutionCounts(10, 20, 30, 40, 50, 60))
    assert total == ExecutionCounts(11, 22, 33, 44, 55, 66)
    assert total.as_dict() == dict(zip(COUNT_FIELDS, (11, 22, 33, 44, 55, 66), strict=True))


def test_adding_counts_up_to_the_limit_is_accepted():
    total = ExecutionCounts(read=MAX_I64 - 1).plus(ExecutionCounts(read=1))
    assert total.read == MAX_I64


# --------------------------------------------------------------------------- failure


@pytest.mark.parametrize("failure_id", [0, -1])
def test_a_failure_id_must_be_positive(failure_id):
    with pytest.raises(ZeroIdentifier) as caught:
        FailureSummary(FailureCategory.USER_COMPONENT, failure_id)
    assert caught.value.kind == "failure"


def test_a_failure_id_above_the_bigint_limit_is_out_of_range():
    with pytest.raises(IdentifierOutOfRange):
        FailureSummary(FailureCategory.USER_COMPONENT, MAX_I64 + 1)


def test_a_failure_summary_is_only_a_category_and_an_id():
    """The summary a row stores; the runtime's ``detail`` rides beside it
    (issue 40): never compared, never hashed, never in a row."""
    assert [field.name for field in dataclasses.fields(FailureSummary) if field.compare] == [
        "category",
        "failure_id",
    ]
    sent = FailureSummary(FailureCategory.USER_COMPONENT, 7, FailureDetail("E", "text"))
    assert sent == FailureSummary(FailureCategory.USER_COMPONENT, 7)
    assert hash(sent) == hash(FailureSummary(FailureCategory.USER_COMPONENT, 7))
    assert "text" not in repr(sent)


# ------------------------------------------------------------------- status predicates

STATUS_TABLE = {
    # status: (is_active, is_finished, is_terminal, is_unresolved)
    S.STARTING: (True, False, False, True),
    S.STARTED: (True, False, False, True),
    S.STOPPING: (True, False, False, True),
    S.STOPPED: (False, True, False, False),
    S.FAILED: (False, True, False, False),
    S.COMPLETED: (False, True, True, False),
    S.ABANDONED: (False, True, True, False),
    S.UNKNOWN: (False, False, False, True),
}


def test_the_status_table_names_every_status_with_its_durable_code():
    assert set(STATUS_TABLE) == set(BatchStatus)
    assert {status.value for status in BatchStatus} == {
        "STARTING",
        "STARTED",
        "STOPPING",
        "STOPPED",
        "FAILED",
        "COMPLETED",
        "ABANDONED",
        "UNKNOWN",
    }


@pytest.mark.parametrize(("status", "expected"), STATUS_TABLE.items(), ids=str)
def test_status_predicates_follow_the_spec_table(status, expected):
    actual = (status.is_active, status.is_finished, status.is_terminal, status.is_unresolved)
    assert actual == expected


# ---------------------------------------------------------------- failure categories

SEED_FAILURE_CODES = [
    "INVALID_DEFINITION",
    "DUPLICATE_EXECUTION",
    "ILLEGAL_TRANSITION",
    "TRANSIENT_INFRASTRUCTURE",
    "PERMANENT_INFRASTRUCTURE",
    "USER_COMPONENT",
    "CANCELLED",
    "SERIALIZATION",
    "INVARIANT",
    "OPTIMISTIC_CONFLICT",
    "TIMEOUT",
    "UNSUPPORTED_CAPABILITY",
    "UNKNOWN_COMMIT",
    "SHUTDOWN_INCOMPLETE",
    "STALE_RECOVERED",
]


def test_failure_categories_are_exactly_the_fifteen_durable_codes_of_the_seed():
    assert [category.value for category in FailureCategory] == SEED_FAILURE_CODES


@pytest.mark.parametrize("code", SEED_FAILURE_CODES)
def test_a_failure_category_round_trips_through_its_durable_code(code):
    category = FailureCategory(code)
    assert category.value == code
    assert category.telemetry_name == code.lower()


# ----------------------------------------------------------- execution records (1.7)


def test_with_state_replaces_metadata_version_and_update_time_only():
    metadata = ExecutionMetadata.starting(at(100))
    job = JobExecution(
        id=11,
        metadata=metadata,
        version=0,
        updated_at=at(100),
        job_instance_id=10,
        job_name="daily_import",
        attempt=2,
        definition_id=1,
        restart_of_id=9,
    )
    started = dataclasses.replace(
        metadata, status=S.STARTED, timestamps=ExecutionTimestamps(at(100), at(101))
    )
    moved = job.with_state(started, 1, at(101))
    assert (moved.metadata, moved.version, moved.updated_at) == (started, 1, at(101))
    assert (moved.id, moved.attempt, moved.restart_of_id, moved.job_instance_id) == (11, 2, 9, 10)
    assert job.version == 0
