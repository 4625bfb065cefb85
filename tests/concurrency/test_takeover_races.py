"""A restart step takes over its source row under a lock (PostgreSQL, real
threads): a chunk commit of the earlier attempt's step that is in flight —
a step left STARTED under a FAILED execution — is waited for, and the restart
takes over what it committed, never the checkpoint before it."""

from __future__ import annotations

import pytest

from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.state import StateEnvelope
from tests.concurrency.test_control_races import in_order
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus


def offset(value: int) -> StateEnvelope:
    return StateEnvelope("reader.offset", 1, {"offset": value})


def test_a_restart_takes_over_the_chunk_committed_while_it_waited(repo, clock):
    first = move(repo, launch(repo, key(run="takeover")), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(first.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(
            step.id, step.version, ExecutionCounts(read=1), checkpoint=offset(1)
        )
        uow.commit()
    move(repo, first, S.FAILED, clock=clock)  # the step is left STARTED
    with repo.begin() as uow:
        second = uow.create_job_execution(first.job_instance_id)
        uow.commit()
    second = move(repo, second, S.STARTED, clock=clock)

    def late_chunk(uow):
        return uow.commit_chunk(
            step.id, step.version, ExecutionCounts(read=1), checkpoint=offset(2)
        )

    def restart_step():
        with repo.begin() as uow:
            created = uow.create_step_execution(second.id, "load")
            state = uow.step_state(created.id)
            uow.commit()
        return state

    _, state = in_order(repo, late_chunk, restart_step)

    assert state.checkpoint is not None
    assert state.checkpoint.payload == {"offset": 2}
    assert state.step.counts.read == 2
