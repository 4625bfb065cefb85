"""The repository's side of a lost write (contract §2.5.14, decision 211): the
launch's gate, the resolution (its statements, its no-op), a resolved marker
no longer counting as an unknown commit, and a later loss marking anew.

``adapter``: the in-memory fake keeps the marker as a flag and does not gate
launches; the integrator may widen these to both adapters once it does."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import LostWriteUnresolved, VersionAhead
from oxide_batch.domain.lost_write import LostWriteResolution
from tests.helpers import launch, move

pytestmark = [pytest.mark.contract, pytest.mark.adapter]
S = BatchStatus
RESOLUTION = LostWriteResolution("alice", "TARGET_CHECKED", "ledger checked", "lw-1")


def lose_a_write(repo, execution):
    models.JobExecution.objects.filter(pk=execution.id).update(version=F("version") - 1)
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
    with repo.begin() as uow:
        return uow.get_job_execution(execution.id)


@pytest.fixture
def marked_stopped(repo, clock):
    started = move(repo, launch(repo), S.STARTED, clock=clock)
    return move(repo, lose_a_write(repo, started), S.STOPPING, S.STOPPED, clock=clock)


def test_a_stopped_execution_with_a_marker_refuses_the_restart(repo, marked_stopped):
    with repo.begin() as uow, pytest.raises(LostWriteUnresolved) as error:
        uow.create_job_execution(marked_stopped.job_instance_id)
    assert (error.value.instance_id, error.value.execution_id) == (
        marked_stopped.job_instance_id,
        marked_stopped.id,
    )


def test_resolving_is_one_locking_read_and_one_write_and_lets_the_restart_go(repo, marked_stopped):
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        done = uow.resolve_lost_write(marked_stopped.id, RESOLUTION)
        uow.commit()
    statements = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(("SELECT", "UPDATE"))
    ]
    assert [sql.split()[0] for sql in statements] == ["SELECT", "UPDATE"]
    assert done.changed
    assert (done.execution.status, done.execution.version) == (S.STOPPED, marked_stopped.version)
    with repo.begin() as uow:
        assert not uow.recovery_evidence(marked_stopped.id).lost_write
        assert uow.create_job_execution(marked_stopped.job_instance_id).attempt == 2
        uow.commit()


def test_resolving_without_an_unresolved_marker_writes_nothing(repo, marked_stopped):
    with repo.begin() as uow:
        uow.resolve_lost_write(marked_stopped.id, RESOLUTION)
        uow.commit()
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        again = uow.resolve_lost_write(marked_stopped.id, RESOLUTION)
    assert not again.changed
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]


def test_a_later_loss_marks_the_execution_anew(repo, clock):
    started = move(repo, launch(repo), S.STARTED, clock=clock)
    current = lose_a_write(repo, started)
    with repo.begin() as uow:
        uow.resolve_lost_write(started.id, RESOLUTION)
        uow.commit()
    lose_a_write(repo, move(repo, current, S.STOPPING, clock=clock))
    row = models.JobExecution.objects.get(pk=started.id)
    assert row.lost_write is not None
    assert row.lost_write_resolution is None
