"""Database faults on a real PostgreSQL map to the repository's typed errors:
lock/deadlock conflicts → ConcurrentModification, a connection lost while
COMMIT is in flight → CommitOutcomeUnknown, an unreachable server → Unavailable.
After each, the repository keeps working without a restart."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from oxide_batch import models
from oxide_batch.checks import schema_version_check
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import CommitOutcomeUnknown, ConcurrentModification, Unavailable
from tests.concurrency.support import backend_pid, run_in_threads, terminate
from tests.helpers import key, launch

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus


def test_a_lock_timeout_is_a_concurrent_modification_and_poisons_the_uow(repo):
    execution = launch(repo)
    locked, release, committed = threading.Event(), threading.Event(), threading.Event()

    def holder():
        with repo.begin() as uow:
            uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))
            locked.set()
            release.wait(10)
            uow.commit()
        committed.set()

    def contender():
        locked.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        uow = repo.begin()
        with uow:
            with pytest.raises(ConcurrentModification):
                uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.FAILED))
            release.set()
            # A failed statement aborted the transaction: commit must not pretend.
            with pytest.raises(ConcurrentModification):
                uow.commit()
        # The same connection serves the next unit of work.
        committed.wait(10)
        with repo.begin() as retry:
            return retry.get_job_execution(execution.id)

    outcomes = run_in_threads(2, lambda index: holder() if index == 0 else contender())
    assert all(outcome.ok for outcome in outcomes), [outcome.error for outcome in outcomes]
    assert outcomes[1].value.status is S.STARTED
    assert models.JobExecution.objects.get(pk=execution.id).version == 1


def test_a_deadlock_is_a_concurrent_modification_with_no_partial_write(repo):
    first = launch(repo, key(run="a"))
    second = launch(repo, key(run="b"))
    barrier = threading.Barrier(2)

    def crosswise(index: int):
        mine, theirs = (first, second) if index == 0 else (second, first)
        with repo.begin() as uow:
            uow.enrich_job_exit_status(mine.id, 0, f"MINE_{index}")
            barrier.wait()
            uow.enrich_job_exit_status(theirs.id, 0, f"THEIRS_{index}")
            uow.commit()

    outcomes = run_in_threads(2, crosswise)
    errors = [outcome.error for outcome in outcomes if not outcome.ok]
    assert len(errors) == 1
    assert isinstance(errors[0], ConcurrentModification)
    winner = next(index for index, outcome in enumerate(outcomes) if outcome.ok)
    codes = set(models.JobExecution.objects.values_list("exit_code", flat=True))
    assert codes == {f"MINE_{winner}", f"THEIRS_{winner}"}
    assert set(models.JobExecution.objects.values_list("version", flat=True)) == {1}


def test_a_connection_lost_while_committing_is_commit_outcome_unknown(repo):
    with repo.begin() as uow:
        uow.select_or_create_job_instance(key())
        terminate(backend_pid())
        with pytest.raises(CommitOutcomeUnknown):
            uow.commit()
    # The caller re-reads through a healthy unit of work before deciding anything.
    with repo.begin() as uow:
        assert uow.find_job_instance(key()) is None


def test_a_server_side_disconnect_before_a_statement_is_unavailable_then_recovers(repo):
    execution = launch(repo)
    terminate(backend_pid())
    with pytest.raises(Unavailable), repo.begin() as uow:
        uow.get_job_execution(execution.id)
    with repo.begin() as uow:
        assert uow.get_job_execution(execution.id) == execution


@pytest.fixture
def unreachable_database():
    """Point the connection at a port nobody listens on, then restore it."""
    settings = connection.settings_dict
    saved = settings["PORT"], settings.get("OPTIONS", {}).get("connect_timeout")
    connection.close()
    settings["PORT"] = "1"
    settings.setdefault("OPTIONS", {})["connect_timeout"] = 2
    yield
    connection.close()
    settings["PORT"], settings["OPTIONS"]["connect_timeout"] = saved


def test_an_unreachable_server_is_unavailable(repo, unreachable_database):
    with pytest.raises(Unavailable), repo.begin() as uow:
        uow.find_job_instance(key())
    with pytest.raises(Unavailable):
        repo.descriptor()
    assert [message.id for message in schema_version_check()] == ["oxide_batch.W003"]
