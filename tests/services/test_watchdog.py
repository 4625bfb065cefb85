"""The lease watchdog's rules (contract §2.5.7), with a
fixed clock on both databases: what a pass recovers and how (the operator's
audited MARK_FAILED as the watchdog), what it leaves alone (unknown commits,
live leases, executions without an owner), its bound, its dry run, its
operation ids (several watchdogs make one decision), and when it holds off.

On the Django adapter (``repo``, a database): a pass reads its candidates with
a selector (SQL), and what it recovers is checked in the stored rows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, FailureCategory, LifecycleTransition
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.watchdog import (
    LEASE_EXPIRED,
    ActionKind,
    Holdoff,
    Watchdog,
    operation_id,
    watchdog_actor,
)
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
TTL = timedelta(seconds=30)
OWNER = b"\x05" * 16
WORKER = WorkerIdentity(host="worker-3", pid=4122, client="oxide-batch 0.6.0")


@pytest.fixture(autouse=True)
def granted_ttl(settings) -> None:
    """The claims here are granted the watchdog's TTL: a lease is judged by the
    TTL its claim was granted (contract §2.5.3, decision 212)."""
    settings.OXIDE_BATCH_LEASE_TTL = TTL


@pytest.fixture
def service(repo: DjangoJobRepository) -> OperatorService:
    return bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)


def watchdog(service: OperatorService, **options: object) -> Watchdog:
    return bootstrap.watchdog(service, actor=Actor("watchdog@test-host"), **options)  # type: ignore[arg-type]


def owned_running(repo: DjangoJobRepository, clock: FixedClock, run: str, *, steps: int = 1):
    """A claimed, STARTED execution with ``steps`` running steps, each with a chunk."""
    execution = launch(repo, key(run=run))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER, worker=WORKER)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        for index in range(steps):
            step = uow.create_step_execution(execution.id, f"step{index}")
            step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
            uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, committed=1))
        uow.commit()
    return execution


def test_a_pass_fails_an_owned_execution_whose_lease_expired_as_an_audited_recovery(
    repo, clock, service
) -> None:
    execution = owned_running(repo, clock, "dead", steps=2)
    clock.advance(TTL + timedelta(milliseconds=1))
    report = watchdog(service).run_pass()
    (action,) = report.actions
    assert (action.job_execution_id, action.kind) == (execution.id, ActionKind.RECOVERED)
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution.id)
    assert action.decision_id == decision.id
    assert (decision.reason_code, decision.operator_reference) == (
        LEASE_EXPIRED,
        "watchdog@test-host",
    )
    assert (decision.eligibility, decision.resulting_status, decision.operator_user_id) == (
        "lease_expired",
        "FAILED",
        None,
    )
    assert len(decision.resolved_step_ids) == 2  # the steps are resolved, the worker fenced
    # What the watchdog decided on names the owner (decision 314).
    assert (decision.evidence or {})["owner"] == {
        "host": "worker-3",
        "pid": 4122,
        "name": None,
        "client": "oxide-batch 0.6.0",
        "user": None,
    }
    assert (decision.evidence or {})["owner_text"] == (
        "an unknown user on worker-3, pid 4122, oxide-batch 0.6.0"
    )
    row = models.JobExecution.objects.get(pk=execution.id)
    assert (row.status, row.failure_category) == ("FAILED", FailureCategory.STALE_RECOVERED.value)
    request = models.OperatorRequest.objects.get(job_execution_id=execution.id)
    assert (request.action, request.outcome, request.operation_id) == (
        "RECOVER",
        "APPLIED",
        action.operation_id,
    )
    assert action.operation_id is not None
    assert action.operation_id.startswith(f"watchdog:{execution.id}:")
    assert action.lease_expired_at == clock.now() - timedelta(milliseconds=1)


def test_a_live_lease_is_left_alone_up_to_its_expiry(repo, clock, service) -> None:
    owned_running(repo, clock, "alive")
    clock.advance(TTL)  # expires strictly after the TTL
    assert watchdog(service).run_pass().actions == ()
    assert not models.RecoveryDecision.objects.exists()


def test_an_execution_without_an_owner_keeps_the_inactivity_rule(repo, clock, service) -> None:
    move(repo, launch(repo, key(run="unowned")), S.STARTED, clock=clock)
    clock.advance(timedelta(minutes=20))  # stale for an operator, but no lease to expire
    assert watchdog(service).run_pass().actions == ()
    assert not models.RecoveryDecision.objects.exists()


@pytest.mark.parametrize("where", ["step", "execution"])
def test_an_unknown_commit_is_left_to_a_human(repo, clock, service, where: str) -> None:
    execution = owned_running(repo, clock, f"unknown-{where}")
    unknown = FailureSummary(FailureCategory.UNKNOWN_COMMIT, 41)
    with repo.begin() as uow:
        if where == "step":
            (step,) = uow.step_executions(execution.id)
            uow.transition_step_execution(
                step.id, step.version, LifecycleTransition(S.UNKNOWN, failure=unknown)
            )
        else:
            current = uow.get_job_execution(execution.id)
            uow.transition_job_execution(
                execution.id, current.version, LifecycleTransition(S.UNKNOWN, failure=unknown)
            )
        uow.commit()
    clock.advance(TTL * 4)
    report = watchdog(service).run_pass()
    if where == "step":
        (action,) = report.actions
        assert (action.kind, action.detail) == (ActionKind.SKIPPED, "unknown_commit")
    else:
        assert report.actions == ()  # an UNKNOWN execution is no lease's to expire
    assert not models.RecoveryDecision.objects.exists()
    assert not models.OperatorRequest.objects.exists()


def test_a_pass_recovers_at_most_its_limit_oldest_ids_first(repo, clock, service) -> None:
    ids = [owned_running(repo, clock, f"run-{n}").id for n in range(5)]
    clock.advance(TTL * 2)
    first = watchdog(service, limit=2).run_pass()
    assert [a.job_execution_id for a in first.actions] == ids[:2]
    second = watchdog(service, limit=2).run_pass()
    assert [a.job_execution_id for a in second.actions] == ids[2:4]
    assert models.RecoveryDecision.objects.count() == 4


def test_skipped_executions_do_not_use_up_the_limit(repo, clock, service) -> None:
    stuck = owned_running(repo, clock, "stuck")
    with repo.begin() as uow:
        (step,) = uow.step_executions(stuck.id)
        unknown = FailureSummary(FailureCategory.UNKNOWN_COMMIT, 9)
        uow.transition_step_execution(
            step.id, step.version, LifecycleTransition(S.UNKNOWN, failure=unknown)
        )
        uow.commit()
    dead = owned_running(repo, clock, "dead")
    clock.advance(TTL * 2)
    report = watchdog(service, limit=1).run_pass()
    assert [(a.job_execution_id, a.kind) for a in report.actions] == [
        (stuck.id, ActionKind.SKIPPED),
        (dead.id, ActionKind.RECOVERED),
    ]


def test_a_dry_run_lists_and_changes_nothing(repo, clock, service) -> None:
    execution = owned_running(repo, clock, "dry")
    clock.advance(TTL * 2)
    before = models.JobExecution.objects.values().get(pk=execution.id)
    (action,) = watchdog(service, dry_run=True).run_pass().actions
    assert (action.kind, action.decision_id) == (ActionKind.WOULD_RECOVER, None)
    assert models.JobExecution.objects.values().get(pk=execution.id) == before
    assert not models.OperatorRequest.objects.exists()


def test_a_second_watchdog_replays_the_first_ones_decision(repo, clock, service) -> None:
    """The operation id is the execution and its evidence digest: the second
    watchdog's request is the same request, answered from the audit."""
    execution = owned_running(repo, clock, "twice")
    clock.advance(TTL * 2)
    first, second = (
        watchdog(service),
        bootstrap.watchdog(service, actor=Actor("watchdog@other-host")),
    )
    proposal = service.propose(execution.id)
    applied = first._consider(proposal)
    replayed = second._consider(proposal)
    assert (applied.kind, replayed.kind) == (ActionKind.RECOVERED, ActionKind.REPLAYED)
    assert applied.operation_id == replayed.operation_id == operation_id(proposal)
    assert replayed.decision_id == applied.decision_id
    assert models.RecoveryDecision.objects.count() == 1
    assert models.OperatorRequest.objects.count() == 1


