"""The retention service's holds and its audited, idempotent frame, and the
purge request's validation (contract §2.5.9, §2.5.10; contract scenario 8.1).

The service's logic on the in-memory fake (``repo`` is ``tests.fakes``'s, no
database); what the purge deletes is checked on the Django adapter
(test_retention_service.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import (
    DomainError,
    InvalidState,
    JobInstanceNotFound,
    OperationIdConflict,
)
from oxide_batch.domain.retention import (
    AgeBoundTooSmall,
    BatchBoundOutOfRange,
    EmptyStatusSet,
    NonTerminalStatus,
    RetentionAction,
    RetentionRecord,
)
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import retention_service
from tests.fakes import FakeJobRepository, FakeUnitOfWork
from tests.repository.test_retention import DAY, build_instance

ALICE = Actor("alice", 7)
BOB = Actor("bob")


@pytest.fixture
def repo(memory_repo: FakeJobRepository) -> FakeJobRepository:
    """This module's repository: the in-memory fake."""
    return memory_repo


@pytest.fixture
def service(repo):
    return retention_service(repo, min_age=timedelta(0))


def records(
    repo: FakeJobRepository, action: RetentionAction | None = None
) -> list[RetentionRecord]:
    """The retention records (committed), oldest first; of ``action`` when given."""
    found = sorted(repo.tables.retention_records.values(), key=lambda record: record.id)
    return [record for record in found if action is None or record.action is action]


# -- holds ----------------------------------------------------------------------------


def test_placing_a_hold_appends_a_record_in_the_same_transaction(service, repo, clock):
    instance_id = build_instance(repo, clock, "a")
    result = service.place_hold(
        instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="hold-1"
    )
    assert (result.outcome, result.changed, result.operation_id) == (
        Outcome.APPLIED,
        True,
        "hold-1",
    )
    assert result.hold is not None
    assert (result.hold.actor, result.hold.reason_code) == ("alice", "LEGAL_HOLD")
    assert service.hold(instance_id) == result.hold
    (row,) = records(repo, RetentionAction.HOLD)
    assert (row.id, row.job_instance_id, row.actor, row.actor_user_id) == (
        result.record.id,
        instance_id,
        "alice",
        7,
    )
    assert (row.reason_code, row.plan_digest, row.batch_bound) == ("LEGAL_HOLD", None, None)
    document = result.to_json()
    assert set(document) == {"outcome", "changed", "operation_id", "hold", "record"}


def test_a_replayed_hold_returns_the_recorded_outcome_and_acts_once(service, repo, clock):
    instance_id = build_instance(repo, clock, "a")
    first = service.place_hold(
        instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="hold-1"
    )
    clock.advance(timedelta(minutes=1))
    replay = service.place_hold(
        instance_id, actor=BOB, reason_code="LEGAL_HOLD", operation_id="hold-1"
    )
    # The recorded outcome (contract §2.5.9), as operator replays answer it.
    assert (replay.outcome, replay.changed, replay.record) == (
        Outcome.REPLAYED,
        True,
        first.record,
    )
    assert replay.hold == first.hold
    assert service.hold(instance_id) == first.hold  # not placed again by bob
    assert len(records(repo)) == 1


@pytest.mark.parametrize(
    ("instance", "reason"), [("other", "LEGAL_HOLD"), ("same", "AUDIT")], ids=["target", "reason"]
)
def test_the_same_operation_id_with_another_request_is_a_conflict(
    service, repo, clock, instance, reason
):
    first = build_instance(repo, clock, "a")
    other = build_instance(repo, clock, "b")
    service.place_hold(first, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="hold-1")
    target = other if instance == "other" else first
    with pytest.raises(OperationIdConflict) as error:
        service.place_hold(target, actor=ALICE, reason_code=reason, operation_id="hold-1")
    assert error.value.details() == {"action": "HOLD", "operation_id": "hold-1"}
    assert len(records(repo)) == 1
    assert service.hold(other) is None


def test_release_is_audited_and_succeeds_when_nothing_is_held(service, repo, clock):
    instance_id = build_instance(repo, clock, "a")
    service.place_hold(instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    released = service.release_hold(
        instance_id, actor=ALICE, reason_code="RELEASED", operation_id="r1"
    )
    again = service.release_hold(
        instance_id, actor=ALICE, reason_code="RELEASED", operation_id="r2"
    )
    assert (released.outcome, released.changed, released.hold) == (Outcome.APPLIED, True, None)
    assert (again.outcome, again.changed) == (Outcome.APPLIED, False)
    assert [(r.action, r.changed) for r in records(repo)] == [
        ("HOLD", True),
        ("RELEASE_HOLD", True),
        ("RELEASE_HOLD", False),
    ]
    assert service.hold(instance_id) is None


def test_holds_on_a_missing_instance_are_not_found_and_not_audited(service, repo):
    for act in (service.place_hold, service.release_hold):
        with pytest.raises(JobInstanceNotFound):
            act(404, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="missing")
    assert records(repo) == []


@pytest.mark.parametrize(
    ("reason", "operation_id"), [("legal", "op"), ("LEGAL", "op id"), ("LEGAL", "x" * 65)]
)
def test_hold_requests_are_validated_before_anything_happens(
    service, repo, clock, reason, operation_id
):
    instance_id = build_instance(repo, clock, "a")
    with pytest.raises(DomainError):
        service.place_hold(instance_id, actor=ALICE, reason_code=reason, operation_id=operation_id)
    assert records(repo) == []


def test_a_hold_refused_by_a_rule_is_audited_and_replays(service, repo, clock, monkeypatch):
    """No rule refuses a hold today but the frame is shared: a rule refusal of
    any retention action is recorded REJECTED with its code and fields."""
    instance_id = build_instance(repo, clock, "a")

    def refuse(self, job_instance_id, actor, reason_code):
        raise InvalidState(id=job_instance_id, status=BatchStatus.STARTED)

    monkeypatch.setattr(FakeUnitOfWork, "place_instance_hold", refuse)
    with pytest.raises(InvalidState):
        service.place_hold(instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    (record,) = records(repo, RetentionAction.HOLD)
    assert (record.outcome, record.rejection_code, record.job_instance_id) == (
        "REJECTED",
        "invalid_state",
        instance_id,
    )
    assert record.rejection_details == {"id": instance_id, "status": "STARTED"}
    monkeypatch.undo()
    with pytest.raises(InvalidState) as replayed:
        service.place_hold(instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    assert replayed.value.replayed is True
    assert service.hold(instance_id) is None


# -- the purge's request ----------------------------------------------------------------


def test_survey_validates_the_request(service, repo, clock):
    with pytest.raises(BatchBoundOutOfRange):
        service.survey(older_than=DAY, limit=1001)
    with pytest.raises(BatchBoundOutOfRange):
        service.survey(older_than=DAY, limit=0)
    with pytest.raises(EmptyStatusSet):
        service.survey(older_than=DAY, statuses=[])
    with pytest.raises(NonTerminalStatus):
        service.survey(older_than=DAY, statuses=["STARTED"])
    with pytest.raises(TypeError):
        service.survey()


def test_the_minimum_age_comes_from_the_setting(repo, clock):
    service = retention_service(repo)
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(hours=1)):
        with pytest.raises(AgeBoundTooSmall):
            service.survey(older_than=timedelta(minutes=30))
        assert service.survey(older_than=timedelta(hours=1)).candidates == ()
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE="0s"):
        assert service.survey(older_than=timedelta(0)).candidates == ()
