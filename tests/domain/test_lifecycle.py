"""The lifecycle table (contract §2.1) and compare-and-swap transitions
(contract scenarios 0.3, 2.1-2.8, 4.1, 4.3)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.errors import (
    CountExhausted,
    FailedTransitionMissingFailure,
    IllegalTransition,
    InvalidTransitionTime,
    NameTooLong,
    RestartRequiresNewAttempt,
    StaleVersion,
    VersionAhead,
    VersionExhausted,
)
from oxide_batch.domain.lifecycle import compare_and_enrich, compare_and_transition
from tests.domain.builders import CUSTOM_EXIT, FINISHED, MAX_I64, at, failure, metadata_in

S = BatchStatus
ALL_STATUSES = list(BatchStatus)

# contract §2.1, written out literally: the legal in-place targets of each status.
LEGAL = {
    S.STARTING: {S.STARTED, S.STOPPING, S.FAILED, S.UNKNOWN},
    S.STARTED: {S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.UNKNOWN},
    S.STOPPING: {S.STOPPED, S.FAILED, S.UNKNOWN},
    S.STOPPED: {S.ABANDONED},
    S.FAILED: {S.ABANDONED},
    S.UNKNOWN: {S.FAILED, S.ABANDONED},
    S.COMPLETED: set(),
    S.ABANDONED: set(),
}
RESTART_IN_PLACE = {(S.STOPPED, S.STARTING), (S.FAILED, S.STARTING)}
PAIRS = list(itertools.product(ALL_STATUSES, ALL_STATUSES))


def _pair_id(pair: tuple[BatchStatus, BatchStatus]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def _move(target: BatchStatus, seconds: float = 103, **kwargs) -> LifecycleTransition:
    """A transition at ``seconds``; a FAILED target carries failure 42 unless told."""
    if target is S.FAILED and "failure" not in kwargs:
        kwargs["failure"] = failure(42)
    return LifecycleTransition(target, at=at(seconds), **kwargs)


def test_the_literal_table_covers_all_eight_statuses_and_sixteen_legal_pairs():
    assert set(LEGAL) == set(ALL_STATUSES)
    assert len(ALL_STATUSES) == 8
    assert sum(len(targets) for targets in LEGAL.values()) == 16
    assert len(PAIRS) == 64


# ------------------------------------------------------------------ every cell (2.1)


@pytest.mark.parametrize("pair", PAIRS, ids=[_pair_id(pair) for pair in PAIRS])
def test_every_status_pair_follows_the_lifecycle_table(pair):
    source, target = pair
    metadata = metadata_in(source)
    snapshot = dataclasses.replace(metadata)
    transition = _move(target)

    if target in LEGAL[source]:
        updated, version = compare_and_transition(metadata, 0, 0, transition)
        assert version == 1
        assert updated.status is target
        assert updated.exit_code == CUSTOM_EXIT
    elif pair in RESTART_IN_PLACE:
        with pytest.raises(RestartRequiresNewAttempt) as caught:
            compare_and_transition(metadata, 0, 0, transition)
        assert caught.value.from_status is source
    else:
        with pytest.raises(IllegalTransition) as caught:
            compare_and_transition(metadata, 0, 0, transition)
        assert (caught.value.from_status, caught.value.to_status) == (source, target)
        assert type(caught.value) is IllegalTransition
    assert metadata == snapshot


# --------------------------------------------------------------------- check order


def test_a_stale_version_is_reported_before_an_illegal_pair():
    with pytest.raises(StaleVersion) as caught:
        compare_and_transition(metadata_in(S.COMPLETED), 1, 0, _move(S.STARTED))
    assert (caught.value.expected, caught.value.actual) == (0, 1)


def test_a_version_ahead_is_reported_before_an_illegal_pair_and_is_no_stale_version():
    with pytest.raises(VersionAhead) as caught:
        compare_and_transition(metadata_in(S.COMPLETED), 0, 1, _move(S.STARTED))
    assert (caught.value.expected, caught.value.actual) == (1, 0)
    assert not isinstance(caught.value, StaleVersion)


def test_a_stale_version_is_reported_before_a_restart_in_place():
    with pytest.raises(StaleVersion):
        compare_and_transition(metadata_in(S.FAILED), 3, 2, _move(S.STARTING))


@pytest.mark.parametrize("source", [S.STOPPED, S.FAILED])
def test_a_restart_in_place_is_reported_as_restart_not_as_illegal(source):
    with pytest.raises(RestartRequiresNewAttempt):
        compare_and_transition(metadata_in(source), 0, 0, _move(S.STARTING))


def test_an_illegal_pair_is_reported_before_a_missing_failure():
    with pytest.raises(IllegalTransition):
        compare_and_transition(metadata_in(S.COMPLETED), 0, 0, _move(S.FAILED, failure=None))


# The seed's order (``transition_execution`` → ``ExecutionMetadata::transition`` →
# ``ExecutionMetadata::new`` → ``ExecutionVersion::next``): version, pair, instant,
# terminal rollback, missing failure, version exhaustion. Each case below breaks
# two neighbouring rules at once and expects the earlier one.
MAX_COUNTS = ExecutionCounts(rolled_back=MAX_I64)


@pytest.mark.parametrize("runtime_job", [False, True], ids=["full-table", "runtime-job"])
@pytest.mark.parametrize(
    ("source", "version", "transition", "counts", "expected"),
    [
        pytest.param(
            S.STARTED,
            0,
            _move(S.FAILED, 100.5, failure=None),
            None,
            InvalidTransitionTime,
            id="time-before-missing-failure",
        ),
        pytest.param(
            S.STARTING,
            0,
            _move(S.FAILED, 99, failure=None),
            None,
            InvalidTransitionTime,
            id="creation-time-before-missing-failure",
        ),
        pytest.param(
            S.STARTED,
            0,
            _move(S.FAILED, 100.5, terminal_rollback=True),
            MAX_COUNTS,
            InvalidTransitionTime,
            id="time-before-count",
        ),
        pytest.param(
            S.STARTED,
            0,
            _move(S.FAILED, failure=None, terminal_rollback=True),
            MAX_COUNTS,
            CountExhausted,
            id="count-before-missing-failure",
        ),
        pytest.param(
            S.STARTED,
            MAX_I64,
            _move(S.FAILED, failure=None),
            None,
            FailedTransitionMissingFailure,
            id="missing-failure-before-version-exhaustion",
        ),
        pytest.param(
            S.STARTED,
            MAX_I64,
            _move(S.COMPLETED, 50),
            None,
            InvalidTransitionTime,
            id="time-before-version-exhaustion",
        ),
        pytest.param(
            S.COMPLETED,
            0,
            _move(S.FAILED, 50, failure=None),
            None,
            IllegalTransition,
            id="illegal-pair-before-time-and-missing-failure",
        ),
        pytest.param(
            S.FAILED,
            0,
            _move(S.STARTING, 50),
            None,
            RestartRequiresNewAttempt,
            id="restart-in-place-before-time",
        ),
    ],
)
def test_of_two_broken_rules_the_seeds_first_check_wins(
    source, version, transition, counts, expected, runtime_job
):
    metadata = metadata_in(source, counts=counts)
    with pytest.raises(expected):
        compare_and_transition(metadata, version, version, transition, runtime_job=runtime_job)


# ----------------------------------------------------------------- failed transitions


@pytest.mark.parametrize("source", [S.STARTING, S.STARTED, S.STOPPING, S.UNKNOWN])
def test_a_transition_to_failed_without_any_failure_summary_is_refused(source):
    with pytest.raises(FailedTransitionMissingFailure):
        compare_and_transition(metadata_in(source), 0, 0, _move(S.FAILED, failure=None))


def test_a_transition_to_failed_records_the_failure_it_carries():
    updated, _ = compare_and_transition(metadata_in(S.STARTED), 0, 0, _move(S.FAILED))
    assert updated.failure == failure(42)


def test_a_failure_summary_once_set_is_carried_forward_to_abandoned():
    updated, _ = compare_and_transition(metadata_in(S.FAILED), 0, 0, _move(S.ABANDONED))
    assert updated.failure == failure(41)


def test_a_failure_reported_with_unknown_is_carried_forward():
    unknown, version = compare_and_transition(
        metadata_in(S.STARTED), 0, 0, _move(S.UNKNOWN, failure=failure(7))
    )
    abandoned, _ = compare_and_transition(unknown, version, version, _move(S.ABANDONED, 104))
    assert unknown.failure == failure(7)
    assert abandoned.failure == failure(7)


# ---------------------------------------------------------------------- timestamps


def test_a_transition_to_started_sets_started_at_to_the_transition_instant():
    updated, _ = compare_and_transition(metadata_in(S.STARTING), 0, 0, _move(S.STARTED, 101))
    assert updated.timestamps.started_at == at(101)
    assert updated.timestamps.created_at == at(100)
    assert updated.timestamps.ended_at is None


@pytest.mark.parametrize("target", [S.STOPPED, S.FAILED, S.COMPLETED])
def test_the_first_finished_status_sets_ended_at(target):
    updated, _ = compare_and_transition(metadata_in(S.STARTED), 0, 0, _move(target, 103))
    assert updated.timestamps.ended_at == at(103)
    assert updated.timestamps.started_at == at(101)


@pytest.mark.parametrize("source", [S.FAILED, S.STOPPED])
def test_a_finished_to_abandoned_move_keeps_the_first_end_time(source):
    updated, _ = compare_and_transition(metadata_in(source), 0, 0, _move(S.ABANDONED, 150))
    assert updated.timestamps.ended_at == at(102)


@pytest.mark.parametrize("source", [S.STARTING, S.STARTED, S.STOPPING])
def test_a_transition_to_unknown_leaves_ended_at_empty(source):
    updated, _ = compare_and_transition(metadata_in(source), 0, 0, _move(S.UNKNOWN))
    assert updated.status is S.UNKNOWN
    assert updated.timestamps.ended_at is None


def test_a_transition_to_stopping_keeps_started_at_and_no_end():
    updated, _ = compare_and_transition(metadata_in(S.STARTED), 0, 0, _move(S.STOPPING))
    assert (updated.timestamps.started_at, updated.timestamps.ended_at) == (at(101), None)


@pytest.mark.parametrize(
    ("source", "target", "seconds"),
    [
        pytest.param(S.STARTING, S.STARTED, 99, id="before-created"),
        pytest.param(S.STARTING, S.FAILED, 99.999, id="failed-before-created"),
        pytest.param(S.STARTED, S.COMPLETED, 100.5, id="before-started"),
        pytest.param(S.STOPPING, S.UNKNOWN, 100, id="unknown-before-started"),
        pytest.param(S.FAILED, S.ABANDONED, 101.5, id="before-ended"),
        pytest.param(S.STOPPED, S.ABANDONED, 101.5, id="stopped-before-ended"),
    ],
)
def test_a_transition_earlier_than_start_creation_or_end_is_refused(source, target, seconds):
    metadata = metadata_in(source)
    with pytest.raises(InvalidTransitionTime):
        compare_and_transition(metadata, 0, 0, _move(target, seconds))
    assert metadata == metadata_in(source)


@pytest.mark.parametrize(
    ("source", "target", "seconds"),
    [
        pytest.param(S.STARTING, S.STARTED, 100, id="at-created"),
        pytest.param(S.STARTED, S.COMPLETED, 101, id="at-started"),
        pytest.param(S.FAILED, S.ABANDONED, 102, id="at-ended"),
    ],
)
def test_a_transition_at_exactly_the_floor_instant_is_accepted(source, target, seconds):
    updated, version = compare_and_transition(metadata_in(source), 0, 0, _move(target, seconds))
    assert (updated.status, version) == (target, 1)


def test_an_unstamped_transition_cannot_be_applied():
    with pytest.raises(ValueError, match="stamped"):
        compare_and_transition(metadata_in(S.STARTED), 0, 0, LifecycleTransition(S.COMPLETED))


def test_stamping_fills_only_a_missing_instant():
    assert LifecycleTransition(S.STARTED).stamped(at(5)).at == at(5)
    assert LifecycleTransition(S.STARTED, at=at(3)).stamped(at(5)).at == at(3)


# ---------------------------------------------------------------- counts, versions


def test_a_terminal_rollback_adds_one_to_rolled_back_only():
    counts = ExecutionCounts(10, 9, 8, 1, 2, 3)
    metadata = metadata_in(S.STARTED, counts=counts)
    updated, _ = compare_and_transition(metadata, 0, 0, _move(S.FAILED, terminal_rollback=True))
    assert updated.counts == ExecutionCounts(10, 9, 8, 1, 2, 4)


def test_a_transition_without_terminal_rollback_keeps_the_counts():
    counts = ExecutionCounts(10, 9, 8, 1, 2, 3)
    updated, _ = compare_and_transition(
        metadata_in(S.STARTED, counts=counts), 0, 0, _move(S.COMPLETED)
    )
    assert updated.counts == counts


def test_a_terminal_rollback_at_the_count_limit_is_count_exhausted():
    metadata = metadata_in(S.STARTED, counts=ExecutionCounts(rolled_back=MAX_I64))
    with pytest.raises(CountExhausted):
        compare_and_transition(metadata, 0, 0, _move(S.FAILED, terminal_rollback=True))


def test_a_legal_transition_at_the_last_version_is_version_exhausted():
    with pytest.raises(VersionExhausted) as caught:
        compare_and_transition(metadata_in(S.STARTED), MAX_I64, MAX_I64, _move(S.COMPLETED))
    assert caught.value.version == MAX_I64


def test_a_legal_transition_just_below_the_last_version_reaches_it():
    _, version = compare_and_transition(
        metadata_in(S.STARTED), MAX_I64 - 1, MAX_I64 - 1, _move(S.COMPLETED)
    )
    assert version == MAX_I64


def test_a_stale_transition_carries_expected_and_actual_versions():
    winner, version = compare_and_transition(metadata_in(S.STARTING), 0, 0, _move(S.STARTED))
    with pytest.raises(StaleVersion) as caught:
        compare_and_transition(winner, version, 0, _move(S.COMPLETED, 104))
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert winner.status is S.STARTED


# ------------------------------------------------------------------ enrichment (4.x)


def test_exit_enrichment_changes_only_the_exit_code_and_bumps_the_version():
    metadata = metadata_in(S.STARTED, counts=ExecutionCounts(1, 2, 3, 4, 5, 6))
    enriched, version = compare_and_enrich(metadata, 0, 0, "COMPLETED_WITH_WARNINGS")
    assert version == 1
    assert enriched.exit_code == "COMPLETED_WITH_WARNINGS"
    assert dataclasses.replace(enriched, exit_code=metadata.exit_code) == metadata


@pytest.mark.parametrize("status", ALL_STATUSES)
def test_exit_enrichment_never_changes_the_batch_status(status):
    enriched, version = compare_and_enrich(metadata_in(status), 4, 4, "PRIORITY")
    assert (enriched.status, enriched.exit_code, version) == (status, "PRIORITY", 5)


def test_exit_enrichment_with_a_stale_version_is_refused():
    with pytest.raises(StaleVersion) as caught:
        compare_and_enrich(metadata_in(S.STARTED), 1, 0, "PRIORITY")
    assert (caught.value.expected, caught.value.actual) == (0, 1)


def test_exit_enrichment_checks_the_version_before_the_exit_code():
    with pytest.raises(StaleVersion):
        compare_and_enrich(metadata_in(S.STARTED), 1, 0, "X" * 65)


def test_exit_enrichment_refuses_an_exit_code_over_64_bytes():
    with pytest.raises(NameTooLong) as caught:
        compare_and_enrich(metadata_in(S.STARTED), 0, 0, "X" * 65)
    assert caught.value.max_bytes == 64


def test_exit_enrichment_accepts_an_exit_code_of_exactly_64_bytes():
    enriched, _ = compare_and_enrich(metadata_in(S.STARTED), 0, 0, "X" * 64)
    assert enriched.exit_code == "X" * 64


def test_exit_enrichment_at_the_last_version_is_version_exhausted():
    with pytest.raises(VersionExhausted):
        compare_and_enrich(metadata_in(S.STARTED), MAX_I64, MAX_I64, "PRIORITY")


@pytest.mark.parametrize("target", [S.STOPPED, S.FAILED, S.COMPLETED])
def test_a_transition_keeps_the_exit_code_unknown_of_a_new_execution(target):
    metadata = metadata_in(S.STARTED, exit_code="UNKNOWN")
    updated, _ = compare_and_transition(metadata, 0, 0, _move(target))
    assert updated.exit_code == "UNKNOWN"


# -------------------------------------------------------- representative paths (2.2)

PATHS = [
    (S.STARTED, S.STOPPING, S.STOPPED),
    (S.STARTED, S.COMPLETED),
    (S.FAILED, S.ABANDONED),
    (S.UNKNOWN, S.FAILED, S.ABANDONED),
    (S.STOPPING, S.UNKNOWN, S.ABANDONED),
]


def _run(path):
    metadata, version = metadata_in(S.STARTING), 0
    for offset, target in enumerate(path, start=1):
        metadata, new_version = compare_and_transition(
            metadata, version, version, _move(target, 100 + offset)
        )
        assert new_version == version + 1
        assert metadata.status is target
        version = new_version
    return metadata, version


@pytest.mark.parametrize("path", PATHS, ids=lambda path: "-".join(s.value for s in path))
def test_each_step_of_a_representative_path_adds_exactly_one_to_the_version(path):
    metadata, version = _run(path)
    assert version == len(path)
    assert metadata.status is path[-1]
    assert metadata.exit_code == CUSTOM_EXIT


TERMINAL_PATHS = [path for path in PATHS if path[-1] in {S.COMPLETED, S.ABANDONED}]


@pytest.mark.parametrize(
    ("path", "target"),
    list(itertools.product(TERMINAL_PATHS, ALL_STATUSES)),
    ids=lambda value: value.value if isinstance(value, BatchStatus) else "-".join(value),
)
def test_a_path_ending_completed_or_abandoned_is_frozen_for_every_target(path, target):
    metadata, version = _run(path)
    with pytest.raises(IllegalTransition) as caught:
        compare_and_transition(metadata, version, version, _move(target, 110))
    assert (caught.value.from_status, caught.value.to_status) == (path[-1], target)


def test_stopped_is_not_terminal_it_can_still_be_abandoned_or_restarted():
    metadata, version = _run((S.STARTED, S.STOPPING, S.STOPPED))
    assert metadata.status in FINISHED
    with pytest.raises(RestartRequiresNewAttempt):
        compare_and_transition(metadata, version, version, _move(S.STARTING, 110))
    abandoned, new_version = compare_and_transition(
        metadata, version, version, _move(S.ABANDONED, 110)
    )
    assert (abandoned.status, new_version) == (S.ABANDONED, version + 1)


# -- the runtime's restriction on job executions (contract §2.1) ---------------------

RUNTIME_REFUSED = [
    (S.STOPPED, S.ABANDONED),
    (S.FAILED, S.ABANDONED),
    (S.UNKNOWN, S.ABANDONED),
    (S.UNKNOWN, S.FAILED),
]


@pytest.mark.parametrize(("source", "target"), RUNTIME_REFUSED)
def test_a_runtime_may_not_abandon_or_leave_unknown(source, target):
    metadata = metadata_in(source)
    transition = LifecycleTransition(target, failure=failure(42), at=at(103))
    assert compare_and_transition(metadata, 0, 0, transition)  # the table allows it
    with pytest.raises(IllegalTransition) as error:
        compare_and_transition(metadata, 0, 0, transition, runtime_job=True)
    assert (error.value.from_status, error.value.to_status) == (source, target)


def test_the_runtime_restriction_comes_after_the_version_check():
    metadata = metadata_in(S.UNKNOWN)
    with pytest.raises(StaleVersion):
        compare_and_transition(
            metadata, 1, 0, LifecycleTransition(S.ABANDONED, at=at(103)), runtime_job=True
        )


@pytest.mark.parametrize(
    "transition",
    [
        pytest.param(LifecycleTransition(S.FAILED, at=at(103)), id="missing-failure"),
        pytest.param(LifecycleTransition(S.FAILED, failure=failure(42), at=at(99)), id="time"),
        pytest.param(LifecycleTransition(S.FAILED, at=at(99)), id="time-and-missing-failure"),
        pytest.param(
            LifecycleTransition(S.ABANDONED, at=at(99), terminal_rollback=True),
            id="time-and-count",
        ),
    ],
)
def test_the_runtime_restriction_is_the_pair_check_before_time_count_and_failure(transition):
    """The runtime's refusal is the pair check: it comes before the instant, the
    count and the failure, so UNKNOWN → FAILED without a failure is
    ``illegal_transition``, never ``failed_transition_missing_failure``."""
    metadata = metadata_in(S.UNKNOWN, counts=MAX_COUNTS)
    with pytest.raises(IllegalTransition) as error:
        compare_and_transition(metadata, 0, 0, transition, runtime_job=True)
    assert (error.value.from_status, error.value.to_status) == (S.UNKNOWN, transition.target)


@pytest.mark.parametrize("source", [S.STOPPED, S.FAILED])
def test_a_runtime_restart_in_place_is_still_restart_requires_new_attempt(source):
    with pytest.raises(RestartRequiresNewAttempt):
        compare_and_transition(metadata_in(source), 0, 0, _move(S.STARTING), runtime_job=True)


@pytest.mark.parametrize("pair", PAIRS, ids=[_pair_id(pair) for pair in PAIRS])
def test_a_runtime_job_transition_follows_the_table_minus_the_operator_decisions(pair):
    source, target = pair
    transition = _move(target)
    runtime_legal = (
        target in LEGAL[source] and target is not S.ABANDONED and source is not S.UNKNOWN
    )
    if runtime_legal:
        updated, _ = compare_and_transition(metadata_in(source), 0, 0, transition, runtime_job=True)
        assert updated.status is target
    elif pair in RESTART_IN_PLACE:
        with pytest.raises(RestartRequiresNewAttempt):
            compare_and_transition(metadata_in(source), 0, 0, transition, runtime_job=True)
    else:
        with pytest.raises(IllegalTransition):
            compare_and_transition(metadata_in(source), 0, 0, transition, runtime_job=True)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (S.STARTING, S.STARTED),
        (S.STARTED, S.FAILED),
        (S.STARTED, S.UNKNOWN),
        (S.STOPPING, S.STOPPED),
    ],
)
def test_other_legal_moves_are_open_to_a_runtime(source, target):
    metadata = metadata_in(source)
    transition = LifecycleTransition(target, failure=failure(42), at=at(103))
    updated, version = compare_and_transition(metadata, 0, 0, transition, runtime_job=True)
    assert (updated.status, version) == (target, 1)


def test_an_operator_abandons_only_what_stopped_or_failed():
    """``ABANDONABLE`` lives with the table it is read from (issue 27): the
    sources of ABANDONED but UNKNOWN, which only a recovery may abandon."""
    from oxide_batch.domain.lifecycle import ABANDONABLE, LEGAL_TRANSITIONS

    assert frozenset({S.STOPPED, S.FAILED}) == ABANDONABLE
    assert S.ABANDONED in LEGAL_TRANSITIONS[S.UNKNOWN]
