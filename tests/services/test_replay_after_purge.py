"""A replayed operator request answers its recorded outcome (contract §2.5.9) even
after the execution it names was purged: audit rows outlive what they describe
(contract §2.5.12). Found by the soak (tests/soak): the replay used to re-read the
execution and answer 404 ``job_execution_not_found``.

Service logic, on the in-memory fake (``memory_repo``, no database)."""

from __future__ import annotations

from datetime import timedelta

from oxide_batch.domain import BatchStatus
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service, retention_service
from tests.helpers import launch, move

S = BatchStatus
OPERATOR = Actor("olga", 1)


def test_a_replayed_stop_answers_its_recorded_outcome_after_the_execution_was_purged(
    memory_repo, clock
):
    operators = operator_service(memory_repo, stale_after=timedelta(minutes=15))
    retention = retention_service(memory_repo, min_age=timedelta(0))
    execution = move(memory_repo, launch(memory_repo), S.STARTED, clock=clock)
    first = operators.stop(execution.id, expected_version=1, actor=OPERATOR, operation_id="stop-1")
    assert (first.outcome, first.changed) == (Outcome.APPLIED, True)
    move(memory_repo, first.execution, S.COMPLETED, clock=clock)
    clock.advance(timedelta(days=1))
    plan = retention.survey(older_than=timedelta(hours=1))
    retention.apply(plan, actor=OPERATOR, operation_id="purge-1")

    again = operators.stop(execution.id, expected_version=1, actor=OPERATOR, operation_id="stop-1")

    assert (again.outcome, again.record.id) == (Outcome.REPLAYED, first.record.id)
    assert again.execution is None  # purged; the record still says what happened
    assert again.changed is True
