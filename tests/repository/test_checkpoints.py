"""Chunk commits, checkpoints and contexts, and restart state takeover
(contract §2.3.3, §2.3.2; contract scenarios 5.5, 5.6, 12.6, 12.7, 13.1): the port's
behavioural contract, on the Django adapter and the in-memory fake (``contract``),
definition upgrades included; stored rows, statements and limits are the adapter's
(``adapter``)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.canonical import sha256_hex
from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.errors import (
    CountExhausted,
    FaultStateCorrupt,
    InvalidDefinitionUpgrade,
    InvalidEnvelope,
    InvalidState,
    RestartStateNotFound,
    StaleVersion,
)
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope, StateLimits
from oxide_batch.repository import DjangoJobRepository
from tests.conftest import on_postgres
from tests.helpers import key, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus


def envelope(position: int, schema: str = "test.position") -> StateEnvelope:
    return StateEnvelope.from_json(
        {"schema": schema, "schema_version": 1, "payload": {"position": position}},
        kind=EnvelopeKind.CHECKPOINT,
    )


def chunk(read: int, written: int | None = None) -> ExecutionCounts:
    written = read if written is None else written
    return ExecutionCounts(read=read, processed=read, written=written, committed=1)


@pytest.fixture
def running_step(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "import")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    return execution, step


def commit_chunks(repo, step, *chunks: tuple[int, int]):
    for read, position in chunks:
        with repo.begin() as uow:
            step = uow.commit_chunk(
                step.id,
                step.version,
                chunk(read),
                checkpoint=envelope(position),
                context=envelope(position, "test.context"),
            )
            uow.commit()
    return step


def test_a_chunk_commit_adds_deltas_stores_state_and_bumps_the_version(repo, running_step):
    _, step = running_step
    step = commit_chunks(repo, step, (2, 2), (1, 3))
    assert step.version == 3
    assert step.counts == ExecutionCounts(read=3, processed=3, written=3, committed=2)
    with repo.begin() as uow:
        state = uow.step_state(step.id)
    assert state.step == step
    assert state.checkpoint == envelope(3)
    assert state.context == envelope(3, "test.context")


def test_a_chunk_commit_without_envelopes_keeps_the_stored_ones(repo, running_step):
    _, step = running_step
    step = commit_chunks(repo, step, (2, 2))
    with repo.begin() as uow:
        step = uow.commit_chunk(step.id, step.version, chunk(1))
        uow.commit()
    with repo.begin() as uow:
        assert uow.step_state(step.id).checkpoint == envelope(2)


def test_a_stale_chunk_commit_writes_nothing(repo, running_step):
    _, step = running_step
    commit_chunks(repo, step, (2, 2))
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.commit_chunk(step.id, step.version, chunk(5), checkpoint=envelope(7))
    with repo.begin() as uow:
        assert uow.step_state(step.id).checkpoint == envelope(2)


@pytest.mark.parametrize("target", [S.COMPLETED, S.STOPPING])
def test_a_chunk_commit_on_a_step_that_is_not_started_is_invalid_state(repo, running_step, target):
    _, step = running_step
    with repo.begin() as uow:
        step = uow.transition_step_execution(step.id, step.version, LifecycleTransition(target))
        uow.commit()
    with repo.begin() as uow, pytest.raises(InvalidState) as error:
        uow.commit_chunk(step.id, step.version, chunk(1))
    assert error.value.status is target


def test_count_overflow_is_count_exhausted(repo, running_step):
    _, step = running_step
    with repo.begin() as uow:
        step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=2**63 - 1))
        with pytest.raises(CountExhausted):
            uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1))


@pytest.mark.adapter
def test_the_repository_limits_bound_envelopes(running_step, clock):
    _, step = running_step
    small = DjangoJobRepository(clock, state_limits=StateLimits(max_bytes=80, max_depth=3))
    big = StateEnvelope.from_json(
        {"schema": "s", "schema_version": 1, "payload": {"blob": "x" * 100}},
        kind=EnvelopeKind.CHECKPOINT,
    )
    deep = StateEnvelope.from_json(
        {"schema": "s", "schema_version": 1, "payload": {"a": {"b": {"c": 1}}}},
        kind=EnvelopeKind.CHECKPOINT,
    )
    with small.begin() as uow:
        with pytest.raises(InvalidEnvelope):
            uow.commit_chunk(step.id, step.version, chunk(1), checkpoint=big)
        with pytest.raises(InvalidEnvelope):
            uow.commit_chunk(step.id, step.version, chunk(1), context=deep)


@pytest.mark.adapter
@pytest.mark.parametrize(
    "tamper",
    [
        {"checkpoint": '{"payload":{"position":999},"schema":"test.position","schema_version":1}'},
        {"checkpoint_checksum": "e" * 64},
        {"context": "not json"},
    ],
    ids=["payload-edited", "checksum-edited", "malformed"],
)
def test_a_tampered_or_malformed_stored_envelope_fails_closed(repo, running_step, tamper):
    _, step = running_step
    commit_chunks(repo, step, (2, 2))
    if "context" in tamper:
        tamper["context_checksum"] = sha256_hex(tamper["context"].encode())
    models.StepExecution.objects.filter(pk=step.id).update(**tamper)
    with repo.begin() as uow, pytest.raises(FaultStateCorrupt):
        uow.step_state(step.id)


@pytest.mark.adapter
def test_a_chunk_commit_is_one_locking_read_and_one_write(repo, running_step):
    _, step = running_step
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.commit_chunk(step.id, step.version, chunk(2), checkpoint=envelope(2))
    sql = [query["sql"] for query in queries.captured_queries]
    assert [statement.split()[0] for statement in sql] == ["SELECT", "UPDATE"]
    if on_postgres():
        # Only the step is locked; its execution's claimant is read in the same statement.
        assert sql[0].endswith("FOR NO KEY UPDATE OF s"), sql[0]
        assert 'JOIN "ob_job_execution" e' in sql[0]


# -- restart state takeover ---------------------------------------------------------


def fail_and_restart(repo, clock, execution, *, definition_digest=None):
    move(repo, execution, S.FAILED, clock=clock)
    with repo.begin() as uow:
        restart = uow.create_job_execution(
            execution.job_instance_id, definition_digest=definition_digest
        )
        uow.commit()
    return move(repo, restart, S.STARTED, clock=clock)


def test_a_restarted_step_takes_over_counts_checkpoint_and_context(repo, clock, running_step):
    """Crash after a commit: the committed chunk is not replayed (scenario 5.6)."""
    execution, step = running_step
    step = commit_chunks(repo, step, (2, 2), (2, 4))
    restart = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow:
        resumed = uow.create_step_execution(restart.id, "import")
        uow.commit()
    with repo.begin() as uow:
        state = uow.step_state(resumed.id)
    assert resumed.id != step.id
    assert resumed.counts == step.counts
    assert (resumed.status, resumed.version) == (S.STARTING, 0)
    assert state.checkpoint == envelope(4)
    assert state.context == envelope(4, "test.context")


def test_takeover_uses_the_newest_row_across_all_earlier_attempts(repo, clock, running_step):
    execution, step = running_step
    commit_chunks(repo, step, (2, 2))
    second = fail_and_restart(repo, clock, execution)
    # The second attempt never ran "import"; the third still finds attempt 1's row.
    third = fail_and_restart(repo, clock, second)
    with repo.begin() as uow:
        resumed = uow.create_step_execution(third.id, "import")
        assert uow.step_state(resumed.id).checkpoint == envelope(2)


def test_a_step_without_earlier_state_starts_fresh(repo, clock, running_step):
    execution, _ = running_step
    restart = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow:
        fresh = uow.create_step_execution(restart.id, "publish")
        assert fresh.counts == ExecutionCounts()
        assert uow.step_state(fresh.id).checkpoint is None


def register(uow, revision, step):
    return uow.register_definition(
        "import_job", revision, {"format": 1, "job": "import_job", "step": step}
    ).definition


def upgraded_restart(repo, clock, mapping):
    """Attempt 1 under v1 commits a chunk of step ``import-v1`` and fails; attempt 2
    runs under v2 through an edge with ``mapping``."""
    with repo.begin() as uow:
        v1, v2 = register(uow, "v1", "import-v1"), register(uow, "v2", "import-v2")
        uow.register_definition_upgrade(
            UpgradeEdge.of(
                job_name="import_job",
                key="v1-to-v2",
                from_digest=v1.digest,
                to_digest=v2.digest,
                step_mapping=mapping,
            )
        )
        instance = uow.select_or_create_job_instance(key()).instance
        first = uow.create_job_execution(instance.id, definition_digest=v1.digest)
        uow.commit()
    first = move(repo, first, S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(first.id, "import-v1")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    commit_chunks(repo, step, (2, 2))
    return fail_and_restart(repo, clock, first, definition_digest=v2.digest)


def test_an_upgraded_restart_takes_over_the_mapped_step(repo, clock):
    """Contract scenario 12.6."""
    restart = upgraded_restart(repo, clock, {"import-v1": "import-v2"})
    with repo.begin() as uow:
        resumed = uow.create_step_execution(restart.id, "import-v2")
        state = uow.step_state(resumed.id)
    assert state.checkpoint == envelope(2)
    assert resumed.counts.committed == 1


def test_an_edge_without_a_mapping_for_a_step_with_earlier_state_is_invalid(repo, clock):
    restart = upgraded_restart(repo, clock, {"something-else": "import-v2"})
    with repo.begin() as uow, pytest.raises(InvalidDefinitionUpgrade) as error:
        uow.create_step_execution(restart.id, "import-v1")
    assert error.value.execution_id == restart.id


def test_a_mapped_source_step_without_a_row_is_restart_state_not_found(repo, clock):
    restart = upgraded_restart(repo, clock, {"never-ran": "import-v2"})
    with repo.begin() as uow, pytest.raises(RestartStateNotFound) as error:
        uow.create_step_execution(restart.id, "import-v2")
    assert (error.value.execution_id, error.value.step_name) == (restart.id, "import-v2")


def test_an_unmapped_new_step_of_an_upgraded_restart_starts_fresh(repo, clock):
    restart = upgraded_restart(repo, clock, {"import-v1": "import-v2"})
    with repo.begin() as uow:
        fresh = uow.create_step_execution(restart.id, "brand-new")
    assert fresh.counts == ExecutionCounts()


@pytest.mark.adapter
def test_takeover_costs_one_extra_query(repo, clock, running_step):
    execution, step = running_step
    commit_chunks(repo, step, (2, 2))
    restart = fail_and_restart(repo, clock, execution)
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.create_step_execution(restart.id, "import")
    assert len(queries.captured_queries) == 3
