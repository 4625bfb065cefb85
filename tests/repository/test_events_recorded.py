"""Every operation the port marks as a mutation records what it did.

Derived from the port, not from a list written here: ``port.OPERATIONS`` names
every operation with its kind (``mutation(...)`` or ``read``). Each mutation is
driven below (a scenario per name: one missing fails), and its observed
operation must carry at least one fact, each of a type the port declares for
it; each read carries none. The adapter's operations (the methods its
``operation`` wrapper observes) and the port's marks are the same set.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    LifecycleTransition,
    RecoveryRequest,
    events,
)
from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.errors import StaleVersion
from oxide_batch.domain.flow import FlowTransitionKind
from oxide_batch.domain.lost_write import LostWriteResolution
from oxide_batch.domain.operator import OperatorAction, OperatorRecordDraft, RecordOutcome
from oxide_batch.domain.retention import PurgeCriteria, RetentionAction, RetentionRecordDraft
from oxide_batch.repository import DjangoUnitOfWork
from oxide_batch.repository.adapter import ADAPTER_OPERATIONS
from oxide_batch.repository.port import OPERATIONS, UnitOfWork
from oxide_batch.services.audit import Actor
from tests.helpers import key, launch, move
from tests.repository.test_flow import decision, launch_flow, node, start_step
from tests.repository.test_partitions import entries, make_family, plan, run_worker

pytestmark = pytest.mark.django_db
S = BatchStatus
OWNER = b"\x07" * 16
ALICE = Actor("alice", None)
Scenario = Callable[[Any, Any], Callable[[UnitOfWork], object]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(build: Scenario) -> Scenario:
        SCENARIOS[name] = build
        return build

    return register


MUTATIONS = sorted(name for name, kind in OPERATIONS.items() if kind.mutates)
READS = sorted(name for name, kind in OPERATIONS.items() if not kind.mutates)


def test_the_port_marks_every_operation_of_the_adapter_and_nothing_else():
    wrapped = {
        name
        for name, member in inspect.getmembers(DjangoUnitOfWork, inspect.isfunction)
        if not name.startswith("_") and hasattr(member, "__wrapped__")
    }
    # The adapter's own operations (decision 460) are tested in
    # tests/repository/test_partition_claims.py.
    assert wrapped == set(OPERATIONS) | ADAPTER_OPERATIONS
    assert not ADAPTER_OPERATIONS & set(OPERATIONS)
    assert len(MUTATIONS) >= 29
    assert len(READS) >= 21


def test_every_mutation_has_a_scenario():
    assert sorted(SCENARIOS) == MUTATIONS


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_mutation_records_its_facts(name, repo, clock, seen):
    run = SCENARIOS[name](repo, clock)
    seen.clear()
    with repo.begin(runtime_user_id=None) as uow:
        run(uow)
        uow.commit()
    [observed] = [event for event in seen if event.operation == name]
    assert observed.outcome == "ok"
    declared = OPERATIONS[name].records
    assert observed.events, f"{name} recorded nothing"
    assert {type(fact) for fact in observed.events} <= set(declared)
    assert all(isinstance(fact, events.Event) for fact in observed.events)
    # Reads the scenario made in the same work record nothing.
    assert all(not event.events for event in seen if OPERATIONS[event.operation].records == ())


def test_a_transition_records_the_locked_rows_prior_status(repo, clock, seen):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    seen.clear()
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, 1, LifecycleTransition(S.COMPLETED))
        uow.commit()
    [fact] = seen[-1].events
    assert isinstance(fact, events.ExecutionTransitioned)
    assert (fact.prior, fact.execution.status, fact.execution.version) == (
        S.STARTED,
        S.COMPLETED,
        2,
    )


def test_a_refused_mutation_records_nothing(repo, clock, seen):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    seen.clear()
    with pytest.raises(StaleVersion), repo.begin() as uow:
        uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.COMPLETED))
    assert [(e.outcome, e.events) for e in seen] == [("stale_version", ())]


# -- the scenarios: committed setup, then the operation in its own work ------------------


def started(repo, clock):
    return move(repo, launch(repo), S.STARTED, clock=clock)


def started_step(repo, clock):
    execution = started(repo, clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.commit()
    return execution, step


@scenario("select_or_create_job_instance")
def _(repo, clock):
    return lambda uow: uow.select_or_create_job_instance(key(run="new"))


@scenario("create_job_execution")
def _(repo, clock):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key(run="fresh")).instance
        uow.commit()
    return lambda uow: uow.create_job_execution(instance.id)


@scenario("launch_job_execution")
def _(repo, clock):
    return lambda uow: uow.launch_job_execution(key(run="launched"), OWNER)


@scenario("transition_job_execution")
def _(repo, clock):
    execution = launch(repo)
    return lambda uow: uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))


@scenario("enrich_job_exit_status")
def _(repo, clock):
    execution = started(repo, clock)
    return lambda uow: uow.enrich_job_exit_status(execution.id, 1, "DONE")


@scenario("recover_job_execution")
def _(repo, clock):
    execution = started(repo, clock)
    request = RecoveryRequest.abandon(
        expected_version=1,
        reason_code="ORPHAN_CONFIRMED",
        operator_reference="ops",
        evidence_digest=b"\x01" * 32,
    )
    return lambda uow: uow.recover_job_execution(execution.id, request)


@scenario("request_execution_stop")
def _(repo, clock):
    execution = started(repo, clock)
    return lambda uow: uow.request_execution_stop(execution.id, 1, "alice")


@scenario("resolve_lost_write")
def _(repo, clock):
    execution = started(repo, clock)
    resolution = LostWriteResolution("alice", "TARGET_CHECKED", "checked", "lw-1")
    return lambda uow: uow.resolve_lost_write(execution.id, resolution)


@scenario("claim_execution_owner")
def _(repo, clock):
    execution = launch(repo)
    return lambda uow: uow.claim_execution_owner(execution.id, 0, OWNER)


@scenario("observe_execution_control")
def _(repo, clock):
    execution = launch(repo)
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    return lambda uow: uow.observe_execution_control(execution.id, OWNER)


@scenario("append_operator_request")
def _(repo, clock):
    draft = OperatorRecordDraft(
        action=OperatorAction.STOP,
        operation_id="stop-1",
        actor="alice",
        actor_user_id=None,
        request_digest="0" * 64,
        outcome=RecordOutcome.APPLIED,
    )
    return lambda uow: uow.append_operator_request(draft)


@scenario("record_admin_history")
def _(repo, clock):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("history-operator")
    execution = launch(repo)
    return lambda uow: uow.record_admin_history(
        actor="alice", user_id=user.pk, target="jobexecution", object_id=execution.id, message="m"
    )


@scenario("create_step_execution")
def _(repo, clock):
    execution = started(repo, clock)
    return lambda uow: uow.create_step_execution(execution.id, "load", started=True)


@scenario("transition_step_execution")
def _(repo, clock):
    _, step = started_step(repo, clock)
    return lambda uow: uow.transition_step_execution(
        step.id, step.version, LifecycleTransition(S.COMPLETED)
    )


@scenario("enrich_step_exit_status")
def _(repo, clock):
    _, step = started_step(repo, clock)
    return lambda uow: uow.enrich_step_exit_status(step.id, step.version, "DONE")


@scenario("commit_chunk")
def _(repo, clock):
    _, step = started_step(repo, clock)
    return lambda uow: uow.commit_chunk(
        step.id,
        step.version,
        ExecutionCounts(read=1, written=1, committed=1),
        finish=LifecycleTransition(S.COMPLETED),
    )


MANIFEST = {"format": 1, "job": "import_job", "step": "work"}


@scenario("register_definition")
def _(repo, clock):
    return lambda uow: uow.register_definition("import_job", "v1", MANIFEST)


@scenario("register_definition_upgrade")
def _(repo, clock):
    with repo.begin() as uow:
        old = uow.register_definition("import_job", "v1", MANIFEST).definition
        new = uow.register_definition("import_job", "v2", {**MANIFEST, "step": "work2"})
        uow.commit()
    edge = UpgradeEdge.of(
        job_name="import_job",
        key="v1-v2",
        from_digest=old.digest,
        to_digest=new.definition.digest,
        step_mapping={"work2": "work"},
    )
    return lambda uow: uow.register_definition_upgrade(edge)


@scenario("create_flow_step_execution")
def _(repo, clock):
    flow = launch_flow(repo, clock)
    return lambda uow: uow.create_flow_step_execution(flow.execution.id, "load", "load")


@scenario("append_flow_decision")
def _(repo, clock):
    flow = launch_flow(repo, clock)
    step = start_step(repo, flow.execution.id, "load")
    request = decision(
        flow, "load", FlowTransitionKind.STEP_EXIT, "COMPLETED", node("route"), step=step.id
    )
    return lambda uow: uow.append_flow_decision(request)


@scenario("create_step_partition_plan")
def _(repo, clock):
    family = make_family(repo, clock)
    return lambda uow: uow.create_step_partition_plan(family.parent.id, entries("a", "b"))


@scenario("assign_step_partition")
def _(repo, clock):
    family = make_family(repo, clock, "w1")
    partition = plan(repo, family.parent.id, "a")["a"]
    return lambda uow: uow.assign_step_partition(
        partition.id, partition.version, family.workers["w1"].id
    )


def worker_done(repo, clock):
    """A plan of one partition whose worker ran to COMPLETED: (family, partition, worker id)."""
    family = make_family(repo, clock, "w1")
    partition = plan(repo, family.parent.id, "a")["a"]
    worker = family.workers["w1"].id
    with repo.begin() as uow:
        partition = uow.assign_step_partition(partition.id, partition.version, worker)
        uow.commit()
    run_worker(repo, clock, worker, S.COMPLETED)
    return family, partition, worker


@scenario("complete_step_partition")
def _(repo, clock):
    _, partition, worker = worker_done(repo, clock)
    return lambda uow: uow.complete_step_partition(partition.id, partition.version, worker)


@scenario("aggregate_step_partitions")
def _(repo, clock):
    family, partition, worker = worker_done(repo, clock)
    with repo.begin() as uow:
        uow.complete_step_partition(partition.id, partition.version, worker)
        uow.commit()
    return lambda uow: uow.aggregate_step_partitions(family.parent.id, family.parent.version)


@scenario("restart_step_partition_plan")
def _(repo, clock):
    family = make_family(repo, clock)
    plan(repo, family.parent.id, "a")
    move(repo, family.execution, S.FAILED, clock=clock)
    with repo.begin() as uow:
        retry = uow.create_job_execution(family.execution.job_instance_id)
        uow.commit()
    retry = move(repo, retry, S.STARTED, clock=clock)
    with repo.begin() as uow:
        target = uow.create_step_execution(retry.id, "partitioned", allow_start_if_complete=True)
        uow.commit()
    return lambda uow: uow.restart_step_partition_plan(family.parent.id, target.id)


@scenario("place_instance_hold")
def _(repo, clock):
    execution = launch(repo)
    return lambda uow: uow.place_instance_hold(execution.job_instance_id, ALICE, "AUDIT")


@scenario("release_instance_hold")
def _(repo, clock):
    execution = launch(repo)
    return lambda uow: uow.release_instance_hold(execution.job_instance_id)


@scenario("append_retention_record")
def _(repo, clock):
    draft = RetentionRecordDraft(
        action=RetentionAction.HOLD,
        operation_id="hold-1",
        actor="alice",
        reason_code="AUDIT",
        request_digest="0" * 64,
        changed=True,
    )
    return lambda uow: uow.append_retention_record(draft)


@scenario("apply_purge")
def _(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    move(repo, execution, S.COMPLETED, clock=clock)
    clock.advance(timedelta(days=2))
    with repo.begin() as uow:
        survey = uow.purge_survey(
            PurgeCriteria(clock.now() - timedelta(days=1)), min_age=timedelta(0)
        )
    assert survey.candidates
    return lambda uow: uow.apply_purge(survey, min_age=timedelta(0))


@scenario("prune_audit")
def _(repo, clock):
    return lambda uow: uow.prune_audit(clock.now(), limit=10)


@scenario("record_purge_failure")
def _(repo, clock):
    return lambda uow: uow.record_purge_failure(
        outcome="database_error", candidates=2, job_name="import_job"
    )
