"""Deadlocks and serialization failures forced on a real PostgreSQL.

A deadlock between an API request (gunicorn) and an administrator's transaction:
the request is the victim (PostgreSQL counts the deadlock; the server's lock
timeout is far longer, so it is not a timeout), answers 409
``concurrent_modification`` (never 500), writes nothing, the administrator
commits and the same request retried succeeds.
Serialization failures of units of work at SERIALIZABLE and REPEATABLE READ are
``ConcurrentModification`` with nothing partial — the refused COMMIT included
(a refusal the server explained is not an unknown outcome). The repository-level
lock timeout and crosswise deadlock are in tests/concurrency/test_faults.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from oxide_batch import models
from oxide_batch.client import OperatorClient
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import ConcurrentModification
from oxide_batch.repository import DjangoJobRepository, FixedClock, faults
from oxide_batch.roles import OPERATOR
from tests.concurrency.support import admin_connection, run_in_threads
from tests.faults.support import in_background, isolate, post
from tests.helpers import key, launch, move
from tests.live import gunicorn, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
WAIT_DEADLINE = 10.0
STATS_DEADLINE = 15.0  # a backend flushes its counters within ~1 s of going idle
SERIALIZATION_FAILURE = "40001"
# The admin's own detector, were the request's to miss the cycle: the admin
# would then be the victim and the test fail, instead of passing on a timeout.
ADMIN_DEADLOCK_TIMEOUT_S = 10
# The server's lock timeout, far past the admin's detector: a request aborted
# by lock_timeout (55P03, also a 409 concurrent_modification) cannot pass here.
SERVER_LOCK_TIMEOUT = "30s"


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with gunicorn(environment={"OXIDE_BATCH_LOCK_TIMEOUT": SERVER_LOCK_TIMEOUT}) as url:
        yield url


# -- a deadlock with an API request ----------------------------------------------------


def orphan_with_a_step() -> tuple[int, int]:
    """A STARTED execution with a STARTED step, silent for an hour (eligible for
    recovery on the server's clock); (execution id, step id)."""
    repo = DjangoJobRepository(FixedClock(datetime.now(UTC) - timedelta(hours=1)))
    execution = move(repo, launch(repo), S.STARTED)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.STARTED))
        uow.commit()
    return execution.id, step.id


def lock_waiter(watcher: psycopg.Connection[Any], table: str, besides: int) -> int:
    """The backend (not ``besides``) blocked on a row lock while reading ``table``."""
    deadline = time.monotonic() + WAIT_DEADLINE
    while time.monotonic() < deadline:
        row = watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> %s AND query LIKE %s",
            (besides, f"%{table}%"),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.005)
    raise AssertionError(f"no request blocked on {table}")


def deadlocks(watcher: psycopg.Connection[Any]) -> int:
    """The deadlocks PostgreSQL counted in the test database, read afresh."""
    watcher.execute("SELECT pg_stat_clear_snapshot()")
    row = watcher.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def deadlocks_after(watcher: psycopg.Connection[Any], before: int) -> int:
    """The count once it moved past ``before`` (a victim reports it when its
    backend goes idle), or as it stands at the deadline."""
    deadline = time.monotonic() + STATS_DEADLINE
    while (count := deadlocks(watcher)) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_a_deadlock_with_an_admin_transaction_is_409_and_the_retry_succeeds(server):
    execution_id, step_id = orphan_with_a_step()
    token = token_for("olga", OPERATOR)
    operator = OperatorClient(server, token, timeout=30)
    proposal = operator.proposal(execution_id)
    assert proposal.eligible, proposal
    body = {
        "expected_version": proposal.version,
        "disposition": "MARK_FAILED",
        "reason_code": "ORPHAN_CONFIRMED",
        "evidence_digest": proposal.evidence_digest,
        "operation_id": "recover-deadlocked",
    }
    url = f"{server}/api/v1/executions/{execution_id}/recover"
    before = models.JobExecution.objects.values("status", "version").get(pk=execution_id)

    with admin_connection() as admin, admin_connection() as watcher:
        admin_pid = admin.info.backend_pid
        deadlocks_before = deadlocks(watcher)
        with admin.transaction():
            # The server's backends keep the default 1 s, counted from when the
            # request starts waiting; the admin closes the cycle milliseconds after
            # seeing it wait, so the request's detector runs first and aborts it.
            admin.execute(f"SET LOCAL deadlock_timeout = '{ADMIN_DEADLOCK_TIMEOUT_S}s'")
            admin.execute("SELECT 1 FROM ob_step_execution WHERE id = %s FOR UPDATE", (step_id,))
            # Recovery locks the execution, then its steps: it blocks on ours.
            answer = in_background(lambda: post(url, token, body))
            lock_waiter(watcher, "ob_step_execution", admin_pid)
            began = time.monotonic()
            # Now the admin wants the execution the request holds: a cycle.
            admin.execute(
                "SELECT 1 FROM ob_job_execution WHERE id = %s FOR UPDATE", (execution_id,)
            )
            waited = time.monotonic() - began
            admin.execute(
                "UPDATE ob_step_execution SET exit_code = 'ADMIN_NOTE' WHERE id = %s", (step_id,)
            )
        status, headers, document = answer.result(timeout=30)
        # A deadlock, detected by the request's backend: not a lock timeout (30 s
        # on the server), not the admin's detector (that would have raised here).
        assert deadlocks_after(watcher, deadlocks_before) == deadlocks_before + 1
    assert waited < ADMIN_DEADLOCK_TIMEOUT_S, waited

    assert status == 409, document
    assert headers["Content-Type"].startswith(PROBLEM_CONTENT_TYPE)
    assert document["code"] == "concurrent_modification", document
    # The request wrote nothing: no transition, no audit row, no decision.
    assert models.JobExecution.objects.values("status", "version").get(pk=execution_id) == before
    assert not models.OperatorRequest.objects.exists()
    assert not models.RecoveryDecision.objects.exists()
    # The administrator's transaction committed.
    assert models.StepExecution.objects.get(pk=step_id).exit_code == "ADMIN_NOTE"

    retried = post(url, token, body)  # the same request, same operation id
    assert retried[0] == 200, retried
    assert (retried[2]["outcome"], retried[2]["execution"]["status"]) == ("APPLIED", "FAILED")
    assert retried[2]["execution"]["version"] == before["version"] + 1
    assert list(models.OperatorRequest.objects.values_list("outcome", flat=True)) == ["APPLIED"]
    print(f"\nthe admin waited {waited:.2f}s for the deadlock detector; request 409, retry 200")


