"""The evidence of many executions in one statement (``recovery_evidence_many``):
the same values as ``recovery_evidence`` one by one, whatever mix of rows
(contract §2.5.4; the console's confirmation page reads
it for every selected row)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, JobExecution, LifecycleTransition
from oxide_batch.domain.errors import IdentifierOutOfRange, ZeroIdentifier
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.helpers import key, launch, move
from tests.repository.test_evidence import OWNER, evidence_of, sql_of

pytestmark = pytest.mark.django_db
S = BatchStatus
MINUTE = timedelta(minutes=1)


def mixed_rows(repo: DjangoJobRepository, clock: FixedClock) -> list[JobExecution]:
    """One of each kind of evidence: fresh, owned and stop-requested, running with
    steps and a checkpoint, a corrupt checkpoint, an UNKNOWN step, UNKNOWN,
    FAILED, COMPLETED."""
    rows: list[JobExecution] = []

    def new(run: str) -> JobExecution:
        clock.advance(MINUTE)
        return launch(repo, key(run=run))

    rows.append(new("fresh"))
    owned = new("owned")
    with repo.begin() as uow:
        uow.claim_execution_owner(owned.id, 0, OWNER)
        uow.commit()
    owned = move(repo, owned, S.STARTED, clock=clock)
    with repo.begin() as uow:
        uow.request_execution_stop(owned.id, owned.version, "operator:test")
        uow.commit()
    rows.append(owned)
    for run in ("steps", "corrupt", "unknown-step"):
        execution = move(repo, new(run), S.STARTED, clock=clock)
        with repo.begin() as uow:
            first = uow.create_step_execution(execution.id, "load")
            first = uow.transition_step_execution(first.id, 0, LifecycleTransition(S.STARTED))
            second = uow.create_step_execution(execution.id, f"write-{run}")
            second = uow.transition_step_execution(second.id, 0, LifecycleTransition(S.STARTED))
            second = uow.commit_chunk(
                second.id,
                second.version,
                ExecutionCounts(read=2),
                checkpoint=StateEnvelope("reader.position", 2, {"offset": 2}),
            )
            if run == "unknown-step":
                uow.transition_step_execution(
                    second.id, second.version, LifecycleTransition(S.UNKNOWN)
                )
            uow.commit()
        if run == "corrupt":
            models.StepExecution.objects.filter(pk=second.id).update(checkpoint_checksum="0" * 64)
        rows.append(execution)
    rows.append(move(repo, new("unknown"), S.STARTED, S.UNKNOWN, clock=clock))
    rows.append(move(repo, new("failed"), S.STARTED, S.FAILED, clock=clock))
    rows.append(move(repo, new("completed"), S.STARTED, S.COMPLETED, clock=clock))
    return rows


def test_many_equals_one_by_one_for_a_mix_of_rows(repo, clock):
    rows = mixed_rows(repo, clock)
    ids = [row.id for row in rows]
    with repo.begin() as uow:
        many = uow.recovery_evidence_many(list(reversed(ids)))
    assert list(many) == sorted(ids)  # ascending id order, whatever order was asked
    for pk in ids:
        one = evidence_of(repo, pk)
        assert many[pk] == one
        assert many[pk].digest() == one.digest()
    # The mix really is a mix.
    assert {e.status for e in many.values()} >= {S.STARTING, S.STARTED, S.UNKNOWN, S.FAILED}
    assert any(e.unknown_commit and e.status is S.STARTED for e in many.values())
    assert any(
        e.latest_step and e.latest_step.checkpoint and not e.latest_step.checkpoint.intact
        for e in many.values()
    )


def test_the_latest_step_carries_its_name_which_the_digest_leaves_out(repo, clock):
    rows = mixed_rows(repo, clock)
    evidence = evidence_of(repo, rows[2].id)
    assert evidence.latest_step is not None
    assert evidence.latest_step.step_name == "write-steps"
    assert "step_name" not in evidence.latest_step.encoded()


def test_one_statement_for_any_number_of_rows_and_none_for_no_rows(repo, clock):
    ids = [row.id for row in mixed_rows(repo, clock)]
    with repo.begin() as uow:
        one = sql_of(lambda: uow.recovery_evidence_many(ids[:1]))
        all_ = sql_of(lambda: uow.recovery_evidence_many(ids))
        none = sql_of(lambda: uow.recovery_evidence_many([]))
    assert (len(one), len(all_), len(none)) == (1, 1, 0)
    assert "FOR" not in all_[0].split("FROM")[-1]  # a read: nothing is locked


def test_missing_ids_are_left_out_and_duplicates_read_once(repo, clock):
    execution = launch(repo)
    with repo.begin() as uow:
        many = uow.recovery_evidence_many([execution.id, 10**12, execution.id])
    assert list(many) == [execution.id]


@pytest.mark.parametrize(("bad", "error"), [(0, ZeroIdentifier), (2**63, IdentifierOutOfRange)])
def test_a_bad_id_is_refused_before_any_query(repo, bad, error):
    with repo.begin() as uow, CaptureQueriesContext(connection) as captured, pytest.raises(error):
        uow.recovery_evidence_many([1, bad])
    assert captured.captured_queries == []
