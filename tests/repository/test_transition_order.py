"""The seed's check order through the repository, for job and step executions
alike (``ExecutionMetadata::transition``): a transition that breaks two rules
answers the first one the seed checks. The port's behavioural contract, on the
Django adapter and the in-memory fake (``contract``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import IllegalTransition, InvalidTransitionTime, StaleVersion
from tests.helpers import launch, move

pytestmark = pytest.mark.contract
S = BatchStatus
EARLY = timedelta(seconds=-1)


@pytest.mark.parametrize("by_runtime", [False, True], ids=["operator", "runtime"])
def test_a_job_failed_without_failure_and_before_its_start_is_invalid_transition_time(
    repo, clock, by_runtime
):
    started = move(repo, launch(repo), S.STARTED, clock=clock)
    early = LifecycleTransition(S.FAILED, at=started.metadata.timestamps.started_at + EARLY)
    with repo.begin() as uow, pytest.raises(InvalidTransitionTime):
        uow.transition_job_execution(started.id, started.version, early, by_runtime=by_runtime)


def test_a_step_failed_without_failure_and_before_its_start_is_invalid_transition_time(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    early = LifecycleTransition(S.FAILED, at=step.metadata.timestamps.started_at + EARLY)
    with repo.begin() as uow, pytest.raises(InvalidTransitionTime):
        uow.transition_step_execution(step.id, step.version, early)


def test_a_runtime_leaving_unknown_early_and_without_failure_is_illegal_transition(repo, clock):
    unknown = move(repo, launch(repo), S.STARTED, S.UNKNOWN, clock=clock)
    early = LifecycleTransition(S.FAILED, at=unknown.metadata.timestamps.started_at + EARLY)
    with repo.begin() as uow, pytest.raises(IllegalTransition):
        uow.transition_job_execution(unknown.id, unknown.version, early, by_runtime=True)
    with repo.begin() as uow, pytest.raises(StaleVersion):  # the version still comes first
        uow.transition_job_execution(unknown.id, unknown.version - 1, early, by_runtime=True)