# -- serialization failures of units of work ----------------------------------------------


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE behind a typed error (domain error ← Django's ← psycopg's)."""
    return faults.sqlstate(error.__cause__) if error.__cause__ is not None else None


def exit_codes() -> dict[int, tuple[str | None, int]]:
    return {
        row["id"]: (row["exit_code"], row["version"])
        for row in models.JobExecution.objects.values("id", "exit_code", "version")
    }


def test_serializable_write_skew_is_refused_at_commit_as_a_concurrent_modification(repo):
    """Each reads both executions and writes its own: no row conflict, but the
    second COMMIT would make the history non-serializable, and the server refuses it."""
    first, second = launch(repo, key(run="a")), launch(repo, key(run="b"))
    before = exit_codes()
    read, written = threading.Barrier(2), threading.Barrier(2)
    first_committed = threading.Event()

    def skew(index: int) -> ConcurrentModification | None:
        mine = (first, second)[index]
        with repo.begin() as uow:
            isolate("SERIALIZABLE")
            uow.get_job_execution(first.id)
            uow.get_job_execution(second.id)
            read.wait(10)
            uow.enrich_job_exit_status(mine.id, 0, f"SKEW_{index}")
            written.wait(10)
            if index == 0:
                uow.commit()
                first_committed.set()
                return None
            assert first_committed.wait(10)
            with pytest.raises(ConcurrentModification) as refused:
                uow.commit()
            return refused.value

    outcomes = run_in_threads(2, skew)

    assert all(outcome.ok for outcome in outcomes), [outcome.error for outcome in outcomes]
    assert sqlstate(outcomes[1].value) == SERIALIZATION_FAILURE  # refused, not unknown
    assert exit_codes() == {first.id: ("SKEW_0", 1), second.id: before[second.id]}


def test_repeatable_read_update_of_a_row_changed_since_the_snapshot_rolls_back_whole(repo):
    """The loser had already written another row: that write goes too."""
    contested, own = launch(repo, key(run="a")), launch(repo, key(run="b"))
    before = exit_codes()
    snapshots = threading.Barrier(2)
    winner_committed = threading.Event()

    def winner() -> None:
        with repo.begin() as uow:
            isolate("REPEATABLE READ")
            uow.get_job_execution(contested.id)
            snapshots.wait(10)
            uow.enrich_job_exit_status(contested.id, 0, "WINNER")
            uow.commit()
        winner_committed.set()

    def loser() -> None:
        with repo.begin() as uow:
            isolate("REPEATABLE READ")
            uow.get_job_execution(contested.id)  # the snapshot predates the winner's commit
            snapshots.wait(10)
            uow.enrich_job_exit_status(own.id, 0, "LOSER_OWN")
            assert winner_committed.wait(10)
            with pytest.raises(ConcurrentModification) as refused:
                uow.enrich_job_exit_status(contested.id, 0, "LOSER")
            assert sqlstate(refused.value) == SERIALIZATION_FAILURE
            uow.commit()  # poisoned: raises the same error, commits nothing

    outcomes = run_in_threads(2, lambda index: (winner, loser)[index]())

    assert outcomes[0].ok, outcomes[0].error
    assert isinstance(outcomes[1].error, ConcurrentModification), outcomes[1].error
    assert exit_codes() == {contested.id: ("WINNER", 1), own.id: before[own.id]}
    # The same thread's connection serves a healthy unit of work afterwards.
    with repo.begin() as uow:
        assert uow.get_job_execution(own.id).version == 0
