"""A session killed between its locking read and its write (an admin's
``pg_terminate_backend``, a crashed backend): the row lock goes with it, the
write never happens, and the caller is told ``Unavailable`` — not
``CommitOutcomeUnknown``: no COMMIT was sent, so nothing can have committed.
A plain retry then succeeds."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import Unavailable
from oxide_batch.roles import RUNTIME
from tests.faults.proxy import FaultProxy
from tests.faults.support import in_background, post, stored
from tests.helpers import launch
from tests.live import token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
WRITE = b'UPDATE "ob_job_execution"'
TABLE = models.JobExecution._meta.db_table


def locking_session(direct: psycopg.Connection[Any]) -> int:
    """The pid of the one session idle in a transaction that locks a row of the
    table (the statement text in pg_stat_activity is cut at 1 kB, before the
    lock clause)."""
    deadline = time.monotonic() + 5
    while True:
        pids = direct.execute(
            "SELECT DISTINCT activity.pid FROM pg_stat_activity activity"
            " JOIN pg_locks lock ON lock.pid = activity.pid"
            " WHERE activity.state = 'idle in transaction' AND lock.relation = %s::regclass",
            (TABLE,),
        ).fetchall()
        if pids or time.monotonic() > deadline:
            assert len(pids) == 1, pids
            return int(pids[0][0])
        time.sleep(0.05)


def lock_row(direct: psycopg.Connection[Any], pk: int) -> None:
    direct.execute(f"SELECT id FROM {TABLE} WHERE id = %s FOR UPDATE NOWAIT", (pk,))


def kill_between_read_and_write(direct: psycopg.Connection[Any], pk: int) -> None:
    """With the session frozen before its write: the row is locked; terminate
    the session (waiting for it to end); the lock is gone."""
    with pytest.raises(psycopg.errors.LockNotAvailable):
        lock_row(direct, pk)
    pid = locking_session(direct)
    assert direct.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    lock_row(direct, pk)  # autocommit: taken and released at once


def test_in_process_the_repository_raises_unavailable_and_nothing_committed(
    repo, proxied: FaultProxy, direct
):
    execution = launch(repo)
    hold = proxied.hold(WRITE)

    def transition() -> None:
        with repo.begin() as uow:
            uow.transition_job_execution(
                execution.id, execution.version, LifecycleTransition(S.STARTED)
            )
            uow.commit()

    outcome = in_background(transition)
    assert hold.reached.wait(10)
    kill_between_read_and_write(direct, execution.id)
    hold.release()
    assert isinstance(outcome.exception(timeout=15), Unavailable)
    assert stored(direct, models.JobExecution, execution.id) == ("STARTING", execution.version)

    with repo.begin() as uow:
        retried = uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.STARTED)
        )
        uow.commit()
    assert stored(direct, models.JobExecution, execution.id) == ("STARTED", retried.version)
    assert retried.version == execution.version + 1


def test_over_http_the_answer_is_503_unavailable_and_a_retry_succeeds(
    served: str, proxy: FaultProxy, direct
):
    client = RuntimeClient(served, token_for("runner", RUNTIME), timeout=20, retry_budget=0)
    _, execution = client.launch("killed_job", {"run": "1"})
    hold = proxy.hold(WRITE)
    answer = in_background(
        lambda: post(
            f"{served}/api/v1/executions/{execution.id}/transition",
            client.token,
            {"expected_version": execution.version, "status": "STARTED"},
        )
    )
    assert hold.reached.wait(10)
    kill_between_read_and_write(direct, execution.id)
    hold.release()
    status, headers, problem = answer.result(timeout=25)
    assert (status, problem["code"]) == (503, "unavailable")
    assert int(headers["Retry-After"]) > 0
    assert stored(direct, models.JobExecution, execution.id) == ("STARTING", execution.version)

    started = client.transition(execution, execution.version, S.STARTED)
    assert (started.status, started.version) == (S.STARTED, execution.version + 1)
