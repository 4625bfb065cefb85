"""Stop requests and ownership under real concurrency on PostgreSQL (contract
§2.5.1, §2.5.2, §3.2): each contender opens its unit of work, waits at a barrier,
then acts on the same execution row; the row lock serialises them and every interleaving
leaves a consistent execution."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, JobExecution, LifecycleTransition
from oxide_batch.domain.errors import ExecutionOwned
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.concurrency.support import run_in_threads, waiting_on_locks
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
OWNER = b"\x0e" * 16
ROUNDS = 30


def owned_started(repo: DjangoJobRepository, clock: FixedClock, run: str) -> JobExecution:
    execution = launch(repo, key(run=run))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    return move(repo, execution, S.STARTED, clock=clock)


def request_stop(repo: DjangoJobRepository, execution: JobExecution, actor: str) -> Any:
    with repo.begin() as uow:
        result = uow.request_execution_stop(execution.id, execution.version, actor)
        uow.commit()
    return result


def complete(repo: DjangoJobRepository, execution: JobExecution) -> JobExecution:
    with repo.begin() as uow:
        completed = uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    return completed


def observe(repo: DjangoJobRepository, execution: JobExecution) -> Any:
    with repo.begin() as uow:
        control = uow.observe_execution_control(execution.id, OWNER)
        uow.commit()
    return control


def race(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Run both at once (both transactions open before either acts)."""
    barrier = threading.Barrier(2)

    def contend(index: int) -> Any:
        barrier.wait()
        return (first if index == 0 else second)()

    outcomes = run_in_threads(2, contend)
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    return outcomes[0].value, outcomes[1].value


def in_order(
    repo: DjangoJobRepository,
    holder: Callable[[Any], Any],
    waiter: Callable[[], Any],
) -> tuple[Any, Any]:
    """``holder`` acts in an open unit of work and keeps the row lock until
    ``waiter`` is seen blocked on it; ``waiter`` acts after the commit."""
    acted = threading.Event()

    def hold() -> Any:
        with repo.begin() as uow:
            result = holder(uow)
            acted.set()
            assert waiting_on_locks(), "the waiter was not blocked by the row lock"
            uow.commit()
        return result

    def wait() -> Any:
        assert acted.wait(10)
        return waiter()

    outcomes = run_in_threads(2, lambda index: hold() if index == 0 else wait())
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    return outcomes[0].value, outcomes[1].value


# -------------------------------------------------------- stop vs the runtime's completion


def assert_stop_and_completion_consistent(execution: JobExecution, stop: Any) -> None:
    row = models.JobExecution.objects.get(pk=execution.id)
    assert row.status == "COMPLETED", "a stop request never blocks the runtime's CAS"
    assert row.version == execution.version + 1
    if stop.changed:
        # The stop came first: recorded on a STARTED execution, which then completed.
        assert stop.execution.status is S.STARTED
        assert row.stop_requested_at is not None
        assert row.stop_requested_by == "operator:race"
    else:
        # The completion came first: the stop found COMPLETED and did nothing.
        assert stop.execution.status is S.COMPLETED
        assert (row.stop_requested_at, row.stop_requested_by) == (None, None)


def test_a_stop_request_racing_the_runtimes_completion_is_always_consistent(repo, clock):
    seen = {True: 0, False: 0}
    for round_ in range(ROUNDS):
        execution = owned_started(repo, clock, f"stop-complete-{round_}")
        stop, completed = race(
            lambda e=execution: request_stop(repo, e, "operator:race"),
            lambda e=execution: complete(repo, e),
        )
        assert completed.status is S.COMPLETED
        assert_stop_and_completion_consistent(execution, stop)
        seen[stop.changed] += 1
    assert sum(seen.values()) == ROUNDS
    assert not models.JobExecution.objects.filter(status="STOPPING").exists()


def test_a_stop_holding_the_lock_first_is_recorded_and_the_completion_follows(repo, clock):
    execution = owned_started(repo, clock, "stop-first")
    stop, completed = in_order(
        repo,
        lambda uow: uow.request_execution_stop(execution.id, execution.version, "operator:race"),
        lambda: complete(repo, execution),
    )
    assert stop.changed
    assert completed.status is S.COMPLETED
    assert_stop_and_completion_consistent(execution, stop)


