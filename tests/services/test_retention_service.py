"""The retention service: audited, idempotent purge batches, the batched purge loop
and audit pruning (contract §2.5.10–§2.5.12; contract scenarios 8.1, 9.1–9.7).

On the Django adapter (``repo``, a database): what they check is what the purge
deletes and the audit keeps, row by row; holds and the audited frame's logic are
checked on the in-memory fake (test_retention_holds.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import (
    OperationIdConflict,
    RetentionPlanStale,
)
from oxide_batch.domain.retention import (
    AgeBoundTooSmall,
    BatchBoundOutOfRange,
    PurgeCounts,
    PurgeCriteria,
    RetentionAction,
)
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import retention_service
from oxide_batch.services.retention import PurgeRun
from tests.conftest import accounts_fixture
from tests.repository.test_retention import (
    DAY,
    _audit_row,
    audit_rows,
    build_instance,
    forged,
    rows_of,
)

pytestmark = pytest.mark.django_db
S = BatchStatus
ALICE = Actor("alice", 7)
_accounts = accounts_fixture(ALICE)
BOB = Actor("bob")


@pytest.fixture
def service(repo):
    return retention_service(repo, min_age=timedelta(0))


def records(action: RetentionAction | None = None) -> list[models.RetentionRecord]:
    rows = models.RetentionRecord.objects.order_by("id")
    return list(rows.filter(action=action.value) if action else rows)


# -- holds and the purge ----------------------------------------------------------------


def test_a_held_instance_survives_the_purge(service, repo, clock):
    """Scenario 8.1."""
    held = build_instance(repo, clock, "held")
    free = build_instance(repo, clock, "free")
    service.place_hold(held, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    assert (plan.instance_ids, plan.held_excluded) == ([free], 1)
    service.apply(plan, actor=ALICE, operation_id="purge-1")
    assert rows_of(held)["job_instances"] == 1
    assert rows_of(free)["job_instances"] == 0


# -- survey and apply -------------------------------------------------------------------


def test_apply_records_one_purge_row_with_digest_bound_and_counts(service, repo, clock):
    """Scenario 9.3."""
    ids = [build_instance(repo, clock, f"r{i}", (S.COMPLETED,)) for i in range(2)]
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY, limit=10)
    result = service.apply(plan, actor=ALICE, operation_id="purge-apply")
    assert result.outcome is Outcome.APPLIED
    assert result.counts == plan.counts == PurgeCounts(0, 0, 4, 2, 2)
    (row,) = records(RetentionAction.APPLY_PURGE)
    assert (row.plan_digest, row.batch_bound, row.reason_code) == (
        plan.plan_digest,
        10,
        "SCHEDULED_PURGE",
    )
    assert (row.deleted_job_instances, row.deleted_job_executions, row.job_instance_id) == (
        2,
        2,
        None,
    )
    assert all(rows_of(i)["job_instances"] == 0 for i in ids)
    assert set(result.to_json()) == {"outcome", "changed", "operation_id", "counts", "record"}


def test_an_empty_plan_applies_with_zero_counts_and_is_recorded(service):
    plan = service.survey(older_than=DAY)
    result = service.apply(plan, actor=ALICE, operation_id="empty")
    assert (result.outcome, result.changed, result.counts) == (
        Outcome.APPLIED,
        False,
        PurgeCounts(),
    )
    assert len(records(RetentionAction.APPLY_PURGE)) == 1


def test_a_replayed_purge_deletes_nothing_more(service, repo, clock):
    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    first = service.apply(plan, actor=ALICE, operation_id="purge-1")
    build_instance(repo, clock, "b")
    replay = service.apply(plan, actor=BOB, operation_id="purge-1")
    assert (replay.outcome, replay.counts, replay.record) == (
        Outcome.REPLAYED,
        first.counts,
        first.record,
    )
    with pytest.raises(OperationIdConflict):
        service.apply(plan, actor=ALICE, reason_code="OTHER", operation_id="purge-1")
    assert len(records()) == 1


def test_a_stale_plan_is_refused_audited_and_replays_as_the_same_problem(service, repo, clock):
    """Scenario 9.2, with contract §2.5.11: the refusal leaves a REJECTED record whose
    rejection code is the problem's code, and a replay answers the same problem."""
    instance_id = build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    service.place_hold(instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    before = rows_of(instance_id)
    with pytest.raises(RetentionPlanStale) as refused:
        service.apply(plan, actor=ALICE, operation_id="stale")
    assert not getattr(refused.value, "replayed", False)
    assert rows_of(instance_id) == before
    (rejected,) = records(RetentionAction.APPLY_PURGE)
    assert (rejected.operation_id, rejected.outcome, rejected.rejection_code) == (
        "stale",
        "REJECTED",
        "retention_plan_stale",
    )
    assert (rejected.plan_digest, rejected.changed) == (plan.plan_digest, False)
    assert rejected.deleted_job_instances == 0
    with pytest.raises(RetentionPlanStale) as replayed:
        service.apply(plan, actor=ALICE, operation_id="stale")
    assert replayed.value.replayed is True
    assert len(records(RetentionAction.APPLY_PURGE)) == 1
    # The same operation id with another request is a conflict, not audited.
    fresh = service.survey(older_than=DAY, statuses=["COMPLETED"])
    with pytest.raises(OperationIdConflict):
        service.apply(fresh, actor=ALICE, operation_id="stale")
    edited = forged(plan, plan.candidates[:0], recompute=False)
    with pytest.raises(RetentionPlanStale):
        service.apply(edited, actor=ALICE, operation_id="x")
    assert records(RetentionAction.APPLY_PURGE)[-1].rejection_code == "retention_plan_stale"


def test_the_audit_rows_outlive_the_purge(service, repo, clock):
    instance_id = build_instance(repo, clock, "a")
    service.place_hold(instance_id, actor=ALICE, reason_code="LEGAL_HOLD", operation_id="h")
    service.release_hold(instance_id, actor=ALICE, reason_code="RELEASED", operation_id="r")
    before = audit_rows()
    clock.advance(2 * DAY)
    service.apply(service.survey(older_than=DAY), actor=ALICE, operation_id="p")
    assert rows_of(instance_id)["job_instances"] == 0
    after = audit_rows()
    assert after["RetentionRecord"] == before["RetentionRecord"] + 1
    assert models.RetentionRecord.objects.filter(job_instance_id=instance_id).count() == 2


def test_apply_statements_do_not_grow_with_the_batch(service, repo, clock):
    def statements(size: int) -> int:
        for index in range(size):
            build_instance(repo, clock, f"{size}-{index}", (S.COMPLETED,), steps=1)
        clock.advance(2 * DAY)
        plan = service.survey(older_than=DAY, limit=size)
        assert len(plan.candidates) == size
        with CaptureQueriesContext(connection) as queries:
            service.apply(plan, actor=ALICE, operation_id=f"p{size}")
        transaction = ("SAVEPOINT", "RELEASE")
        return len([q for q in queries.captured_queries if not q["sql"].startswith(transaction)])

    assert (
        statements(1) == statements(100) == 11
    )  # the failure details and the skip ledger go with their executions (decisions 304, 405)


# -- the batched loop -------------------------------------------------------------------


def test_a_purge_run_goes_batch_by_batch_until_nothing_is_left(service, repo, clock):
    """Scenarios 9.4 and 9.7: every batch ≤ the bound, younger rows untouched."""
    ids = [build_instance(repo, clock, f"r{i}", (S.COMPLETED,), steps=1) for i in range(5)]
    clock.advance(2 * DAY)
    young = build_instance(repo, clock, "young", (S.COMPLETED,))
    run = PurgeRun(service, PurgeCriteria(clock.now() - DAY, bound=2), ALICE, "nightly")
    batches = list(run)
    assert [b.result.operation_id for b in batches] == ["nightly:1", "nightly:2", "nightly:3"]
    assert [b.result.counts.job_instances for b in batches] == [2, 2, 1]
    assert run.counts == PurgeCounts(0, 0, 5, 5, 5)
    assert all(rows_of(i)["job_instances"] == 0 for i in ids)
    assert rows_of(young)["job_instances"] == 1

    rerun = PurgeRun(service, PurgeCriteria(clock.now() - DAY, bound=2), ALICE, "nightly")
    assert [b.result.outcome for b in rerun] == [Outcome.REPLAYED] * 3
    assert rerun.counts == run.counts
    assert len(records(RetentionAction.APPLY_PURGE)) == 3


def test_a_purge_run_resurveys_a_stale_plan(service, repo, clock, monkeypatch):
    changed = build_instance(repo, clock, "changes", (S.FAILED,))
    kept = build_instance(repo, clock, "stays")
    clock.advance(2 * DAY)
    survey = service.survey

    def survey_then_restart(**kwargs):
        plan = survey(**kwargs)
        if changed in plan.instance_ids:
            with repo.begin() as uow:
                uow.create_job_execution(changed)
                uow.commit()
        return plan

    monkeypatch.setattr(service, "survey", survey_then_restart)
    run = PurgeRun(service, PurgeCriteria(clock.now() - DAY), ALICE, "nightly")
    batches = list(run)
    assert (len(batches), run.resurveys, batches[0].resurveys) == (1, 1, 1)
    assert rows_of(changed)["job_executions"] == 2
    assert rows_of(kept)["job_instances"] == 0


def test_a_purge_run_gives_up_after_three_stale_resurveys(service, repo, clock, monkeypatch):
    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    calls = []

    def always_stale(*args, **kwargs):
        calls.append(1)
        raise RetentionPlanStale()

    monkeypatch.setattr(service, "apply", always_stale)
    with pytest.raises(RetentionPlanStale):
        list(PurgeRun(service, PurgeCriteria(clock.now() - DAY), ALICE, "nightly"))
    assert len(calls) == 4


def test_a_resumed_run_with_another_reason_conflicts(service, repo, clock):
    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    list(PurgeRun(service, PurgeCriteria(clock.now() - DAY), ALICE, "nightly"))
    with pytest.raises(OperationIdConflict):
        list(PurgeRun(service, PurgeCriteria(clock.now() - DAY), ALICE, "nightly", "OTHER"))


# -- audit pruning ------------------------------------------------------------------------


def test_audit_pruning_deletes_only_rows_older_than_the_age(service, repo, clock):
    models_ = (models.RecoveryDecision, models.OperatorRequest, models.RetentionRecord)
    for model in models_:
        for _ in range(3):
            _audit_row(model, clock.now() - 400 * DAY)
        _audit_row(model, clock.now() - 300 * DAY)
    dry = service.prune_audit(older_than=365 * DAY, dry_run=True)
    assert dry.counts == {"recovery_decisions": 3, "operator_requests": 3, "retention_records": 3}
    assert sum(audit_rows().values()) == 12
    result = service.prune_audit(older_than=365 * DAY, batch_size=2)
    assert result.counts == dry.counts
    assert result.batches == 2
    assert audit_rows() == {"RecoveryDecision": 1, "OperatorRequest": 1, "RetentionRecord": 1}


def test_audit_pruning_refuses_an_age_under_a_day(service):
    with pytest.raises(AgeBoundTooSmall):
        service.prune_audit(older_than=timedelta(hours=23))
    with pytest.raises(BatchBoundOutOfRange):
        service.prune_audit(older_than=DAY, batch_size=0)


def test_an_apply_recorded_before_schema_4_still_replays(service, repo, clock):
    """Records written before the criteria joined the digest carry the old
    digest (plan and reason): the same request replays instead of conflicting,
    through the API's apply and a command's resume alike."""
    from oxide_batch.domain.retention import RetentionRecordDraft
    from oxide_batch.services.retention import legacy_purge_request_digest

    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = service.survey(older_than=DAY)
    with repo.begin() as uow:
        uow.append_retention_record(
            RetentionRecordDraft(
                action=RetentionAction.APPLY_PURGE,
                operation_id="old:1",
                actor="alice",
                reason_code="SCHEDULED_PURGE",
                request_digest=legacy_purge_request_digest(plan.plan_digest, "SCHEDULED_PURGE"),
                changed=True,
                plan_digest=plan.plan_digest,
                batch_bound=plan.criteria.bound,
            )
        )
        uow.commit()
    replayed = service.apply(plan, actor=ALICE, operation_id="old:1")
    assert replayed.outcome is Outcome.REPLAYED
    run = PurgeRun(service, plan.criteria, ALICE, "old")
    batches = list(run)
    assert batches[0].result.outcome is Outcome.REPLAYED
    with pytest.raises(OperationIdConflict):
        service.apply(plan, actor=ALICE, reason_code="OTHER", operation_id="old:1")
