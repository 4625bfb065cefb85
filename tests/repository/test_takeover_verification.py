"""Taking over state verifies it (contract §2.3.2): a restart step, a restarted flow step and
a carried partition plan check the checksums and envelopes of what they copy; what
does not verify is ``fault_state_corrupt`` and nothing is created. Both databases."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.canonical import sha256_hex
from oxide_batch.domain.errors import FaultStateCorrupt
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.state import StateEnvelope
from tests.helpers import launch, move
from tests.repository.test_flow import launch_flow
from tests.repository.test_flow import restart as restart_flow

pytestmark = pytest.mark.django_db
S = BatchStatus
CHECKPOINT = StateEnvelope("test.position", 1, {"position": 4})
CONTEXT = StateEnvelope("test.context", 1, {"files": ["a"]})
PARTITION_CONTEXT = StateEnvelope("test.range", 1, {"from": 0})
EDITED = '{"payload":{"position":999},"schema":"test.position","schema_version":1}'
NOT_CANONICAL = '{"schema": "test.position", "schema_version": 1, "payload": {}}'


def self_consistent(column: str, text: str) -> dict[str, str]:
    """``text`` stored with its own checksum: only the envelope check can catch it."""
    return {column: text, f"{column}_checksum": sha256_hex(text.encode())}


TAMPERING = {
    "checkpoint-text-edited": {"checkpoint": EDITED},
    "checkpoint-checksum-edited": {"checkpoint_checksum": "e" * 64},
    "context-text-edited": {"context": EDITED},
    "context-not-json": self_consistent("context", "not json"),
    "checkpoint-not-an-envelope": self_consistent("checkpoint", '{"payload":{}}'),
    "checkpoint-not-canonical": self_consistent("checkpoint", NOT_CANONICAL),
}
tampering = pytest.mark.parametrize("tamper", TAMPERING.values(), ids=TAMPERING.keys())


def run_chunk(repo, step):
    """Start ``step`` and commit one chunk with a checkpoint and a context."""
    with repo.begin() as uow:
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=2, committed=1),
            checkpoint=CHECKPOINT,
            context=CONTEXT,
        )
        uow.commit()
    return step


def fail_and_restart(repo, clock, execution):
    move(repo, execution, S.FAILED, clock=clock)
    with repo.begin() as uow:
        attempt = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    return move(repo, attempt, S.STARTED, clock=clock)


def steps_of(execution_id: int) -> list[str]:
    rows = models.StepExecution.objects.filter(job_execution_id=execution_id)
    return list(rows.values_list("step_name", flat=True))


# -- a restart step ------------------------------------------------------------------


@tampering
def test_a_restart_step_refuses_to_take_over_state_that_does_not_verify(repo, clock, tamper):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "import")
        uow.commit()
    step = run_chunk(repo, step)
    models.StepExecution.objects.filter(pk=step.id).update(**tamper)
    attempt = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow:
        with pytest.raises(FaultStateCorrupt):
            uow.create_step_execution(attempt.id, "import")
        uow.commit()
    assert steps_of(attempt.id) == []


def test_a_restart_step_takes_over_verified_state_in_as_many_statements(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "import")
        uow.commit()
    run_chunk(repo, step)
    attempt = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow:
        with CaptureQueriesContext(connection) as queries:
            resumed = uow.create_step_execution(attempt.id, "import")
        uow.commit()
    # lock the job execution, read the source row, insert (verifying is CPU only)
    assert [q["sql"].split()[0] for q in queries.captured_queries] == [
        "SELECT",
        "SELECT",
        "INSERT",
    ]
    with repo.begin() as uow:
        state = uow.step_state(resumed.id)
    assert (state.checkpoint, state.context) == (CHECKPOINT, CONTEXT)


# -- a restarted flow step -----------------------------------------------------------


@tampering
def test_a_restarted_flow_step_refuses_to_take_over_state_that_does_not_verify(repo, clock, tamper):
    flow = launch_flow(repo, clock)
    with repo.begin() as uow:
        step = uow.create_flow_step_execution(flow.execution.id, "load", "load")
        uow.commit()
    step = run_chunk(repo, step)
    models.StepExecution.objects.filter(pk=step.id).update(**tamper)
    attempt = restart_flow(repo, clock, flow)
    with repo.begin() as uow:
        with pytest.raises(FaultStateCorrupt):
            uow.create_flow_step_execution(attempt.id, "load", "load")
        uow.commit()
    assert steps_of(attempt.id) == []


def test_a_restarted_flow_step_takes_over_verified_state(repo, clock):
    flow = launch_flow(repo, clock)
    with repo.begin() as uow:
        step = uow.create_flow_step_execution(flow.execution.id, "load", "load")
        uow.commit()
    run_chunk(repo, step)
    attempt = restart_flow(repo, clock, flow)
    with repo.begin() as uow:
        resumed = uow.create_flow_step_execution(attempt.id, "load-again", "load")
        state = uow.step_state(resumed.id)
    assert (state.checkpoint, state.context) == (CHECKPOINT, CONTEXT)


# -- a carried partition plan --------------------------------------------------------

CONTEXT_TAMPERING = {
    "text-edited": {"context": PARTITION_CONTEXT.canonical().decode().replace("0", "7")},
    "checksum-edited": {"context_checksum": "0" * 64},
    "not-json": self_consistent("context", "not json"),
    "above-4-KiB": self_consistent(
        "context", StateEnvelope("s", 1, {"p": "x" * 5000}).canonical().decode()
    ),
}


def failed_attempt_with_plan(repo, clock):
    """A partitioned step with a two-partition plan in a FAILED attempt, and the
    restarted step of the next attempt; (source step, first partition, target step)."""
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        source = uow.create_step_execution(execution.id, "partitioned")
        source = uow.transition_step_execution(source.id, 0, LifecycleTransition(S.STARTED))
        partitions = uow.create_step_partition_plan(
            source.id, [PartitionPlanEntry(k, PARTITION_CONTEXT) for k in ("a", "b")]
        )
        uow.commit()
    attempt = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow:
        target = uow.create_step_execution(attempt.id, "partitioned")
        uow.commit()
    return source, partitions[1], target


@pytest.mark.parametrize("tamper", CONTEXT_TAMPERING.values(), ids=CONTEXT_TAMPERING.keys())
def test_a_carried_plan_refuses_a_partition_context_that_does_not_verify(repo, clock, tamper):
    source, partition, target = failed_attempt_with_plan(repo, clock)
    models.StepPartition.objects.filter(pk=partition.id).update(**tamper)
    with repo.begin() as uow:
        with pytest.raises(FaultStateCorrupt):
            uow.restart_step_partition_plan(source.id, target.id)
        uow.commit()
    assert not models.StepPartition.objects.filter(step_execution_id=target.id).exists()


def test_a_carried_plan_copies_verified_contexts_as_stored(repo, clock):
    source, _, target = failed_attempt_with_plan(repo, clock)
    with repo.begin() as uow:
        carried = uow.restart_step_partition_plan(source.id, target.id)
        uow.commit()
    assert [p.context for p in carried] == [PARTITION_CONTEXT, PARTITION_CONTEXT]
    columns = ("partition_key", "context", "context_checksum")
    rows = models.StepPartition.objects.order_by("partition_key").values_list(*columns)
    by_step = {step: list(rows.filter(step_execution_id=step)) for step in (source.id, target.id)}
    assert by_step[target.id] == by_step[source.id]