def test_a_completion_holding_the_lock_first_turns_the_stop_into_a_no_op(repo, clock):
    execution = owned_started(repo, clock, "complete-first")
    _, stop = in_order(
        repo,
        lambda uow: uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        ),
        lambda: request_stop(repo, execution, "operator:race"),
    )
    assert stop.changed is False
    assert_stop_and_completion_consistent(execution, stop)


# ------------------------------------------------------- owner observation vs a stop


def assert_observation_and_stop_consistent(execution: JobExecution, stop: Any, control: Any):
    assert stop.changed, "the observation never bumps the version before a stop is seen"
    assert control.owner_matches
    row = models.JobExecution.objects.get(pk=execution.id)
    assert row.stop_requested_by == "operator:race"
    if control.stop_requested:
        # The stop came first: the owner saw it and moved the execution to STOPPING.
        assert control.execution.status is S.STOPPING
        assert (row.status, row.version) == ("STOPPING", execution.version + 1)
    else:
        # The observation came first: the stop is pending for the next poll.
        assert control.execution.status is S.STARTED
        assert (row.status, row.version) == ("STARTED", execution.version)


def test_an_owner_observation_racing_a_stop_request_is_always_consistent(repo, clock):
    for round_ in range(ROUNDS):
        execution = owned_started(repo, clock, f"observe-stop-{round_}")
        stop, control = race(
            lambda e=execution: request_stop(repo, e, "operator:race"),
            lambda e=execution: observe(repo, e),
        )
        assert_observation_and_stop_consistent(execution, stop, control)
        # Whatever the order, the owner's next poll stops it.
        assert observe(repo, execution).execution.status is S.STOPPING


def test_a_stop_before_the_observation_is_seen_by_it(repo, clock):
    execution = owned_started(repo, clock, "stop-then-observe")
    stop, control = in_order(
        repo,
        lambda uow: uow.request_execution_stop(execution.id, execution.version, "operator:race"),
        lambda: observe(repo, execution),
    )
    assert control.stop_requested
    assert_observation_and_stop_consistent(execution, stop, control)


def test_an_observation_before_the_stop_leaves_it_pending(repo, clock):
    execution = owned_started(repo, clock, "observe-then-stop")
    control, stop = in_order(
        repo,
        lambda uow: uow.observe_execution_control(execution.id, OWNER),
        lambda: request_stop(repo, execution, "operator:race"),
    )
    assert not control.stop_requested
    assert_observation_and_stop_consistent(execution, stop, control)


# ------------------------------------------------------------------ claims and stops


def test_16_concurrent_claims_with_different_tokens_record_one_owner(repo):
    execution = launch(repo)
    barrier = threading.Barrier(16)

    def contend(index: int) -> Any:
        with repo.begin() as uow:
            barrier.wait()
            uow.claim_execution_owner(execution.id, 0, bytes([index + 1]) * 16)
            uow.commit()
        return index

    outcomes = run_in_threads(16, contend)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    assert len(winners) == 1
    assert all(isinstance(o.error, ExecutionOwned) for o in outcomes if not o.ok)
    row = models.JobExecution.objects.get(pk=execution.id)
    assert bytes(row.owner_token) == bytes([winners[0] + 1]) * 16
    assert row.version == 0


def test_8_concurrent_stop_requests_all_apply_and_the_last_one_wins(repo, clock):
    execution = owned_started(repo, clock, "many-stops")
    barrier = threading.Barrier(8)

    def contend(index: int) -> Any:
        with repo.begin() as uow:
            barrier.wait()
            result = uow.request_execution_stop(
                execution.id, execution.version, f"operator:{index}"
            )
            uow.commit()
        return result

    outcomes = run_in_threads(8, contend)
    assert all(outcome.ok and outcome.value.changed for outcome in outcomes)
    row = models.JobExecution.objects.get(pk=execution.id)
    assert row.stop_requested_by in {f"operator:{index}" for index in range(8)}
    assert (row.status, row.version) == ("STARTED", execution.version)
