"""Races over real HTTP: gunicorn (two worker processes, threads) on the PostgreSQL
test database, sixteen client threads released together at a barrier against
one row. The compare-and-swap admits exactly one; the others are told
``stale_version``; identical operator requests act once and replay.

Each race runs twice: against one server on the database directly, and against
two servers behind PgBouncer in transaction pooling (tests/pooler.py), the
contenders spread over both."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import OperatorClient, RuntimeClient
from oxide_batch.domain.errors import StaleVersion
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.live import gunicorn, token_for
from tests.pooler import scaled_out

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
CONTENDERS = 16


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def servers(request: pytest.FixtureRequest, django_db_setup: None) -> Iterator[tuple[str, ...]]:
    """The base URLs to spread contenders over: one gunicorn on the test database,
    or two behind PgBouncer; stopped at module end."""
    if request.param == "direct":
        with gunicorn() as url:
            yield (url,)
    else:
        with scaled_out() as deployment:
            yield deployment.urls


def spread(servers: tuple[str, ...], index: int) -> str:
    return servers[index % len(servers)]


def race(work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in CONTENDERS threads released together; each returns or raises."""
    barrier = threading.Barrier(CONTENDERS)
    outcomes: list[Any] = [None] * CONTENDERS

    def target(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[index] = work(index)
        except BaseException as error:  # the test inspects it
            outcomes[index] = error

    threads = [threading.Thread(target=target, args=(i,)) for i in range(CONTENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a contender hung"
    return outcomes


def split(outcomes: list[Any]) -> tuple[list[Any], list[BaseException]]:
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    return won, lost


def test_one_transition_wins_the_rest_are_stale(servers: tuple[str, ...]) -> None:
    token = token_for("racer", RUNTIME)
    setup = RuntimeClient(servers[0], token, timeout=20)
    _, execution = setup.launch("raced_job", {"run": "1"})
    clients = [RuntimeClient(servers[0], token, timeout=20) for _ in range(CONTENDERS)]

    outcomes = race(lambda i: clients[i].transition(execution.id, execution.version, S.STARTED))

    won, lost = split(outcomes)
    assert len(won) == 1, outcomes
    assert won[0].status is S.STARTED
    assert won[0].version == execution.version + 1
    assert len(lost) == CONTENDERS - 1
    for error in lost:
        assert isinstance(error, StaleVersion), repr(error)
        assert (error.expected, error.actual) == (execution.version, execution.version + 1)
    row = models.JobExecution.objects.get(pk=execution.id)
    assert (row.status, row.version) == ("STARTED", execution.version + 1)


def test_one_chunk_commit_wins_the_rest_are_stale(servers: tuple[str, ...]) -> None:
    token = token_for("chunker", RUNTIME)
    setup = RuntimeClient(servers[0], token, timeout=20)
    _, execution = setup.launch("chunked_job", {"run": "1"})
    execution = setup.start(execution)
    step = setup.create_step(execution, "load")
    step = setup.transition_step(step, step.version, S.STARTED)
    clients = [RuntimeClient(servers[0], token, timeout=20) for _ in range(CONTENDERS)]

    def commit(index: int) -> tuple[int, Any]:
        committed = clients[index].commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=1),
            checkpoint=StateEnvelope("reader.offset", 1, {"offset": index}),
        )
        return index, committed

    won, lost = split(race(commit))
    assert len(won) == 1
    assert all(isinstance(error, StaleVersion) for error in lost), lost
    assert len(lost) == CONTENDERS - 1
    winner, committed = won[0]
    state = setup.checkpoint(step.id)
    assert state.step == committed
    assert (state.step.counts.read, state.step.version) == (1, step.version + 1)  # once
    assert state.checkpoint == StateEnvelope("reader.offset", 1, {"offset": winner})


def test_identical_operator_requests_act_once_and_replay(servers: tuple[str, ...]) -> None:
    runtime = RuntimeClient(servers[0], token_for("worker", RUNTIME), timeout=20)
    _, execution = runtime.launch("stopped_job", {"run": "1"})
    execution = runtime.start(execution)
    token = token_for("olga", OPERATOR)
    clients = [OperatorClient(spread(servers, i), token, timeout=20) for i in range(CONTENDERS)]

    outcomes = race(
        lambda i: clients[i].stop(execution.id, execution.version, operation_id="stop-race")
    )

    won, lost = split(outcomes)
    assert lost == [], lost
    assert sorted(o.outcome for o in won) == ["APPLIED"] + ["REPLAYED"] * (CONTENDERS - 1)
    assert {o.record["id"] for o in won} == {won[0].record["id"]}
    assert all(o.execution.stop_requested for o in won)
    rows = models.OperatorRequest.objects.filter(operation_id="stop-race")
    assert [(r.action, r.outcome, r.actor) for r in rows] == [("STOP", "APPLIED", "olga")]
