"""Query budgets: every repository operation issues a fixed, small number of
statements — each mutation one locking read plus one write per changed row."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import BatchStatus, LifecycleTransition, RecoveryRequest
from oxide_batch.domain.errors import StaleVersion
from tests.conftest import on_postgres
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


def count(operation: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


@pytest.fixture
def started(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    return execution, step


def test_read_budgets(repo, started):
    execution, step = started
    with repo.begin() as uow:
        assert len(count(lambda: uow.find_job_instance(key()))) == 1
        assert len(count(lambda: uow.get_job_instance(execution.job_instance_id))) == 1
        assert len(count(lambda: uow.get_job_execution(execution.id))) == 1
        assert len(count(lambda: uow.job_executions(execution.job_instance_id))) == 1
        assert len(count(lambda: uow.get_step_execution(step.id))) == 1
        assert len(count(lambda: uow.step_executions(execution.id))) == 1
        assert len(count(lambda: uow.recovery_decision(execution.id))) == 1


def test_select_or_create_is_one_statement_when_new_and_two_when_existing(repo):
    with repo.begin() as uow:
        created = count(lambda: uow.select_or_create_job_instance(key()))
        existing = count(lambda: uow.select_or_create_job_instance(key()))
    assert len(created) == 1
    assert "ON CONFLICT" in created[0]
    assert len(existing) == 2


def test_create_job_execution_is_lock_read_latest_insert(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow:
        sql = count(lambda: uow.create_job_execution(execution.job_instance_id))
    assert len(sql) == 3
    assert sql[2].startswith("INSERT")


@pytest.mark.parametrize(
    "operation",
    ["transition_job", "enrich_job", "transition_step", "enrich_step"],
)
def test_each_cas_mutation_is_one_locking_read_and_one_update(repo, started, operation):
    execution, step = started
    with repo.begin() as uow:
        run = {
            "transition_job": lambda: uow.transition_job_execution(
                execution.id, 1, LifecycleTransition(S.STOPPING)
            ),
            "enrich_job": lambda: uow.enrich_job_exit_status(execution.id, 1, "X"),
            "transition_step": lambda: uow.transition_step_execution(
                step.id, 1, LifecycleTransition(S.COMPLETED)
            ),
            "enrich_step": lambda: uow.enrich_step_exit_status(step.id, 1, "X"),
        }[operation]
        sql = count(run)
    assert len(sql) == 2
    assert sql[0].startswith("SELECT")
    assert sql[1].startswith("UPDATE")
    if on_postgres():
        # Only the mutated row is locked (a job execution's read joins its
        # definition, a step's its execution's claimant).
        assert re.search(r"FOR NO KEY UPDATE( OF [es])?$", sql[0]), sql[0]


def test_a_refused_mutation_reads_once_and_writes_nothing(repo, started):
    execution, _ = started
    with (
        repo.begin() as uow,
        CaptureQueriesContext(connection) as queries,
        pytest.raises(StaleVersion),
    ):
        uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STOPPING))
    assert len(queries.captured_queries) == 1


def test_the_update_writes_only_changed_columns(repo, started):
    execution, _ = started
    with repo.begin() as uow:
        sql = count(lambda: uow.enrich_job_exit_status(execution.id, 1, "X"))
    update = sql[1]
    assert "exit_code" in update
    assert "version" in update
    for untouched in ("status", "created_at", "started_at", "read_count"):
        assert f'"{untouched}"' not in update


def test_create_step_is_lock_parent_and_insert(repo, started):
    execution, _ = started
    with repo.begin() as uow:
        sql = count(lambda: uow.create_step_execution(execution.id, "write"))
    assert len(sql) == 2
    assert "ON CONFLICT" in sql[1]


ABANDON_ORPHAN = RecoveryRequest.abandon(
    expected_version=1,
    reason_code="ORPHAN_CONFIRMED",
    operator_reference="ops",
    evidence_digest=b"\x01" * 32,
)


def test_recovery_is_lock_update_steps_and_decision_insert(repo, started):
    """Lock the execution and its unfinished steps, insert the decision, write
    the execution and the steps (one set-based UPDATE whatever their number): 5
    statements; 4 when no step is unfinished (contract §2.5.6) — and the run's
    end writes its outbox event, one INSERT more (issue 41)."""
    execution, _step = started
    with repo.begin() as uow:
        for name in ("extract", "index"):
            uow.create_step_execution(execution.id, name)
        uow.commit()
    request = ABANDON_ORPHAN
    with repo.begin() as uow:
        sql = count(lambda: uow.recover_job_execution(execution.id, request))
    assert [statement.split()[0] for statement in sql] == [
        "SELECT",
        "SELECT",
        "INSERT",
        "UPDATE",
        "UPDATE",
        "INSERT",  # the outbox event
    ]
    assert "ob_notification_event" in sql[-1]
    if on_postgres():
        assert sql[0].endswith("FOR NO KEY UPDATE")
        assert sql[1].endswith("FOR NO KEY UPDATE")
        assert sql[1].startswith('SELECT "ob_step_execution"."id"')
        assert "ORDER BY 1 ASC" in sql[1]


def test_a_recovery_after_its_locked_evidence_locks_each_row_once(repo, started):
    """Issue 27: the service reads the evidence under the locks, then recovers —
    the execution and its steps are locked once (the evidence read keeps the
    locked rows), 6 statements where there were 8."""
    execution, _step = started
    with repo.begin() as uow:
        for name in ("extract", "index"):
            uow.create_step_execution(execution.id, name)
        uow.commit()

    def evidence_then_recovery() -> None:
        uow.recovery_evidence(execution.id, lock=True)
        uow.recover_job_execution(execution.id, ABANDON_ORPHAN)

    with repo.begin() as uow:
        sql = count(evidence_then_recovery)
        uow.commit()
    assert [statement.split()[0] for statement in sql] == [
        "SELECT",  # the execution, locked
        "SELECT",  # its steps, locked
        "SELECT",  # the evidence
        "INSERT",
        "UPDATE",
        "UPDATE",
        "INSERT",  # the outbox event (issue 41)
    ]
    if on_postgres():
        assert [s.endswith("FOR NO KEY UPDATE") for s in sql[:3]] == [True, True, False]
    with repo.begin() as uow:
        steps = uow.step_executions(execution.id)
    assert {step.status for step in steps} == {S.FAILED}  # every unfinished step resolved


def test_another_operation_between_drops_the_kept_rows(repo, started):
    execution, _step = started
    with repo.begin() as uow:
        uow.recovery_evidence(execution.id, lock=True)
        uow.find_job_instance(key())
        sql = count(lambda: uow.recover_job_execution(execution.id, ABANDON_ORPHAN))
    assert [statement.split()[0] for statement in sql][:2] == ["SELECT", "SELECT"]  # again


def test_recovery_without_unfinished_steps_is_four_statements(repo, clock):
    """Four, and the outbox event's INSERT (issue 41)."""
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    request = ABANDON_ORPHAN
    with repo.begin() as uow:
        sql = count(lambda: uow.recover_job_execution(execution.id, request))
    assert [statement.split()[0] for statement in sql] == [
        "SELECT",
        "SELECT",
        "INSERT",
        "UPDATE",
        "INSERT",
    ]


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_the_unit_of_work_takes_the_write_lock_up_front(repo):
    if on_postgres():
        pytest.skip("SQLite only: PostgreSQL locks rows instead")
    with CaptureQueriesContext(connection) as queries, repo.begin() as uow:
        uow.find_job_instance(key())
        uow.commit()
    assert queries.captured_queries[0]["sql"] == "BEGIN IMMEDIATE"
