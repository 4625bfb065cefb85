"""Stop requests, ownership evidence and control observation in the repository
(contract §2.5.1, §2.5.2, §2.5.3, §4.1; contract scenarios 6.1, 6.2): the port's
behavioural contract, on the Django adapter and the in-memory fake
(``contract``); the statements each takes are the adapter's (``adapter``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import BatchStatus, JobExecution, LifecycleTransition
from oxide_batch.domain.errors import (
    EmptyName,
    ExecutionOwned,
    ExecutionOwnershipNotAllowed,
    InvalidCharacters,
    InvalidState,
    JobExecutionNotFound,
    StaleVersion,
    VersionAhead,
)
from oxide_batch.domain.evidence import ExecutionView
from tests.conftest import on_postgres
from tests.helpers import Repository, key, launch, move, stored_execution

pytestmark = pytest.mark.contract
S = BatchStatus
OWNER = b"\x01" * 16
OTHER = b"\x02" * 16
ACTOR = "operator:test"
MISSING = 10**12


def sql_of(operation: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


def row(repo: Repository, execution: JobExecution | ExecutionView) -> Any:
    """The execution's committed row (``stored_execution``)."""
    return stored_execution(repo, execution.id)


def in_status(repo, clock, status: BatchStatus) -> JobExecution:
    """A committed execution in ``status`` reached through legal transitions."""
    paths = {
        S.STARTING: (),
        S.STARTED: (S.STARTED,),
        S.STOPPING: (S.STARTED, S.STOPPING),
        S.STOPPED: (S.STARTED, S.STOPPING, S.STOPPED),
        S.FAILED: (S.STARTED, S.FAILED),
        S.COMPLETED: (S.STARTED, S.COMPLETED),
        S.ABANDONED: (S.STARTED, S.FAILED, S.ABANDONED),
        S.UNKNOWN: (S.STARTED, S.UNKNOWN),
    }
    return move(repo, launch(repo), *paths[status], clock=clock)


def stop(repo, execution_id: int, version: int, actor: str = ACTOR):
    with repo.begin() as uow:
        result = uow.request_execution_stop(execution_id, version, actor)
        uow.commit()
    return result


def claim(repo: Repository, execution_id: int, version: int, token: bytes = OWNER) -> ExecutionView:
    with repo.begin() as uow:
        claimed = uow.claim_execution_owner(execution_id, version, token)
        uow.commit()
    return claimed


def observe(repo, execution_id: int, token: bytes = OWNER):
    with repo.begin() as uow:
        control = uow.observe_execution_control(execution_id, token)
        uow.commit()
    return control


# ------------------------------------------------------------------- scenario 6.1


def test_6_1_owner_comparison_and_stop_observation_are_atomic(repo, clock):
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        claimed = uow.claim_execution_owner(execution.id, execution.version, OWNER)
        uow.commit()
    assert claimed.version == execution.version == 0
    assert claimed.owner_recorded

    with pytest.raises(ExecutionOwned) as owned:
        claim(repo, execution.id, claimed.version, OTHER)
    assert owned.value.id == execution.id

    clock.advance(timedelta(seconds=2))
    stopped = stop(repo, execution.id, claimed.version, "operator:test")
    assert stopped.changed
    assert stopped.execution.status is S.STARTING
    assert stopped.execution.version == 0

    clock.advance(timedelta(seconds=1))
    control = observe(repo, execution.id, OWNER)
    assert (control.owner_matches, control.stop_requested) == (True, True)
    assert control.execution.status is S.STOPPING
    assert control.execution.version == 1
    assert row(repo, execution).status == "STOPPING"


# ------------------------------------------------------------------ stop requests


@pytest.mark.parametrize("status", [S.STARTING, S.STARTED])
def test_a_stop_request_records_who_and_when_without_changing_status_version_or_activity(
    repo, clock, status
):
    execution = in_status(repo, clock, status)
    before = row(repo, execution)
    clock.advance(timedelta(minutes=5))
    result = stop(repo, execution.id, execution.version)
    assert result.changed is True
    assert result.execution.stop_requested
    assert result.execution.stop_requested_at == clock.now()
    assert result.execution.stop_requested_by == ACTOR
    assert result.execution.execution == execution
    after = row(repo, execution)
    assert (after.stop_requested_at, after.stop_requested_by) == (clock.now(), ACTOR)
    assert (after.status, after.version) == (status.value, execution.version)
    assert after.updated_at == before.updated_at
    assert after.last_activity_at == before.last_activity_at