def test_a_worker_that_wrote_after_the_candidates_were_read_is_refused_and_audited(
    repo, clock, service
) -> None:
    execution = owned_running(repo, clock, "late")
    clock.advance(TTL * 2)
    proposal = service.propose(execution.id)
    with repo.begin() as uow:  # the worker was alive after all
        uow.observe_execution_control(execution.id, OWNER)
        uow.commit()
    action = watchdog(service)._consider(proposal)
    assert (action.kind, action.detail) == (ActionKind.REFUSED, "execution_not_stale")
    assert models.JobExecution.objects.get(pk=execution.id).status == "STARTED"
    (request,) = models.OperatorRequest.objects.all()
    assert (request.outcome, request.rejection_code) == ("REJECTED", "execution_not_stale")
    # Changed evidence is a new operation id on the next pass, not a conflict.
    clock.advance(TTL * 2)
    (again,) = watchdog(service).run_pass().actions
    assert again.kind is ActionKind.RECOVERED
    assert again.operation_id != action.operation_id


def test_the_actor_names_the_host_in_the_actor_character_set() -> None:
    assert watchdog_actor("batch-7.example.com").reference == "watchdog@batch-7.example.com"
    assert watchdog_actor("host with spaces/ä").reference == "watchdog@host-with-spaces--"
    assert len(watchdog_actor("h" * 300).reference) == 128


