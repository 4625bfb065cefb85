"""Repository observers see every operation once, with its outcome, and can
never change it."""

from __future__ import annotations

import pytest

from oxide_batch.domain import BatchStatus, LifecycleTransition, events
from oxide_batch.domain.errors import VersionAhead
from oxide_batch.repository import hooks
from tests.helpers import key, launch

pytestmark = pytest.mark.django_db


def test_every_operation_is_observed_once_with_its_outcome(repo, seen):
    execution = launch(repo)
    with repo.begin() as uow, pytest.raises(VersionAhead):
        uow.transition_job_execution(execution.id, 5, LifecycleTransition(BatchStatus.STARTED))
    names = [(event.operation, event.outcome) for event in seen]
    # select_or_create calls find_job_instance only when the key exists: observed once.
    assert names == [
        ("select_or_create_job_instance", "ok"),
        ("create_job_execution", "ok"),
        ("transition_job_execution", "version_ahead"),
    ]
    # What each made true, from the rows it wrote; a refused operation, nothing.
    assert [type(fact) for event in seen for fact in event.events] == [
        events.InstanceCreated,
        events.ExecutionLaunched,
    ]
    assert seen[1].events[0].execution == execution
    assert seen[2].events == ()
    assert seen[2].target == ("job_execution_id", execution.id)
    assert all(event.seconds >= 0 for event in seen)


def test_a_failing_observer_changes_nothing(repo):
    def broken(event: hooks.OperationEvent) -> None:
        raise RuntimeError("sink down")

    hooks.register(broken)
    try:
        with repo.begin() as uow:
            selection = uow.select_or_create_job_instance(key())
            uow.commit()
    finally:
        hooks.unregister(broken)
    assert selection.created