def test_a_second_stop_request_overwrites_who_and_when(repo, clock):
    execution = in_status(repo, clock, S.STARTED)
    stop(repo, execution.id, execution.version, "operator:first")
    clock.advance(timedelta(seconds=30))
    second = stop(repo, execution.id, execution.version, "operator:second")
    assert second.changed
    after = row(repo, execution)
    assert (after.stop_requested_at, after.stop_requested_by) == (clock.now(), "operator:second")


def test_a_stop_request_does_not_disturb_the_runtimes_next_cas(repo, clock):
    execution = in_status(repo, clock, S.STARTED)
    stop(repo, execution.id, execution.version)
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        completed = uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    assert completed.status is S.COMPLETED
    assert row(repo, execution).stop_requested_at is not None


@pytest.mark.parametrize("status", [S.STARTING, S.STARTED])
def test_a_stop_request_with_a_stale_version_is_refused_and_writes_nothing(repo, clock, status):
    execution = in_status(repo, clock, status)
    with repo.begin() as uow, pytest.raises(VersionAhead) as ahead:
        uow.request_execution_stop(execution.id, execution.version + 1, ACTOR)
    assert (ahead.value.expected, ahead.value.actual) == (execution.version + 1, execution.version)
    assert row(repo, execution).stop_requested_at is None
    if execution.version > 0:
        with repo.begin() as uow, pytest.raises(StaleVersion):
            uow.request_execution_stop(execution.id, execution.version - 1, ACTOR)
        assert row(repo, execution).stop_requested_at is None


@pytest.mark.parametrize(
    "status", [S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.ABANDONED], ids=str
)
def test_6_2_a_stop_on_stopping_or_finished_is_a_no_op_without_a_version_check(repo, clock, status):
    execution = in_status(repo, clock, status)
    before = row(repo, execution)
    result = stop(repo, execution.id, execution.version + 7)
    assert result.changed is False
    assert result.execution.execution == execution
    assert result.execution.stop_requested_at is None
    after = row(repo, execution)
    assert after.stop_requested_at is None
    assert after.stop_requested_by is None
    assert (after.status, after.version, after.updated_at) == (
        status.value,
        before.version,
        before.updated_at,
    )


def test_a_stop_on_unknown_is_invalid_state(repo, clock):
    execution = in_status(repo, clock, S.UNKNOWN)
    with repo.begin() as uow, pytest.raises(InvalidState) as refused:
        uow.request_execution_stop(execution.id, execution.version, ACTOR)
    assert (refused.value.id, refused.value.status) == (execution.id, S.UNKNOWN)
    assert row(repo, execution).stop_requested_at is None


def test_a_stop_of_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.request_execution_stop(MISSING, 0, ACTOR)


@pytest.mark.adapter
@pytest.mark.parametrize(("actor", "error"), [("", EmptyName), ("two words", InvalidCharacters)])
def test_the_actor_is_validated_before_any_query(repo, clock, actor, error):
    execution = in_status(repo, clock, S.STARTED)
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries, pytest.raises(error):
        uow.request_execution_stop(execution.id, execution.version, actor)
    assert queries.captured_queries == []


# ---------------------------------------------------------------------- ownership


def test_a_claim_on_starting_records_the_token_without_bumping_the_version(repo, clock):
    execution = launch(repo)
    before = row(repo, execution)
    clock.advance(timedelta(seconds=3))
    claimed = claim(repo, execution.id, 0)
    assert claimed.owner_recorded
    assert claimed.execution == execution
    after = row(repo, execution)
    assert bytes(after.owner_token) == OWNER
    assert after.version == 0
    assert after.updated_at == before.updated_at
    assert after.last_activity_at == before.last_activity_at


