"""Holds, purge survey/apply and audit pruning in the repository (contract §2.5.10–§2.5.12;
contract scenarios 8.1–8.2, 9.1–9.6), on both databases: the port's behavioural
contract, on the Django adapter and the in-memory fake (``contract``); what the
adapter stores besides, its statements and the flow and partition rows are its own
(``adapter``).

The builders at the top are shared by the service, command and race tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    InvalidCharacters,
    JobInstanceNotFound,
    RetentionPlanStale,
    ZeroIdentifier,
)
from oxide_batch.domain.flow import FlowDecisionRequest, FlowTarget, FlowTransitionKind
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.retention import (
    AgeBoundTooSmall,
    ObservedExecution,
    PurgeCandidate,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    RetentionAction,
    RetentionRecordDraft,
)
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services.audit import Actor
from tests.conftest import give_accounts
from tests.fakes import FakeJobRepository
from tests.helpers import Repository, key, move, stored_counts

pytestmark = pytest.mark.contract
S = BatchStatus
JOB = "purge_job"
DAY = timedelta(days=1)
NO_MIN_AGE = timedelta(0)
ALICE = Actor("alice")
FLOW_MANIFEST = {
    "format": 2,
    "job": JOB,
    "entry": "load",
    # Each attempt of the builders runs every step again (contract §2.3.2: a restart
    # would skip a COMPLETED one without it).
    "nodes": [
        {"id": "load", "kind": "step", "allow_start_if_complete": True},
        {"id": "route", "kind": "decision"},
    ],
    "transitions": [
        {"source": "load", "pattern": "*", "target": {"node": "route"}},
        {"source": "route", "pattern": "*", "target": {"terminal": "COMPLETE"}},
    ],
}
CHILD_TABLES = (models.FlowDecision, models.StepPartition, models.StepExecution)


# -- builders (shared with the service, command and race tests) ---------------------


def _finish(repo, clock, execution, status: BatchStatus):
    path = {
        S.COMPLETED: (S.COMPLETED,),
        S.FAILED: (S.FAILED,),
        S.STOPPED: (S.STOPPING, S.STOPPED),
        S.ABANDONED: (S.FAILED, S.ABANDONED),
        S.UNKNOWN: (S.UNKNOWN,),
        S.STARTED: (),
        S.STOPPING: (S.STOPPING,),
    }[status]
    return move(repo, execution, *path, clock=clock)


def _steps(repo, clock, execution, count: int, *, rich: bool) -> None:
    """``count`` plain steps; ``rich`` adds a flow step with its decision and a
    partitioned step whose first partition is assigned to a worker. Every attempt
    runs them all again (``allow_start_if_complete``: rows to purge, not a restart's
    resume)."""
    again = {"allow_start_if_complete": True}
    with repo.begin() as uow:
        for index in range(count):
            step = uow.create_step_execution(execution.id, f"step{index}", **again)
            step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
            uow.transition_step_execution(step.id, 1, LifecycleTransition(S.COMPLETED))
        if rich:
            load = uow.create_flow_step_execution(execution.id, "load", "load")
            load = uow.transition_step_execution(load.id, 0, LifecycleTransition(S.STARTED))
            uow.transition_step_execution(load.id, 1, LifecycleTransition(S.COMPLETED))
            uow.append_flow_decision(
                FlowDecisionRequest(
                    job_execution_id=execution.id,
                    source_node_id="load",
                    kind=FlowTransitionKind.STEP_EXIT,
                    observed_outcome="COMPLETED",
                    target=FlowTarget.from_json({"node": "route"}),
                    plan_fingerprint=_flow_digest(uow),
                    input_digest="1" * 64,
                    source_step_execution_id=load.id,
                )
            )
            parent = uow.create_step_execution(execution.id, "partitioned", **again)
            parent = uow.transition_step_execution(parent.id, 0, LifecycleTransition(S.STARTED))
            worker = uow.create_step_execution(execution.id, "worker-a", **again)
            uow.create_step_partition_plan(
                parent.id, [PartitionPlanEntry("a"), PartitionPlanEntry("b")]
            )
        uow.commit()
    if rich:
        with repo.begin() as uow:
            first = uow.step_partition_plan(parent.id)[0]
            uow.assign_step_partition(first.id, first.version, worker.id)
            uow.commit()
    clock.advance(timedelta(seconds=1))


def _flow_digest(uow) -> str:
    return str(uow.register_definition(JOB, "v1", FLOW_MANIFEST).definition.digest)


def build_instance(
    repo: Repository,
    clock: FixedClock,
    run: str,
    statuses: Sequence[BatchStatus] = (S.FAILED, S.COMPLETED),
    *,
    job: str = JOB,
    steps: int = 2,
    rich: bool = False,
) -> int:
    """An instance whose attempts end in ``statuses`` (a restart after each but the
    last), each attempt with ``steps`` steps; committed. Returns the instance id."""
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key(job, run)).instance
        digest = _flow_digest(uow) if rich else None
        execution = uow.create_job_execution(instance.id, definition_digest=digest)
        uow.commit()
    for index, status in enumerate(statuses):
        if index:
            with repo.begin() as uow:
                execution = uow.create_job_execution(instance.id)
                uow.commit()
        execution = move(repo, execution, S.STARTED, clock=clock)
        _steps(repo, clock, execution, steps, rich=rich)
        execution = _finish(repo, clock, execution, status)
    return instance.id


def rows_of(instance_id: int, repo: Repository | None = None) -> dict[str, int]:
    """Rows an instance owns, per kind (the fake's tables, or the models')."""
    if isinstance(repo, FakeJobRepository):
        tables = repo.tables
        return {
            "flow_decisions": sum(
                row.job_instance_id == instance_id for row in tables.flow_decisions.values()
            ),
            "step_partitions": sum(
                row.partition.job_instance_id == instance_id for row in tables.partitions.values()
            ),
            "step_executions": sum(
                step.job_instance_id == instance_id for step in tables.steps.values()
            ),
            "job_executions": sum(
                row.execution.job_instance_id == instance_id for row in tables.executions.values()
            ),
            "job_instances": int(instance_id in tables.instances),
        }
    return {
        "flow_decisions": models.FlowDecision.objects.filter(job_instance_id=instance_id).count(),
        "step_partitions": models.StepPartition.objects.filter(job_instance_id=instance_id).count(),
        "step_executions": models.StepExecution.objects.filter(job_instance_id=instance_id).count(),
        "job_executions": models.JobExecution.objects.filter(job_instance_id=instance_id).count(),
        "job_instances": models.JobInstance.objects.filter(id=instance_id).count(),
    }


def audit_rows(repo: Repository | None = None) -> dict[str, int]:
    """The audit rows of each kind (the fake's tables, or the models')."""
    if isinstance(repo, FakeJobRepository):
        tables = repo.tables
        return {
            "RecoveryDecision": len(tables.decisions),
            "OperatorRequest": len(tables.operator_requests),
            "RetentionRecord": len(tables.retention_records),
        }
    return {
        model.__name__: model.objects.count()
        for model in (models.RecoveryDecision, models.OperatorRequest, models.RetentionRecord)
    }


def definition_count(repo: Repository) -> int:
    """Definitions are the job's, not an instance's: a purge keeps them."""
    if isinstance(repo, FakeJobRepository):
        return len(repo.tables.definitions)
    return models.JobDefinition.objects.count()


def survey(repo, clock, *, older_than=DAY, min_age=NO_MIN_AGE, **criteria):
    with repo.begin() as uow:
        return uow.purge_survey(
            PurgeCriteria(clock.now() - older_than, **criteria), min_age=min_age
        )


def apply(repo, plan, *, min_age=NO_MIN_AGE):
    with repo.begin() as uow:
        counts = uow.apply_purge(plan, min_age=min_age)
        uow.commit()
    return counts


def forged(plan: PurgePlan, candidates, *, recompute: bool = True) -> PurgePlan:
    """An edited plan: with a recomputed digest, or keeping the original one."""
    digest = "" if recompute else plan.plan_digest
    return dataclasses.replace(plan, candidates=tuple(candidates), plan_digest=digest)


def hold(repo, instance_id, actor=ALICE, reason="LEGAL_HOLD"):
    with repo.begin() as uow:
        placed = uow.place_instance_hold(instance_id, actor, reason)
        uow.commit()
    return placed


# -- holds ----------------------------------------------------------------------------


def test_an_instance_has_no_hold_until_one_is_placed(repo, clock):
    instance_id = build_instance(repo, clock, "a")
    with repo.begin() as uow:
        assert uow.job_instance_hold(instance_id) is None
    if isinstance(repo, DjangoJobRepository):
        give_accounts(Actor("alice", 7))
    placed = hold(repo, instance_id, Actor("alice", 7))
    assert (placed.job_instance_id, placed.actor, placed.reason_code) == (
        instance_id,
        "alice",
        "LEGAL_HOLD",
    )
    assert (placed.placed_at, placed.actor_user_id) == (clock.now(), 7)
    with repo.begin() as uow:
        assert uow.job_instance_hold(instance_id) == placed


def test_placing_again_replaces_actor_reason_and_time(repo, clock):
    instance_id = build_instance(repo, clock, "a")
    hold(repo, instance_id)
    clock.advance(timedelta(minutes=5))
    second = hold(repo, instance_id, Actor("bob"), "AUDIT")
    with repo.begin() as uow:
        current = uow.job_instance_hold(instance_id)
    assert current == second
    assert (current.actor, current.reason_code, current.placed_at) == ("bob", "AUDIT", clock.now())


@pytest.mark.adapter
def test_releasing_returns_the_removed_hold_and_succeeds_when_none_is_held(repo, clock):
    instance_id = build_instance(repo, clock, "a")
    placed = hold(repo, instance_id)
    with repo.begin() as uow:
        assert uow.release_instance_hold(instance_id) == placed
        assert uow.release_instance_hold(instance_id) is None
        assert uow.job_instance_hold(instance_id) is None
        uow.commit()
    row = models.JobInstance.objects.get(pk=instance_id)
    assert (row.hold_actor, row.hold_reason_code, row.hold_placed_at) == (None, None, None)


@pytest.mark.parametrize("operation", ["read", "place", "release"])
def test_hold_operations_on_a_missing_instance_are_not_found(repo, operation):
    with repo.begin() as uow, pytest.raises(JobInstanceNotFound) as error:
        {
            "read": lambda: uow.job_instance_hold(404),
            "place": lambda: uow.place_instance_hold(404, ALICE, "LEGAL_HOLD"),
            "release": lambda: uow.release_instance_hold(404),
        }[operation]()
    assert error.value.id == 404


def test_hold_inputs_are_validated(repo, clock):
    instance_id = build_instance(repo, clock, "a")
    with repo.begin() as uow:
        with pytest.raises(ZeroIdentifier):
            uow.place_instance_hold(0, ALICE, "LEGAL_HOLD")
        with pytest.raises(InvalidCharacters):
            uow.place_instance_hold(instance_id, ALICE, "legal hold")


def test_a_hold_never_blocks_lifecycle_actions(repo, clock):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key(JOB, "held")).instance
        uow.commit()
    hold(repo, instance.id)
    with repo.begin() as uow:
        execution = uow.create_job_execution(instance.id)
        uow.commit()
    execution = move(repo, execution, S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow:
        restarted = uow.create_job_execution(instance.id)
        uow.commit()
    assert restarted.attempt == 2


# -- retention records ----------------------------------------------------------------


def test_a_retention_record_is_appended_once_per_action_and_operation_id(repo, clock):
    draft = RetentionRecordDraft(
        action=RetentionAction.HOLD,
        operation_id="op-1",
        actor="alice",
        reason_code="LEGAL_HOLD",
        request_digest="a" * 64,
        changed=True,
        job_instance_id=5,
    )
    with repo.begin() as uow:
        record = uow.append_retention_record(draft)
        assert uow.append_retention_record(draft) is None
        assert uow.find_retention_record(RetentionAction.HOLD, "op-1") == record
        assert uow.find_retention_record(RetentionAction.RELEASE_HOLD, "op-1") is None
        uow.commit()
    assert record.applied_at == clock.now()
    assert (record.job_instance_id, record.counts, record.changed) == (5, PurgeCounts(), True)


# -- survey ---------------------------------------------------------------------------


def test_survey_offers_whole_finished_instances_oldest_first_with_versions(repo, clock):
    second = build_instance(repo, clock, "b", (S.COMPLETED,))
    first = build_instance(repo, clock, "a", (S.FAILED, S.COMPLETED))
    # ``second`` finished first, so it is older.
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    assert plan.instance_ids == [second, first]
    with repo.begin() as uow:
        executions = uow.job_executions(first)
    assert plan.candidates[1] == PurgeCandidate(
        first, tuple(ObservedExecution(row.id, row.version) for row in executions)
    )
    assert plan.counts == PurgeCounts(0, 0, 6, 3, 2)
    assert plan.held_excluded == 0
    assert plan.plan_digest == plan.computed_digest()


def test_survey_counts_every_kind_an_instance_owns(repo, clock):
    instance_id = build_instance(repo, clock, "a", rich=True)
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    assert plan.instance_ids == [instance_id]
    assert plan.counts.as_dict() == rows_of(instance_id, repo)
    assert plan.counts == PurgeCounts(2, 4, 10, 2, 1)


@pytest.mark.parametrize(
    "statuses",
    [
        (S.STARTED,),
        (S.STOPPING,),
        (S.UNKNOWN,),
        (S.FAILED, S.STARTED),
    ],
    ids=["started", "stopping", "unknown", "restarted-and-running"],
)
def test_survey_excludes_instances_with_an_unresolved_execution(repo, clock, statuses):
    build_instance(repo, clock, "unresolved", statuses)
    clock.advance(2 * DAY)
    assert survey(repo, clock).candidates == ()


def test_survey_excludes_held_instances_and_counts_them(repo, clock):
    held = build_instance(repo, clock, "held")
    free = build_instance(repo, clock, "free")
    hold(repo, held)
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    assert (plan.instance_ids, plan.held_excluded) == ([free], 1)


def test_survey_excludes_instances_that_ended_after_the_cutoff(repo, clock):
    old = build_instance(repo, clock, "old")
    clock.advance(2 * DAY)
    build_instance(repo, clock, "young")
    clock.advance(timedelta(hours=1))
    assert survey(repo, clock).instance_ids == [old]


def test_survey_excludes_an_instance_whose_earlier_execution_is_outside_the_statuses(repo, clock):
    mixed = build_instance(repo, clock, "mixed", (S.FAILED, S.COMPLETED))
    only_completed = build_instance(repo, clock, "done", (S.COMPLETED,))
    clock.advance(2 * DAY)
    assert survey(repo, clock, statuses=frozenset({S.COMPLETED})).instance_ids == [only_completed]
    assert set(survey(repo, clock).instance_ids) == {mixed, only_completed}


def test_survey_filters_by_job_name_and_stops_at_the_bound(repo, clock):
    ids = [build_instance(repo, clock, f"run-{index}", steps=0) for index in range(3)]
    build_instance(repo, clock, "other", job="other_job", steps=0)
    clock.advance(2 * DAY)
    assert survey(repo, clock, job_name=JOB, bound=2).instance_ids == ids[:2]
    assert len(survey(repo, clock).candidates) == 4


def test_an_instance_without_executions_is_never_a_candidate(repo, clock):
    with repo.begin() as uow:
        uow.select_or_create_job_instance(key(JOB, "empty"))
        uow.commit()
    clock.advance(2 * DAY)
    assert survey(repo, clock).candidates == ()


def test_a_cutoff_younger_than_the_minimum_age_is_refused(repo, clock):
    with pytest.raises(AgeBoundTooSmall) as error:
        survey(repo, clock, older_than=timedelta(minutes=59), min_age=timedelta(hours=1))
    assert error.value.minimum_seconds == 3600
    assert survey(repo, clock, older_than=timedelta(hours=1), min_age=timedelta(hours=1))


@pytest.mark.adapter
def test_survey_is_four_statements_whatever_the_bound(repo, clock):
    for index in range(3):
        build_instance(repo, clock, f"r{index}", steps=1)
    clock.advance(2 * DAY)
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.purge_survey(PurgeCriteria(clock.now() - DAY), min_age=NO_MIN_AGE)
    assert len(queries) == 4


# -- apply ----------------------------------------------------------------------------


def test_apply_deletes_exactly_the_candidates_and_everything_they_own(repo, clock):
    doomed = [build_instance(repo, clock, f"doomed-{i}", rich=True) for i in range(2)]
    kept_held = build_instance(repo, clock, "held", rich=True)
    hold(repo, kept_held)
    clock.advance(2 * DAY)
    kept_young = build_instance(repo, clock, "young", rich=True)
    kept_running = build_instance(repo, clock, "running", (S.FAILED, S.STARTED), rich=True)
    survivors = {i: rows_of(i, repo) for i in (kept_held, kept_young, kept_running)}
    audit_before = audit_rows(repo)
    definitions = definition_count(repo)
    plan = survey(repo, clock)
    assert set(plan.instance_ids) == set(doomed)

    counts = apply(repo, plan)

    assert counts == plan.counts == PurgeCounts(4, 8, 20, 4, 2)
    for instance_id in doomed:
        assert set(rows_of(instance_id, repo).values()) == {0}
    assert {i: rows_of(i, repo) for i in survivors} == survivors
    assert audit_rows(repo) == audit_before
    assert definition_count(repo) == definitions


@pytest.mark.adapter
def test_apply_of_an_empty_plan_deletes_nothing(repo, clock):
    build_instance(repo, clock, "young")
    plan = survey(repo, clock)
    assert plan.candidates == ()
    with CaptureQueriesContext(connection) as queries:
        assert apply(repo, plan) == PurgeCounts()
    assert [q for q in queries.captured_queries if "DELETE" in q["sql"]] == []


def _stale(repo, plan):
    before = stored_counts(repo)
    with pytest.raises(RetentionPlanStale):
        apply(repo, plan)
    assert stored_counts(repo) == before


def test_a_plan_is_stale_when_a_candidate_restarted(repo, clock):
    instance_id = build_instance(repo, clock, "a", (S.FAILED,))
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    with repo.begin() as uow:
        uow.create_job_execution(instance_id)
        uow.commit()
    _stale(repo, plan)


def test_a_plan_is_stale_when_a_candidate_was_held_after_the_survey(repo, clock):
    """Scenario 8.2: a hold placed after planning makes the plan stale."""
    instance_id = build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    hold(repo, instance_id)
    _stale(repo, plan)


def test_a_plan_is_stale_when_a_version_moved(repo, clock):
    """Scenario 9.2: the execution was abandoned after the plan."""
    instance_id = build_instance(repo, clock, "a", (S.FAILED,))
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    with repo.begin() as uow:
        [execution] = uow.job_executions(instance_id)
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.ABANDONED)
        )
        uow.commit()
    _stale(repo, plan)


def test_a_plan_is_stale_when_a_candidate_is_already_gone(repo, clock):
    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    apply(repo, plan)
    _stale(repo, plan)


@pytest.mark.parametrize("recompute", [False, True], ids=["same-digest", "recomputed-digest"])
def test_a_forged_plan_deletes_nothing(repo, clock, recompute):
    """An edited plan can never purge what a survey would not have offered."""
    eligible = build_instance(repo, clock, "eligible")
    held = build_instance(repo, clock, "held")
    running = build_instance(repo, clock, "running", (S.FAILED, S.STARTED))
    hold(repo, held)
    clock.advance(2 * DAY)
    young = build_instance(repo, clock, "young")
    plan = survey(repo, clock)
    assert plan.instance_ids == [eligible]

    def candidate(instance_id, bump=0):
        with repo.begin() as uow:
            rows = uow.job_executions(instance_id)
        return PurgeCandidate(
            instance_id, tuple(ObservedExecution(r.id, r.version + bump) for r in rows)
        )

    edits = [
        [*plan.candidates, candidate(held)],
        [*plan.candidates, candidate(running)],
        [*plan.candidates, candidate(young)],
        [candidate(eligible, bump=1)],
        [PurgeCandidate(eligible, plan.candidates[0].executions[:1])],
    ]
    for edit in edits:
        _stale(repo, forged(plan, edit, recompute=recompute))
    with repo.begin() as uow:
        assert uow.get_job_instance(eligible).id == eligible


def test_a_forged_plan_with_a_young_cutoff_is_refused(repo, clock):
    build_instance(repo, clock, "a")
    clock.advance(2 * DAY)
    plan = survey(repo, clock)
    young = dataclasses.replace(plan, criteria=PurgeCriteria(clock.now() + DAY), plan_digest="")
    with pytest.raises(AgeBoundTooSmall):
        apply(repo, young)
    with pytest.raises(AgeBoundTooSmall):
        apply(repo, plan, min_age=3 * DAY)


@pytest.mark.adapter
@pytest.mark.parametrize("size", [1, 100])
def test_apply_is_nine_statements_whatever_the_batch_size(repo, clock, size):
    for index in range(size):
        build_instance(repo, clock, f"r{index}", (S.COMPLETED,), steps=1)
    clock.advance(2 * DAY)
    plan = survey(repo, clock, bound=size)
    assert len(plan.candidates) == size
    with repo.begin() as uow:
        with CaptureQueriesContext(connection) as queries:
            counts = uow.apply_purge(plan, min_age=NO_MIN_AGE)
        uow.commit()
    assert counts.job_instances == size
    statements = [query["sql"].split()[0] for query in queries.captured_queries]
    # The failure details, the skip ledger, then the five tables of PurgeCounts
    # (issues 40, 42).
    assert statements == ["SELECT", "SELECT", *["DELETE"] * 7]
    assert "ob_failure_detail" in queries.captured_queries[2]["sql"]
    assert "ob_skip" in queries.captured_queries[3]["sql"]
    assert (
        "FOR NO KEY UPDATE" in queries.captured_queries[0]["sql"] or connection.vendor == "sqlite"
    )


# -- audit pruning ----------------------------------------------------------------------


def _audit_row(model, at):
    common = {"operation_id": f"op-{model.objects.count()}", "actor": "alice"}
    if model is models.RecoveryDecision:
        return model.objects.create(
            job_instance_id=1,
            job_execution_id=model.objects.count() + 1,
            execution_version=1,
            prior_status="STARTED",
            resulting_status="FAILED",
            reason_code="WORKER_LOST",
            operator_reference="alice",
            evidence_digest="c" * 64,
            decided_at=at,
        )
    if model is models.OperatorRequest:
        return model.objects.create(
            action="STOP", request_digest="a" * 64, outcome="APPLIED", requested_at=at, **common
        )
    return model.objects.create(
        action="HOLD", reason_code="LEGAL_HOLD", request_digest="b" * 64, applied_at=at, **common
    )


AUDIT_MODELS = (models.RecoveryDecision, models.OperatorRequest, models.RetentionRecord)


@pytest.mark.adapter
def test_audit_pruning_deletes_the_oldest_rows_in_bounded_batches(repo, clock):
    old = clock.now() - 400 * DAY
    for model in AUDIT_MODELS:
        for offset in range(3):
            _audit_row(model, old + timedelta(seconds=offset))
        _audit_row(model, clock.now())
    with repo.begin() as uow:
        assert uow.count_prunable_audit(clock.now() - 365 * DAY) == {
            "recovery_decisions": 3,
            "operator_requests": 3,
            "retention_records": 3,
        }
        assert uow.prune_audit(clock.now() - 365 * DAY, limit=2) == {
            "recovery_decisions": 2,
            "operator_requests": 2,
            "retention_records": 2,
        }
        uow.commit()
    for model in AUDIT_MODELS:
        column = {"RecoveryDecision": "decided_at", "OperatorRequest": "requested_at"}.get(
            model.__name__, "applied_at"
        )
        remaining = sorted(model.objects.values_list(column, flat=True))
        assert remaining == [old + timedelta(seconds=2), clock.now()]


@pytest.mark.adapter
def test_the_audit_rows_outlive_a_purge(repo, clock):
    instance_id = build_instance(repo, clock, "a")
    execution = models.JobExecution.objects.filter(job_instance_id=instance_id).first()
    models.RecoveryDecision.objects.create(
        job_instance_id=instance_id,
        job_execution_id=execution.id,
        execution_version=0,
        prior_status="STARTED",
        resulting_status="FAILED",
        reason_code="WORKER_LOST",
        operator_reference="alice",
        evidence_digest="c" * 64,
        decided_at=timezone.now(),
    )
    clock.advance(2 * DAY)
    apply(repo, survey(repo, clock))
    assert rows_of(instance_id, repo)["job_instances"] == 0
    assert models.RecoveryDecision.objects.filter(job_instance_id=instance_id).count() == 1
