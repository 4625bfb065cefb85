"""contract §4.2 "Fewer round trips" in the repository: the launch, a step created
STARTED, a finishing chunk and a transition with an exit code each leave the
rows exactly where the separate writes would, written once, with the same
refusals in the same order, and within their query budgets."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    CompletedInstance,
    CountExhausted,
    DefinitionNotFound,
    ExecutionAlreadyActive,
    ExecutionOwned,
    IllegalTransition,
    InvalidState,
    StaleVersion,
    VersionAhead,
)
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.state import StateEnvelope
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
TOKEN = bytes(range(16))
OTHER = bytes(range(1, 17))


def statements(operation: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


def launched(repo, job_key=None, token=TOKEN):
    with repo.begin() as uow:
        result = uow.launch_job_execution(job_key or key(), token)
        uow.commit()
    return result


def test_a_launch_creates_the_instance_and_a_claimed_started_attempt_at_version_1(repo, clock):
    result = launched(repo)
    execution = result.execution
    assert result.selection.created
    assert (execution.status, execution.version, execution.attempt) == (S.STARTED, 1, 1)
    assert execution.started_at == execution.created_at == clock.now()
    row = models.JobExecution.objects.get(pk=execution.id)
    assert (row.status, row.version, bytes(row.owner_token)) == ("STARTED", 1, TOKEN)
    assert row.started_at == row.created_at == row.last_activity_at


def test_a_launch_after_a_failed_attempt_is_a_restart(repo, clock):
    first = launched(repo).execution
    move(repo, first, S.FAILED, clock=clock)
    result = launched(repo, token=OTHER)
    assert not result.selection.created
    assert (result.execution.attempt, result.execution.restart_of_id) == (2, first.id)


@pytest.mark.parametrize(
    ("prior", "refusal"),
    [((S.STARTED,), ExecutionAlreadyActive), ((S.STARTED, S.COMPLETED), CompletedInstance)],
)
def test_a_refused_launch_writes_nothing(repo, clock, prior, refusal):
    first = move(repo, launch(repo), *prior, clock=clock)
    before = models.JobExecution.objects.count()
    with repo.begin() as uow, pytest.raises(refusal):
        uow.launch_job_execution(key(), TOKEN)
    assert models.JobExecution.objects.count() == before
    assert models.JobExecution.objects.get(pk=first.id).version == first.version


def test_a_refused_launch_of_a_new_instance_leaves_no_instance(repo):
    with repo.begin() as uow, pytest.raises(DefinitionNotFound):
        uow.launch_job_execution(key("fresh_job"), TOKEN, definition_digest="ab" * 32)
    assert not models.JobInstance.objects.filter(job_name="fresh_job").exists()
    assert not models.JobExecution.objects.exists()


def test_a_launch_is_the_instance_the_lock_the_latest_and_one_insert(repo):
    with repo.begin() as uow:
        new = statements(lambda: uow.launch_job_execution(key(), TOKEN))
        uow.rollback()
    move_first = launched(repo)
    move(repo, move_first.execution, S.FAILED)
    with repo.begin() as uow:
        restart = statements(lambda: uow.launch_job_execution(key(), OTHER))
    # Insert-on-conflict; lock the instance; the latest attempt; the built-in
    # legacy definition a first attempt is bound to; the insert.
    assert len(new) == 5
    assert [sql.split()[0] for sql in (new[0], new[-1])] == ["INSERT", "INSERT"]
    # A restart keeps the latest attempt's definition, and reads the existing
    # instance after its insert-on-conflict instead.
    assert len(restart) == 5
    assert sum(sql.startswith("UPDATE") for sql in new + restart) == 0


def test_a_step_created_started_is_inserted_at_version_1_with_its_takeover(repo, clock):
    execution = launched(repo).execution
    checkpoint = StateEnvelope("s", 1, {"offset": 7})
    with repo.begin(owner_token=TOKEN) as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        assert uow.write_control(execution.id) == WriteControl(False, True, False)
        uow.commit_chunk(step.id, 1, ExecutionCounts(read=7), checkpoint=checkpoint)
        uow.commit()
    assert (step.status, step.version, step.started_at) == (S.STARTED, 1, clock.now())
    move(repo, execution, S.FAILED, clock=clock)
    restart = launched(repo, token=OTHER).execution
    with repo.begin() as uow:
        created = []
        sql = statements(
            lambda: created.append(uow.create_step_execution(restart.id, "load", started=True))
        )
        state = uow.created_step_state(created[0].id)
        uow.commit()
    assert state is not None
    assert state.checkpoint == checkpoint
    assert state.context is None
    assert state.step.counts.read == 7
    # Lock the parent, the earlier row, the insert (as a STARTING create).
    assert len(sql) == 3
    assert sql[-1].startswith("INSERT")


@pytest.fixture
def started_step(repo):
    execution = launched(repo).execution
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.commit()
    return execution, step


def test_a_finishing_chunk_ends_the_step_in_one_cas(repo, started_step):
    _, step = started_step
    with repo.begin(owner_token=TOKEN) as uow:
        sql = statements(
            lambda: uow.commit_chunk(
                step.id,
                1,
                ExecutionCounts(committed=1),
                finish=LifecycleTransition(S.COMPLETED),
                exit_code="DONE",
            )
        )
        uow.commit()
    row = models.StepExecution.objects.get(pk=step.id)
    assert (row.status, row.version, row.exit_code, row.committed_count) == (
        "COMPLETED",
        2,
        "DONE",
        1,
    )
    assert row.ended_at is not None
    assert len(sql) == 2
    assert sql[1].startswith("UPDATE")


@pytest.mark.parametrize(
    ("expected", "counts", "refusal"),
    [
        (0, ExecutionCounts(), StaleVersion),
        (5, ExecutionCounts(), VersionAhead),
        (1, ExecutionCounts(read=2**63 - 1), CountExhausted),
    ],
)
def test_a_refused_finishing_chunk_leaves_the_step_started(
    repo, started_step, expected, counts, refusal
):
    _, step = started_step
    if refusal is CountExhausted:
        with repo.begin() as uow:
            uow.commit_chunk(step.id, 1, ExecutionCounts(read=1))
            uow.commit()
        expected = 2
    before = models.StepExecution.objects.values().get(pk=step.id)
    with repo.begin() as uow, pytest.raises(refusal):
        uow.commit_chunk(
            step.id, expected, counts, finish=LifecycleTransition(S.COMPLETED), exit_code="X"
        )
    assert models.StepExecution.objects.values().get(pk=step.id) == before


def test_a_finish_the_table_refuses_is_refused_after_the_chunk_rules(repo, started_step):
    _, step = started_step
    with repo.begin() as uow, pytest.raises(IllegalTransition):
        uow.commit_chunk(step.id, 1, ExecutionCounts(), finish=LifecycleTransition(S.STARTING))
    with repo.begin() as uow:
        uow.transition_step_execution(step.id, 1, LifecycleTransition(S.STOPPING))
        uow.commit()
    with repo.begin() as uow, pytest.raises(InvalidState):
        uow.commit_chunk(step.id, 2, ExecutionCounts(), finish=LifecycleTransition(S.COMPLETED))


def test_a_write_carrying_another_token_is_execution_owned_before_the_version(repo, started_step):
    execution, step = started_step
    with repo.begin(owner_token=OTHER) as uow, pytest.raises(ExecutionOwned):
        uow.commit_chunk(step.id, 99, ExecutionCounts())
    with repo.begin(owner_token=OTHER) as uow, pytest.raises(ExecutionOwned):
        uow.transition_job_execution(
            execution.id, 99, LifecycleTransition(S.COMPLETED), by_runtime=True
        )
    with repo.begin(owner_token=OTHER) as uow, pytest.raises(ExecutionOwned):
        uow.create_step_execution(execution.id, "other", started=True)


def test_a_transition_with_an_exit_code_is_one_cas(repo, started_step):
    execution, _ = started_step
    with repo.begin(owner_token=TOKEN) as uow:
        sql = statements(
            lambda: uow.transition_job_execution(
                execution.id,
                1,
                LifecycleTransition(S.COMPLETED),
                by_runtime=True,
                exit_code="ALL_DONE",
            )
        )
        control = uow.write_control(execution.id)
        uow.commit()
    row = models.JobExecution.objects.get(pk=execution.id)
    assert (row.status, row.version, row.exit_code) == ("COMPLETED", 2, "ALL_DONE")
    # One CAS (lock, write), and the run's end writes its outbox event (issue 41).
    assert len(sql) == 3
    assert "ob_notification_event" in sql[2]
    assert control == WriteControl(stop_requested=False, owner_matches=True, fenced=False)


def test_write_control_reports_a_stop_and_says_nothing_of_a_token_not_carried(repo, started_step):
    execution, step = started_step
    with repo.begin() as uow:
        uow.request_execution_stop(execution.id, 1, "ops")
        uow.commit()
    with repo.begin() as uow:
        uow.commit_chunk(step.id, 1, ExecutionCounts())
        assert uow.write_control(execution.id) == WriteControl(True, None, False)
        uow.commit()