def test_claiming_again_with_the_same_token_is_idempotent(repo):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    again = claim(repo, execution.id, 0)
    assert again.owner_recorded
    assert bytes(row(repo, execution).owner_token) == OWNER


def test_another_token_never_takes_over(repo):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    with pytest.raises(ExecutionOwned):
        claim(repo, execution.id, 0, OTHER)
    assert bytes(row(repo, execution).owner_token) == OWNER


@pytest.mark.parametrize("status", [s for s in S if s is not S.STARTING], ids=str)
def test_a_claim_outside_starting_is_not_allowed(repo, clock, status):
    execution = in_status(repo, clock, status)
    with repo.begin() as uow, pytest.raises(ExecutionOwnershipNotAllowed) as refused:
        uow.claim_execution_owner(execution.id, execution.version, OWNER)
    assert (refused.value.id, refused.value.status) == (execution.id, status)
    assert row(repo, execution).owner_token is None


def test_a_claim_with_a_stale_version_is_refused(repo, clock):
    execution = launch(repo)
    with repo.begin() as uow, pytest.raises(VersionAhead):  # a version it never had
        uow.claim_execution_owner(execution.id, 1, OWNER)
    assert row(repo, execution).owner_token is None
    started = move(repo, execution, S.STARTED)
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.claim_execution_owner(started.id, 0, OWNER)
    assert row(repo, execution).owner_token is None


def test_a_claim_of_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.claim_execution_owner(MISSING, 0, OWNER)


@pytest.mark.parametrize("token", [b"\x01" * 15, b"\x01" * 17, "01" * 16])
def test_a_token_must_be_16_bytes(repo, token):
    execution = launch(repo)
    with repo.begin() as uow:
        with pytest.raises(InvalidCharacters):
            uow.claim_execution_owner(execution.id, 0, token)
        with pytest.raises(InvalidCharacters):
            uow.observe_execution_control(execution.id, token)


def test_the_token_is_never_shown(repo):
    execution = launch(repo)
    claimed = claim(repo, execution.id, 0, bytes(range(16)))
    text = repr(claimed) + str(claimed)
    assert bytes(range(16)).hex() not in text
    assert "token" not in text


# -------------------------------------------------------------------- observation


def test_the_owners_observation_without_a_stop_is_activity_and_changes_nothing_else(repo, clock):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    execution = move(repo, execution, S.STARTED, clock=clock)
    clock.advance(timedelta(minutes=2))
    control = observe(repo, execution.id)
    assert (control.owner_matches, control.stop_requested) == (True, False)
    assert control.execution.status is S.STARTED
    assert control.execution.version == execution.version
    after = row(repo, execution)
    assert after.last_observed_at == after.last_activity_at == clock.now()
    assert (after.status, after.version) == ("STARTED", execution.version)
    assert control.execution.last_observed_at == clock.now()
    assert control.execution.last_activity_at == clock.now()


def test_a_strangers_observation_is_recorded_but_is_not_activity_and_never_stops(repo, clock):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    execution = move(repo, execution, S.STARTED, clock=clock)
    stop(repo, execution.id, execution.version)
    activity = row(repo, execution).last_activity_at
    clock.advance(timedelta(minutes=2))
    control = observe(repo, execution.id, OTHER)
    assert (control.owner_matches, control.stop_requested) == (False, True)
    assert control.execution.status is S.STARTED
    after = row(repo, execution)
    assert after.last_observed_at == clock.now()
    assert after.last_activity_at == activity
    assert (after.status, after.version) == ("STARTED", execution.version)


def test_without_a_recorded_owner_nobody_matches(repo, clock):
    execution = in_status(repo, clock, S.STARTED)
    stop(repo, execution.id, execution.version)
    control = observe(repo, execution.id, OWNER)
    assert (control.owner_matches, control.stop_requested) == (False, True)
    assert control.execution.status is S.STARTED


