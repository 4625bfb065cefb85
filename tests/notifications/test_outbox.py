"""The transactional outbox (issue 41 point 1): every terminal transition of a
job execution writes one event in its own transaction — by the runtime, an
operator or the watchdog's recovery — and nothing else does; a change that
rolls back leaves no event. Django adapter (the outbox is its table)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.notifications import payload
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from tests.helpers import failure, key, launch, move
from tests.services.test_watchdog import TTL, owned_running, watchdog

pytestmark = pytest.mark.django_db
S = BatchStatus


@pytest.fixture(autouse=True)
def granted_ttl(settings) -> None:
    """The claims here are granted the TTL the watchdog judges by (a lease is
    judged by its claim's TTL, decision 212)."""
    settings.OXIDE_BATCH_LEASE_TTL = TTL


def events() -> list[models.NotificationEvent]:
    return list(models.NotificationEvent.objects.order_by("id"))


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ((S.STARTED, S.COMPLETED), "execution.completed"),
        ((S.STARTED, S.FAILED), "execution.failed"),
        ((S.STARTED, S.STOPPING, S.STOPPED), "execution.stopped"),
        ((S.STARTED, S.FAILED, S.ABANDONED), "execution.abandoned"),
    ],
)
def test_each_terminal_transition_writes_one_event_of_its_kind(repo, clock, path, kind) -> None:
    execution = launch(repo)
    for target in path:
        before = len(events())
        execution = move(repo, execution, target, clock=clock)
        written = events()[before:]
        if not target.is_finished:
            assert written == [], target
    (event,) = [e for e in events() if e.kind == kind]
    assert event.job_execution_id == execution.id
    assert event.job_instance_id == execution.job_instance_id
    assert event.job_name == execution.job_name == "import_job"
    assert event.status == execution.status.value
    assert event.occurred_at == execution.ended_at
    assert event.dispatched_at is None
    # FAILED then ABANDONED: two run ends, two events; otherwise one.
    assert len(events()) == (2 if kind == "execution.abandoned" else 1)


def test_a_failure_event_names_its_category_and_failure_id(repo, clock) -> None:
    execution = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    (event,) = events()
    assert event.data["failure"] == {
        "category": "USER_COMPONENT",
        "failure_id": failure().failure_id,
    }
    assert event.data["prior_status"] == "STARTED"
    assert event.data["by"] == "service"
    document = payload(
        kind=event.kind,
        occurred_at=event.occurred_at,
        job_name=event.job_name,
        job_instance_id=event.job_instance_id,
        job_execution_id=event.job_execution_id,
        status=event.status,
        url="https://console.example/x",
        data=event.data,
    )
    assert document["type"] == "execution.failed"
    assert document["timestamp"].endswith("Z")
    assert document["data"]["job_execution_id"] == execution.id
    assert document["data"]["url"] == "https://console.example/x"


def test_chunk_commits_step_transitions_heartbeats_and_starts_write_nothing(repo, clock) -> None:
    execution = launch(repo)
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, execution.version, b"\x01" * 16)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, committed=1))
        uow.observe_execution_control(execution.id, b"\x01" * 16)
        uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.COMPLETED))
        uow.commit()
    assert events() == []


def test_a_change_that_rolls_back_after_its_update_leaves_no_event(repo, clock) -> None:
    execution = move(repo, launch(repo), S.STARTED, clock=clock)

    def fail_after_the_write() -> None:
        with repo.begin() as uow:
            uow.transition_job_execution(
                execution.id, execution.version, LifecycleTransition(S.FAILED, failure=failure())
            )
            # The UPDATE and the INSERT were sent: the row exists in the transaction…
            assert models.NotificationEvent.objects.count() == 1
            raise RuntimeError("injected fault after the write, before the commit")

    with pytest.raises(RuntimeError, match="injected"):
        fail_after_the_write()
    # …and left with the change.
    assert events() == []
    assert models.JobExecution.objects.get(pk=execution.id).status == "STARTED"


def test_a_database_fault_before_the_commit_leaves_no_event(repo, clock) -> None:
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
        with pytest.raises(Exception), connection.cursor() as cursor:  # noqa: B017, PT011
            cursor.execute("SELECT * FROM ob_no_such_table")
    assert events() == []


def test_an_operator_recovery_is_one_recovered_event_with_its_decision(repo, clock) -> None:
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
    execution = owned_running(repo, clock, "operator-run")
    clock.advance(TTL + timedelta(seconds=1))
    proposal = service.propose(execution.id)
    service.recover(
        execution.id,
        expected_version=proposal.version,
        disposition=RecoveryDisposition.ABANDON,
        reason_code="ORPHAN_CONFIRMED",
        evidence_digest=proposal.evidence_digest,
        actor=Actor("alice"),
        operation_id="op-1",
    )
    (event,) = events()
    assert event.kind == "execution.recovered"
    assert event.status == "ABANDONED"
    assert event.data["by"] == "operator"
    assert event.data["decision"]["resulting_status"] == "ABANDONED"
    assert event.data["decision"]["reason_code"] == "ORPHAN_CONFIRMED"
    assert event.data["decision"]["operator_reference"] == "alice"


def test_the_watchdogs_recovery_says_the_watchdog_did_it(repo, clock) -> None:
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
    execution = owned_running(repo, clock, "dead-worker", steps=2)
    clock.advance(TTL + timedelta(milliseconds=1))
    watchdog(service).run_pass()
    (event,) = events()
    assert event.kind == "execution.recovered"
    assert event.job_execution_id == execution.id
    assert event.status == "FAILED"
    assert event.data["by"] == "watchdog"
    assert event.data["decision"]["eligibility"] == "lease_expired"
    assert len(event.data["decision"]["resolved_step_ids"]) == 2


def test_a_second_execution_of_the_same_instance_gets_its_own_event(repo, clock) -> None:
    first = move(repo, launch(repo, key(run="r")), S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow:
        second = uow.create_job_execution(first.job_instance_id)
        uow.commit()
    move(repo, second, S.STARTED, S.COMPLETED, clock=clock)
    assert [(e.job_execution_id, e.kind) for e in events()] == [
        (first.id, "execution.failed"),
        (second.id, "execution.completed"),
    ]
