"""Structured events (issue 9, point 3): the catalogued events in order, only
after the commit that makes them true, and never a parameter value, checkpoint
payload, owner token, evidence digest or actor."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    ParameterType,
    RecoveryDisposition,
)
from oxide_batch.domain.errors import ConcurrentModification, RetentionPlanStale, StaleVersion
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.observability import events as catalogue
from oxide_batch.observability import metrics
from oxide_batch.observability.observer import OBSERVER
from oxide_batch.repository.hooks import OperationEvent
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service, retention_service
from tests.conftest import accounts_fixture
from tests.helpers import key, launch, move

S = BatchStatus
ALICE = Actor("alice-operator", 7)
_accounts = accounts_fixture(ALICE)
SENTINEL = "sentinel"
PAYLOAD = "checkpoint-payload-must-not-leak"
OWNER = bytes.fromhex("00112233445566778899aabbccddeeff")


def sentinel_key() -> JobInstanceKey:
    return JobInstanceKey.of(
        "nightly_import", [JobParameter("business_date", ParameterType.STRING, SENTINEL)]
    )


def checkpoint() -> StateEnvelope:
    return StateEnvelope.from_json(
        {"schema": "reader.cursor", "schema_version": 1, "payload": {"cursor": PAYLOAD}},
        kind=EnvelopeKind.CHECKPOINT,
    )


def assert_catalogued(captured) -> None:
    for event in captured.all:
        spec = catalogue.CATALOGUE[event["event"]]
        assert set(event) - {"ts", "severity", "event"} <= set(spec.fields), event
        assert event["ts"].endswith("Z")
        assert "outcome" in event


@pytest.mark.django_db(transaction=True)
def test_a_launch_recovery_purge_story_emits_the_catalogued_events_in_order(
    repo, clock, events, fresh_metrics, schema_row, settings
):
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(0)
    operator = operator_service(repo, stale_after=timedelta(minutes=15))
    retention = retention_service(repo)

    execution = launch(repo, sentinel_key())
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=2, processed=2, written=2, committed=1),
            checkpoint=checkpoint(),
        )
        before_commit = events.names()
        uow.commit()
    assert "step.created" not in before_commit  # said only once durable

    clock.advance(timedelta(minutes=16))
    proposal = operator.propose(execution.id)
    arguments = {
        "expected_version": execution.version,
        "disposition": RecoveryDisposition.MARK_FAILED,
        "reason_code": "WORKER_LOST",
        "evidence_digest": proposal.evidence_digest,
        "actor": ALICE,
    }
    recovered = operator.recover(execution.id, operation_id="recover-1", **arguments)
    assert recovered.outcome is Outcome.APPLIED
    assert operator.recover(execution.id, operation_id="recover-1", **arguments).outcome is (
        Outcome.REPLAYED
    )
    with pytest.raises(StaleVersion):  # the execution moved on: audited as REJECTED
        operator.recover(execution.id, operation_id="recover-2", **arguments)

    instance_id = execution.job_instance_id
    retention.place_hold(instance_id, actor=ALICE, reason_code="LEGAL", operation_id="hold-1")
    retention.release_hold(instance_id, actor=ALICE, reason_code="LEGAL", operation_id="rel-1")
    clock.advance(timedelta(minutes=1))
    plan = retention.survey(cutoff=clock.now())
    assert plan.instance_ids == [instance_id]
    purged = retention.apply(plan, actor=ALICE, operation_id="purge-1")
    assert purged.counts.job_instances == 1

    assert events.names() == [
        "instance.created",
        "execution.launched",
        "execution.transitioned",
        "step.created",
        "step.transitioned",
        "step.chunk_committed",
        "recovery.proposed",
        "execution.transitioned",
        "recovery.applied",
        "operator.request.applied",
        "operator.request.replayed",
        "recovery.rejected",
        "operator.request.rejected",
        "hold.placed",
        "operator.request.applied",
        "hold.released",
        "operator.request.applied",
        "purge.batch_applied",
        "operator.request.applied",
    ]
    assert_catalogued(events)
    story = events.all
    correlation = {
        "job_name": "nightly_import",
        "job_instance_id": instance_id,
        "job_execution_id": execution.id,
        "attempt": 1,
    }
    launched = story[1]
    assert launched | correlation == launched
    assert (launched["severity"], launched["status"], launched["restart"]) == (
        "INFO",
        "STARTING",
        False,
    )
    assert (story[2]["from_status"], story[2]["to_status"]) == ("STARTING", "STARTED")
    assert story[3]["step_execution_id"] == step.id
    assert story[5]["severity"] == "DEBUG"
    assert (story[6]["eligible"], story[6]["outcome"]) == (True, "eligible")
    failed = story[7]
    assert (failed["severity"], failed["from_status"], failed["to_status"]) == (
        "WARNING",
        "STARTED",
        "FAILED",
    )
    assert failed["failure_category"] == "STALE_RECOVERED"
    applied = story[8]
    assert applied | correlation == applied
    assert (applied["reason_code"], applied["decision_id"]) == (
        "WORKER_LOST",
        recovered.decision.id if recovered.decision else None,
    )
    assert (story[9]["action"], story[9]["operation_id"], story[9]["outcome"]) == (
        "RECOVER",
        "recover-1",
        "applied",
    )
    assert (story[10]["outcome"], story[10]["recorded_outcome"]) == ("replayed", "APPLIED")
    assert story[11]["rejection_code"] == story[12]["rejection_code"] == "stale_version"
    assert story[12]["severity"] == "WARNING"
    assert (story[13]["job_instance_id"], story[13]["reason_code"]) == (instance_id, "LEGAL")
    batch = story[17]
    assert (batch["operation_id"], batch["rows_deleted"]) == ("purge-1", purged.counts.total)
    assert batch["counts"] == purged.counts.as_dict()
    assert story[18]["action"] == "APPLY_PURGE"
    assert all(event["request_id"] is None for event in story)  # no HTTP request here

    # Nothing secret in any log line, events or otherwise.
    secrets = (SENTINEL, PAYLOAD, OWNER.hex(), proposal.evidence_digest, ALICE.reference)
    for line in events.lines:
        json.loads(line)
        for secret in secrets:
            assert secret not in line


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_unit_of_work_emits_nothing(repo, events, fresh_metrics):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))
        assert events.all == []
    assert events.all == []  # left without commit: rolled back, nothing was true
    assert metrics.TRANSITIONS.collect()[0].samples == []
    # The attempt itself was an operation and is counted at once.
    assert metrics.REPOSITORY_OPERATIONS.labels("create_job_execution", "ok")._value.get() == 1

    launch(repo)  # and a committed one is said
    assert events.names() == ["instance.created", "execution.launched"]


@pytest.mark.django_db
def test_events_wait_for_the_outermost_commit(
    repo, events, fresh_metrics, django_capture_on_commit_callbacks
):
    """Inside an outer transaction (here the test's), a unit of work's commit is a
    savepoint: its events wait for the real commit, and a rolled-back one's are
    discarded."""
    with django_capture_on_commit_callbacks(execute=True):
        launch(repo)
        with repo.begin() as uow:
            uow.select_or_create_job_instance(key(run="rolled-back"))
        assert events.all == []
    assert events.names() == ["instance.created", "execution.launched"]


@pytest.mark.django_db(transaction=True)
def test_a_stop_request_and_its_observation(repo, clock, events, fresh_metrics, schema_row):
    operator = operator_service(repo, stale_after=timedelta(minutes=15))
    execution = launch(repo)
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    events.clear()
    operator.stop(execution.id, expected_version=1, actor=ALICE, operation_id="stop-1")
    # The prior status comes from the row each write locked: nothing this
    # process remembers (another worker process may have served the move).
    for token in (OWNER, OWNER, bytes(16)):
        clock.advance(timedelta(seconds=1))
        with repo.begin() as uow:
            uow.observe_execution_control(execution.id, token)
            uow.commit()
    assert events.names() == [
        "execution.stop_requested",
        "operator.request.applied",
        "execution.transitioned",
        "execution.stop_observed",
        "execution.stop_observed",
        "execution.control_observed",
    ]
    assert_catalogued(events)
    requested, _, stopping, *_ = events.all
    assert (requested["changed"], requested["outcome"]) == (True, "applied")
    assert (stopping["from_status"], stopping["to_status"]) == ("STARTED", "STOPPING")
    assert events.all[-1]["owner_matches"] is False
    assert OWNER.hex() not in "".join(events.lines)
    samples = {
        (s.labels["from_status"], s.labels["to_status"]): s.value
        for s in metrics.TRANSITIONS.collect()[0].samples
        if s.name.endswith("_total")
    }
    assert samples == {("STARTING", "STARTED"): 1, ("STARTED", "STOPPING"): 1}


@pytest.mark.django_db
def test_a_conflict_is_said_at_once_with_its_target(repo, events, fresh_metrics):
    execution = move(repo, launch(repo), S.STARTED)
    with pytest.raises(StaleVersion), repo.begin() as uow:
        uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.COMPLETED))
    [conflict] = events.named("repository.conflict")
    assert conflict["severity"] == "WARNING"
    assert (conflict["operation"], conflict["outcome"], conflict["job_execution_id"]) == (
        "transition_job_execution",
        "stale_version",
        execution.id,
    )
    OBSERVER(
        OperationEvent(
            operation="commit_chunk",
            outcome="concurrent_modification",
            seconds=0.01,
            using="default",
            target=("step_execution_id", 42),
            error=ConcurrentModification(),
        )
    )
    last = events.named("repository.conflict")[-1]
    assert (last["outcome"], last["step_execution_id"]) == ("concurrent_modification", 42)


def test_unknown_fields_are_dropped_and_the_line_is_json(events):
    catalogue.emit(
        "instance.created",
        {"job_name": "j", "job_instance_id": 1, "outcome": "ok", "parameters": SENTINEL},
    )
    [line] = [line for line in events.lines if "instance.created" in line]
    document = json.loads(line)
    assert SENTINEL not in line
    assert list(document)[:4] == ["ts", "severity", "event", "request_id"]


def test_the_catalogue_is_documented():
    text = (Path(__file__).parents[2] / "docs" / "observability.md").read_text("utf-8")
    for name, spec in catalogue.CATALOGUE.items():
        assert f"`{name}`" in text, name
        assert spec.severity in {"DEBUG", "INFO", "WARNING", "ERROR"}


@pytest.mark.django_db(transaction=True)
def test_the_short_forms_say_what_the_separate_writes_say(repo, clock, events, fresh_metrics):
    """contract §4.2, decision 159: a fused launch, a step created STARTED and a
    chunk that ends its step emit the event lines of the separate writes they
    stand for, in their order — and only once committed."""
    with repo.begin() as uow:
        launched = uow.launch_job_execution(sentinel_key(), OWNER)
        assert events.names() == []  # said only once durable
        uow.commit()
    launch_names = events.names()
    events.clear()
    execution = launched.execution
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        step = uow.commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=2, committed=1),
            checkpoint=checkpoint(),
            finish=LifecycleTransition(S.COMPLETED),
            exit_code="LOADED",
        )
        uow.commit()
    step_names = events.names()
    assert launch_names == ["instance.created", "execution.launched", "execution.transitioned"]
    assert step_names == [
        "step.created",
        "step.transitioned",
        "step.chunk_committed",
        "step.transitioned",
    ]
    transitions = events.named("step.transitioned")
    assert [(t["from_status"], t["to_status"]) for t in transitions] == [
        ("STARTING", "STARTED"),
        ("STARTED", "COMPLETED"),
    ]
    assert_catalogued(events)


@pytest.mark.django_db(transaction=True)
def test_a_stale_purge_batch_is_reported_failed_at_once(
    repo, clock, events, fresh_metrics, schema_row, settings
):
    """The retention service reports the failed batch (``hooks.report``): the
    event and the purge alert's counter, with the plan's candidates."""
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(0)
    retention = retention_service(repo)
    execution = move(repo, move(repo, launch(repo), S.STARTED, clock=clock), S.COMPLETED)
    clock.advance(timedelta(minutes=1))
    plan = retention.survey(cutoff=clock.now())
    assert plan.instance_ids == [execution.job_instance_id]
    retention.place_hold(
        execution.job_instance_id, actor=ALICE, reason_code="LEGAL", operation_id="hold-9"
    )
    events.clear()
    with pytest.raises(RetentionPlanStale):
        retention.apply(plan, actor=ALICE, operation_id="purge-9")
    [failed] = events.named("purge.batch_failed")
    assert (failed["outcome"], failed["candidates"]) == ("retention_plan_stale", 1)
    # Its REJECTED audit row is said as a rejection, never as an applied batch.
    assert events.names() == ["purge.batch_failed", "operator.request.rejected"]
    rejected = events.all[-1]
    assert (rejected["recorded_outcome"], rejected["rejection_code"]) == (
        "REJECTED",
        "retention_plan_stale",
    )
    samples = {
        s.labels["outcome"]: s.value
        for s in metrics.PURGE_BATCHES.collect()[0].samples
        if s.name.endswith("_total")
    }
    assert samples.get("conflict") == 1
    assert samples.get("applied", 0) == 0