@pytest.mark.parametrize("status", [S.STARTING, S.STARTED])
def test_the_owner_seeing_a_stop_moves_to_stopping_in_the_same_transaction(repo, clock, status):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    execution = move(repo, execution, *([S.STARTED] if status is S.STARTED else []), clock=clock)
    stop(repo, execution.id, execution.version)
    clock.advance(timedelta(seconds=5))
    control = observe(repo, execution.id)
    assert (control.owner_matches, control.stop_requested) == (True, True)
    assert control.execution.status is S.STOPPING
    assert control.execution.version == execution.version + 1
    assert control.execution.execution.updated_at == clock.now()
    after = row(repo, execution)
    assert (after.status, after.version, after.updated_at) == (
        "STOPPING",
        execution.version + 1,
        clock.now(),
    )
    assert after.last_activity_at == after.last_observed_at == clock.now()
    assert after.stop_requested_at is not None, "an observation never clears the request"


def test_observing_a_stopping_execution_again_changes_no_status(repo, clock):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    stop(repo, execution.id, 0)
    first = observe(repo, execution.id)
    clock.advance(timedelta(seconds=1))
    second = observe(repo, execution.id)
    assert second.execution.status is S.STOPPING
    assert second.execution.version == first.execution.version
    assert second.stop_requested


def test_observing_a_finished_execution_records_the_observation_only(repo, clock):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    execution = move(repo, execution, S.STARTED, S.COMPLETED, clock=clock)
    clock.advance(timedelta(seconds=1))
    control = observe(repo, execution.id)
    assert control.owner_matches
    assert control.execution.status is S.COMPLETED
    assert row(repo, execution).version == execution.version


def test_observing_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.observe_execution_control(MISSING, OWNER)


def test_a_rolled_back_stop_request_leaves_nothing(repo, clock):
    execution = in_status(repo, clock, S.STARTED)
    with repo.begin() as uow:
        uow.request_execution_stop(execution.id, execution.version, ACTOR)
    assert row(repo, execution).stop_requested_at is None


# ---------------------------------------------- query budgets (the adapter's own)


def _is_locking_read(sql: str) -> bool:
    # A job execution's locking read joins its definition and locks the execution only.
    return sql.startswith("SELECT") and (
        not on_postgres() or sql.endswith(("FOR NO KEY UPDATE", "FOR NO KEY UPDATE OF e"))
    )


@pytest.mark.adapter
def test_an_applied_stop_is_one_locking_read_and_one_narrow_update(repo, clock):
    execution = in_status(repo, clock, S.STARTED)
    with repo.begin() as uow:
        sql = sql_of(lambda: uow.request_execution_stop(execution.id, execution.version, ACTOR))
    assert len(sql) == 2
    assert _is_locking_read(sql[0])
    assert sql[1].startswith("UPDATE")
    for untouched in ("version", "status", "updated_at", "last_activity_at"):
        assert f'"{untouched}"' not in sql[1]


@pytest.mark.adapter
@pytest.mark.parametrize("status", [S.STOPPING, S.COMPLETED, S.UNKNOWN])
def test_a_no_op_or_refused_stop_is_one_locking_read(repo, clock, status):
    execution = in_status(repo, clock, status)
    with repo.begin() as uow:
        queries = CaptureQueriesContext(connection)
        with queries, pytest.raises(InvalidState) if status is S.UNKNOWN else nullcontext():
            uow.request_execution_stop(execution.id, execution.version, ACTOR)
    assert len(queries.captured_queries) == 1


@pytest.mark.adapter
def test_claim_budgets(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        first = sql_of(lambda: uow.claim_execution_owner(execution.id, 0, OWNER))
        again = sql_of(lambda: uow.claim_execution_owner(execution.id, 0, OWNER))
    assert len(first) == 2
    assert _is_locking_read(first[0])
    assert first[1].startswith("UPDATE")
    assert len(again) == 1


@pytest.mark.adapter
@pytest.mark.parametrize("stops", [False, True])
def test_an_observation_is_one_locking_read_and_one_update(repo, stops):
    execution = launch(repo)
    claim(repo, execution.id, 0)
    if stops:
        stop(repo, execution.id, 0)
    with repo.begin() as uow:
        sql = sql_of(lambda: uow.observe_execution_control(execution.id, OWNER))
    assert len(sql) == 2
    assert _is_locking_read(sql[0])
    assert sql[1].startswith("UPDATE")
    assert ('"version"' in sql[1]) is stops
