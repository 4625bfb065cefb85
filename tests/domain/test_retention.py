"""Retention values without a database: criteria bounds, the plan digest and its
JSON shape, and the full-eligibility re-check (contract §2.5.11; scenario 9.8)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import NameHasSurroundingWhitespace, ZeroIdentifier
from oxide_batch.domain.retention import (
    DEFAULT_PURGE_STATUSES,
    AgeBoundTooSmall,
    BatchBoundOutOfRange,
    EmptyStatusSet,
    InstanceState,
    MalformedPurgePlan,
    NonTerminalStatus,
    ObservedExecution,
    PurgeCandidate,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    format_instant,
    purge_statuses,
    stale_candidates,
)

S = BatchStatus
CUTOFF = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def plan(*candidates: PurgeCandidate, **criteria) -> PurgePlan:
    return PurgePlan(
        criteria=PurgeCriteria(CUTOFF, **criteria),
        candidates=candidates,
        counts=PurgeCounts(job_executions=1, job_instances=len(candidates)),
        held_excluded=0,
    )


def candidate(instance_id: int = 1, *versions: tuple[int, int]) -> PurgeCandidate:
    executions = versions or ((10, 3),)
    return PurgeCandidate(instance_id, tuple(ObservedExecution(i, v) for i, v in executions))


@pytest.mark.parametrize("bound", [1, 1000])
def test_a_batch_bound_of_1_to_1000_is_accepted(bound):
    assert PurgeCriteria(CUTOFF, bound=bound).bound == bound


@pytest.mark.parametrize("bound", [0, 1001, -1])
def test_a_batch_bound_outside_1_to_1000_is_refused(bound):
    with pytest.raises(BatchBoundOutOfRange) as error:
        PurgeCriteria(CUTOFF, bound=bound)
    assert error.value.bound == bound


def test_statuses_default_to_the_four_finished_ones_and_must_be_finished():
    assert purge_statuses(None) == DEFAULT_PURGE_STATUSES
    assert purge_statuses(["COMPLETED"]) == {S.COMPLETED}
    with pytest.raises(EmptyStatusSet):
        purge_statuses([])
    for status in ("STARTED", "UNKNOWN", "bogus"):
        with pytest.raises(NonTerminalStatus):
            purge_statuses([status])


def test_the_cutoff_is_kept_in_milliseconds_and_checked_against_the_minimum_age():
    criteria = PurgeCriteria(CUTOFF)
    assert criteria.cutoff.microsecond == 123000
    assert format_instant(criteria.cutoff) == "2026-01-01T12:00:00.123Z"
    criteria.check_age(CUTOFF + timedelta(hours=1), timedelta(hours=1))
    with pytest.raises(AgeBoundTooSmall) as error:
        criteria.check_age(CUTOFF + timedelta(minutes=59), timedelta(hours=1))
    assert error.value.minimum_seconds == 3600
    criteria.check_age(CUTOFF, timedelta(0))


def test_criteria_validate_the_job_name():
    with pytest.raises(NameHasSurroundingWhitespace):
        PurgeCriteria(CUTOFF, job_name=" job")


def test_the_digest_covers_criteria_and_candidates_but_not_the_counts():
    base = plan(candidate(1), candidate(2, (20, 0), (21, 5)))
    assert base.plan_digest == base.computed_digest()
    assert len(base.plan_digest) == 64
    same = dataclasses.replace(base, counts=PurgeCounts(), held_excluded=9, plan_digest="")
    assert same.plan_digest == base.plan_digest
    variants = [
        plan(candidate(1), candidate(2, (20, 0), (21, 6))),
        plan(candidate(1), candidate(2, (20, 0))),
        plan(candidate(2, (20, 0), (21, 5)), candidate(1)),
        plan(candidate(1), candidate(2, (20, 0), (21, 5)), job_name="job"),
        plan(candidate(1), candidate(2, (20, 0), (21, 5)), bound=2),
        plan(candidate(1), candidate(2, (20, 0), (21, 5)), statuses=frozenset({S.FAILED})),
    ]
    assert len({variant.plan_digest for variant in variants} | {base.plan_digest}) == 7


def test_a_plan_round_trips_through_its_survey_shape():
    original = plan(candidate(1), candidate(2, (20, 0), (21, 5)), job_name="job")
    document = original.to_json()
    assert document["candidates"][1] == {
        "instance_id": 2,
        "executions": [{"id": 20, "version": 0}, {"id": 21, "version": 5}],
    }
    assert document["statuses"] == ["STOPPED", "FAILED", "COMPLETED", "ABANDONED"]
    assert PurgePlan.from_json(document) == original


def test_an_edited_plan_keeps_the_digest_it_was_given():
    document = plan(candidate(1)).to_json()
    document["candidates"][0]["executions"][0]["version"] = 4
    edited = PurgePlan.from_json(document)
    assert edited.plan_digest != edited.computed_digest()


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("candidates"),
        lambda d: d.update(bound="10"),
        lambda d: d.update(bound=True),
        lambda d: d.update(cutoff="yesterday"),
        lambda d: d.update(cutoff="2026-01-01T00:00:00"),
        lambda d: d.update(plan_digest="XYZ"),
        lambda d: d["candidates"][0].update(executions=[]),
        lambda d: d["candidates"].append(d["candidates"][0]),
        lambda d: d.update(candidates=[{"instance_id": 1}]),
        lambda d: d.update(candidates="all"),
    ],
)
def test_a_malformed_plan_is_an_input_error(edit):
    document = plan(candidate(1)).to_json()
    edit(document)
    with pytest.raises((MalformedPurgePlan, ZeroIdentifier)):
        PurgePlan.from_json(document)


SURVEYED_CUTOFF = "2026-01-01T12:00:00.123Z"  # what format_instant wrote


@pytest.mark.parametrize(
    "cutoff",
    [
        SURVEYED_CUTOFF + "\x00",
        SURVEYED_CUTOFF + "\x00garbage",
        "2026-01-01T12:00:00\x00.123Z",
        "2026-01-01T12:00:00.123\x00Z",
        "\x002026-01-01T12:00:00.123Z",
        SURVEYED_CUTOFF + "\n",
        SURVEYED_CUTOFF + "\x1f",
        SURVEYED_CUTOFF + "\x7f",
        "\t" + SURVEYED_CUTOFF,
        SURVEYED_CUTOFF + " ",
        SURVEYED_CUTOFF + "garbage",
        "2026-01-01 12:00:00.123Z",  # a space for the T
        "2026-01-01t12:00:00.123z",
        "20260101T120000.123Z",  # the basic format
        "2026-01-01T12:00:00.123",  # no offset
        "2026-01-01T12:00Z",  # no seconds
        "2026-01-01T12:00:00.Z",
        "2026-01-01T12:00:00.1234567890Z",  # ten fraction digits
        "2026-01-01T12:00:00.123+0100",
        "2026-01-01T12:00:00.123+01",
        "２０２６-01-01T12:00:00.123Z",  # fullwidth digits
        "2026-13-01T12:00:00.123Z",  # no month 13
        "2026-02-30T12:00:00.123Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T12:00:60.000Z",
        "2026-01-01T12:00:00.123+24:00",
        "2026-01-01",
        "",
    ],
)
def test_a_cutoff_that_is_not_exactly_an_rfc_3339_instant_is_malformed(cutoff):
    document = plan(candidate(1)).to_json()
    document["cutoff"] = cutoff
    with pytest.raises(MalformedPurgePlan) as refused:
        PurgePlan.from_json(document)
    assert "cutoff" in refused.value.reason


@pytest.mark.parametrize(
    "cutoff",
    [
        SURVEYED_CUTOFF,
        "2026-01-01T12:00:00.123456789Z",
        "2026-01-01T13:00:00.123+01:00",
        "2026-01-01T07:00:00.123-05:00",
        "2026-01-01T12:00:00.123+00:00",
    ],
)
def test_the_plans_own_instant_and_its_rfc_3339_equivalents_are_read(cutoff):
    original = plan(candidate(1))
    assert original.to_json()["cutoff"] == SURVEYED_CUTOFF
    document = original.to_json()
    document["cutoff"] = cutoff
    read = PurgePlan.from_json(document)
    assert read == original
    assert read.criteria.cutoff == datetime(2026, 1, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert read.computed_digest() == original.plan_digest
    assert PurgePlan.from_json(read.to_json()).to_json() == original.to_json()


def test_more_candidates_than_the_bound_is_malformed():
    with pytest.raises(MalformedPurgePlan):
        plan(candidate(1), candidate(2, (20, 0)), bound=1)


ENDED, NOT_ENDED = True, False  # ended before the cutoff, or not


def state(*executions, held=False, job="job") -> InstanceState:
    return InstanceState(job, held, list(executions))


@pytest.mark.parametrize(
    ("observed", "stale"),
    [
        (state((10, 3, S.COMPLETED, ENDED)), False),
        (None, True),
        (state((10, 3, S.COMPLETED, ENDED), held=True), True),
        (state((10, 3, S.COMPLETED, ENDED), job="other"), True),
        (state((10, 4, S.COMPLETED, ENDED)), True),
        (state((10, 3, S.COMPLETED, ENDED), (11, 0, S.STARTING, NOT_ENDED)), True),
        (state((10, 3, S.UNKNOWN, NOT_ENDED)), True),
        (state((10, 3, S.COMPLETED, NOT_ENDED)), True),
        (state(), True),
    ],
    ids=[
        "unchanged",
        "gone",
        "held",
        "other-job",
        "new-version",
        "restarted",
        "unknown",
        "ended-at-cutoff",
        "no-executions",
    ],
)
def test_apply_recheck_finds_every_change(observed, stale):
    planned = plan(candidate(1), job_name="job")
    found = {} if observed is None else {1: observed}
    assert stale_candidates(planned, found) == ([1] if stale else [])


def test_the_recheck_applies_the_chosen_statuses():
    planned = plan(candidate(1), statuses=frozenset({S.COMPLETED}))
    assert stale_candidates(planned, {1: state((10, 3, S.FAILED, ENDED))}) == [1]
