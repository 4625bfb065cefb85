"""A runtime write that leaves the status alone is a HOT update (decision 170).

PostgreSQL writes a heap-only tuple — no new entry in any index — when no
indexed column changes and the row's page has room. Every owner observation
(the heartbeat), exit status and claim of an execution, and every chunk commit
of a step, leave the status alone; they must not touch an index. The counters
are PostgreSQL's own (``pg_stat_user_tables``), flushed by this session.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from tests.helpers import launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
OWNER = b"\x05" * 16


def updates(table: str) -> tuple[int, int]:
    """(updates, HOT updates) of ``table`` so far, this session's included."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
            [table],
        )
        total, hot = cursor.fetchone()
    return int(total), int(hot)


def test_the_hot_tables_leave_room_on_each_page():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class "
            "WHERE relname IN ('ob_job_execution', 'ob_step_execution') ORDER BY relname"
        )
        assert cursor.fetchall() == [
            ("ob_job_execution", ["fillfactor=90"]),
            ("ob_step_execution", ["fillfactor=90"]),
        ]


def test_heartbeats_exit_status_and_chunk_commits_touch_no_index(repo, clock):
    execution = launch(repo)
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, OWNER)
        uow.commit()
    execution = move(repo, execution, S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.commit()

    before = updates("ob_job_execution")
    for _ in range(20):
        clock.advance(timedelta(seconds=1))
        with repo.begin() as uow:
            uow.observe_execution_control(execution.id, OWNER)
            uow.commit()
    with repo.begin() as uow:
        execution = uow.enrich_job_exit_status(execution.id, execution.version, "LOADING")
        uow.commit()
    after = updates("ob_job_execution")
    assert after[0] - before[0] == 21
    assert after[1] - before[1] == 21, "every write that kept the status was HOT"

    before = updates("ob_step_execution")
    for _ in range(20):
        clock.advance(timedelta(seconds=1))
        with repo.begin() as uow:
            step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1, committed=1))
            uow.commit()
    after = updates("ob_step_execution")
    assert (after[0] - before[0], after[1] - before[1]) == (20, 20)

    # A status change moves an indexed column: not HOT, as it must not be.
    before = updates("ob_job_execution")
    with repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    after = updates("ob_job_execution")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)