# ---------------------------------------------------------------------- the hold-off


class Now:
    def __init__(self, clock: FixedClock) -> None:
        self.clock = clock

    def __call__(self):  # type: ignore[no-untyped-def]
        return self.clock.now()


def test_a_started_watchdog_holds_off_for_one_ttl(clock: FixedClock) -> None:
    holdoff = Holdoff(ttl=TTL, now=Now(clock))
    holdoff.started()
    assert holdoff.reached() == clock.now() + TTL
    clock.advance(TTL)
    assert holdoff.reached() is None


def test_after_an_outage_it_holds_off_one_ttl_from_the_reconnection(clock: FixedClock) -> None:
    holdoff = Holdoff(ttl=TTL, now=Now(clock))
    assert holdoff.reached() is None
    holdoff.unreachable()
    clock.advance(timedelta(minutes=5))  # the outage, longer than any lease
    back = clock.now()
    assert holdoff.reached() == back + TTL
    assert holdoff.why == "reconnected"
    clock.advance(TTL - timedelta(milliseconds=1))
    assert holdoff.reached() == back + TTL
    clock.advance(timedelta(milliseconds=1))
    assert holdoff.reached() is None


def test_a_database_server_younger_than_a_ttl_holds_it_off_until_it_is_a_ttl_old(
    clock: FixedClock,
) -> None:
    holdoff = Holdoff(ttl=TTL, now=Now(clock))
    assert holdoff.reached(server_up_for=timedelta(seconds=10)) == clock.now() + timedelta(
        seconds=20
    )
    assert holdoff.why == "database_started"
    clock.advance(timedelta(seconds=19))
    assert holdoff.reached(server_up_for=timedelta(seconds=29)) is not None
    clock.advance(timedelta(seconds=1))
    assert holdoff.reached(server_up_for=TTL + timedelta(seconds=1)) is None
