"""``restart_step_partition_plan`` refusals say what happened (contract §2.4.5): a source
step of another node or instance is an input error (``partition_restart_mismatch``,
never ``*_corrupt``); a source attempt that is not STOPPED or FAILED is
``not_restartable``; a source without a plan is ``restart_state_not_found``
(``partition_state_corrupt`` is left for stored rows that contradict themselves,
and a context that does not verify is ``fault_state_corrupt``:
test_takeover_verification.py). Nothing is inserted on any refusal. On the Django
adapter (both databases) and the in-memory fake."""

from __future__ import annotations

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition, errors
from oxide_batch.domain.partitions import PartitionPlanEntry
from tests.fakes import FakeJobRepository
from tests.helpers import key, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus


def started_execution(repo, clock, job: str = "partitioned_job"):
    return move(repo, launch(repo, key(job)), S.STARTED, clock=clock)


def started_step(repo, execution_id: int, name: str = "partitioned"):
    with repo.begin() as uow:
        step = uow.create_step_execution(execution_id, name)
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    return step


def with_plan(repo, step, *keys: str) -> None:
    with repo.begin() as uow:
        uow.create_step_partition_plan(step.id, [PartitionPlanEntry(k) for k in keys])
        uow.commit()


def restarted(repo, clock, execution, name: str = "partitioned"):
    """Fail ``execution``, start the next attempt and its step ``name``."""
    move(repo, execution, S.FAILED, clock=clock)
    with repo.begin() as uow:
        attempt = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    attempt = move(repo, attempt, S.STARTED, clock=clock)
    return attempt, started_step(repo, attempt.id, name)


def plan_rows(repo) -> int:
    """How many partitions are stored (the fake's rows or the model's)."""
    if isinstance(repo, FakeJobRepository):
        return len(repo.tables.partitions)
    return models.StepPartition.objects.count()


def test_a_source_of_another_node_is_a_restart_mismatch(repo, clock):
    execution = started_execution(repo, clock)
    source = started_step(repo, execution.id)
    with_plan(repo, source, "a")
    _, other_node = restarted(repo, clock, execution, name="elsewhere")
    before = plan_rows(repo)
    with repo.begin() as uow, pytest.raises(errors.PartitionRestartMismatch) as error:
        uow.restart_step_partition_plan(source.id, other_node.id)
    assert error.value.details() == {
        "source_step_execution_id": source.id,
        "target_step_execution_id": other_node.id,
    }
    assert plan_rows(repo) == before


def test_a_source_of_another_job_instance_is_a_restart_mismatch(repo, clock):
    execution = started_execution(repo, clock)
    source = started_step(repo, execution.id)
    with_plan(repo, source, "a")
    move(repo, execution, S.FAILED, clock=clock)
    other_instance = started_step(repo, started_execution(repo, clock, job="other_job").id)
    before = plan_rows(repo)
    with repo.begin() as uow, pytest.raises(errors.PartitionRestartMismatch):
        uow.restart_step_partition_plan(source.id, other_instance.id)
    assert plan_rows(repo) == before


@pytest.mark.parametrize(
    "path",
    [(), (S.STOPPING,), (S.UNKNOWN,), (S.COMPLETED,)],
    ids=["STARTED", "STOPPING", "UNKNOWN", "COMPLETED"],
)
def test_a_source_attempt_that_is_not_stopped_or_failed_is_not_restartable(repo, clock, path):
    execution = started_execution(repo, clock)
    source = started_step(repo, execution.id)
    with_plan(repo, source, "a")
    execution = move(repo, execution, *path, clock=clock)
    before = plan_rows(repo)
    # The source is its own (STARTED) target: only the source attempt's status is wrong.
    with repo.begin() as uow, pytest.raises(errors.NotRestartable) as error:
        uow.restart_step_partition_plan(source.id, source.id)
    assert error.value.status is execution.status
    assert plan_rows(repo) == before


def test_a_source_step_without_a_plan_is_restart_state_not_found(repo, clock):
    execution = started_execution(repo, clock)
    source = started_step(repo, execution.id)
    attempt, target = restarted(repo, clock, execution)
    with repo.begin() as uow, pytest.raises(errors.RestartStateNotFound) as error:
        uow.restart_step_partition_plan(source.id, target.id)
    assert (error.value.execution_id, error.value.step_name) == (attempt.id, "partitioned")
    assert plan_rows(repo) == 0
