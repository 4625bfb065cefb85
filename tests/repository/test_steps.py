"""Step executions: creation rules and CAS lifecycle (contract scenarios 3.1, 3.2, 4.2):
the port's behavioural contract, on the Django adapter and the in-memory fake
(``contract``)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    EmptyName,
    IllegalTransition,
    InvalidState,
    JobExecutionNotFound,
    StaleVersion,
    StepExecutionExists,
    StepExecutionNotFound,
)
from tests.helpers import failure, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus


@pytest.mark.parametrize("path", [(), (S.STARTED,)], ids=["STARTING", "STARTED"])
def test_a_step_is_created_starting_under_a_starting_or_started_execution(repo, clock, path):
    execution = move(repo, launch(repo), *path, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        uow.commit()
    assert (step.status, step.version, step.exit_code) == (S.STARTING, 0, "UNKNOWN")
    assert (step.step_name, step.node_id) == ("load", "load")
    assert step.created_at == clock.now()


@pytest.mark.parametrize(
    "path",
    [
        (S.STOPPING,),
        (S.UNKNOWN,),
        (S.STARTED, S.STOPPED),
        (S.STARTED, S.FAILED),
        (S.STARTED, S.COMPLETED),
        (S.STARTED, S.STOPPED, S.ABANDONED),
    ],
    ids=lambda path: path[-1].value,
)
def test_a_step_under_any_other_status_is_invalid_state(repo, clock, path):
    execution = move(repo, launch(repo), *path, clock=clock)
    with repo.begin() as uow, pytest.raises(InvalidState) as error:
        uow.create_step_execution(execution.id, "load")
    assert (error.value.id, error.value.status) == (execution.id, path[-1])


def test_a_repeated_step_name_in_one_execution_is_step_execution_exists(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        uow.create_step_execution(execution.id, "load")
        uow.commit()
    with repo.begin() as uow, pytest.raises(StepExecutionExists) as error:
        uow.create_step_execution(execution.id, "load")
    assert error.value.step_name == "load"


def test_the_uow_stays_usable_after_step_execution_exists(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        uow.create_step_execution(execution.id, "load")
        with pytest.raises(StepExecutionExists):
            uow.create_step_execution(execution.id, "load")
        other = uow.create_step_execution(execution.id, "write")
        uow.commit()
    with repo.begin() as uow:
        assert [s.step_name for s in uow.step_executions(execution.id)] == ["load", "write"]
        assert uow.get_step_execution(other.id) == other


def test_a_node_id_may_differ_from_the_step_name(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "Load files", node_id="load.files")
        uow.commit()
    assert step.node_id == "load.files"


def test_step_names_are_validated(repo):
    execution = launch(repo)
    with repo.begin() as uow, pytest.raises(EmptyName):
        uow.create_step_execution(execution.id, "")


def test_a_step_under_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.create_step_execution(5555, "load")


def test_step_transitions_are_cas_guarded_and_follow_the_full_table(repo, clock):
    execution = launch(repo)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        with pytest.raises(StaleVersion):
            uow.transition_step_execution(step.id, 0, LifecycleTransition(S.COMPLETED))
        with pytest.raises(IllegalTransition):
            uow.transition_step_execution(step.id, 1, LifecycleTransition(S.ABANDONED))
        step = uow.transition_step_execution(step.id, 1, LifecycleTransition(S.UNKNOWN))
        # Steps may leave UNKNOWN and be abandoned (only the runtime API refuses it for jobs).
        step = uow.transition_step_execution(
            step.id, 2, LifecycleTransition(S.FAILED, failure=failure(7))
        )
        step = uow.transition_step_execution(step.id, 3, LifecycleTransition(S.ABANDONED))
        uow.commit()
    assert (step.status, step.version, step.failure) == (S.ABANDONED, 4, failure(7))
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id) == step


def test_step_exit_enrichment_keeps_the_status(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        enriched = uow.enrich_step_exit_status(step.id, 1, "COMPLETED_WITH_WARNINGS")
        uow.commit()
    assert (enriched.status, enriched.exit_code, enriched.version) == (
        S.STARTED,
        "COMPLETED_WITH_WARNINGS",
        2,
    )


def test_missing_steps_are_not_found(repo):
    with repo.begin() as uow:
        with pytest.raises(StepExecutionNotFound):
            uow.get_step_execution(777)
        with pytest.raises(StepExecutionNotFound):
            uow.transition_step_execution(777, 0, LifecycleTransition(S.STARTED))
        with pytest.raises(StepExecutionNotFound):
            uow.enrich_step_exit_status(777, 0, "X")
