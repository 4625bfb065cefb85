"""Flow races on PostgreSQL with real threads and separate connections
(contract §2.3.4, §3.2; contract scenario 11.1).

Each contender opens its unit of work and waits at a barrier, so all
transactions reach their first locking statement together.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from oxide_batch import models
from oxide_batch.domain.errors import (
    ConcurrentModification,
    FlowStateCorrupt,
    StartLimitExceeded,
    StepExecutionExists,
)
from oxide_batch.domain.flow import FlowDecisionRequest, FlowTransitionKind
from tests.concurrency.support import admin_connection, run_in_threads
from tests.repository.test_flow import INPUT, Flow, decision, launch_flow, node, terminal

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
CONTENDERS = 16
JOB = "flow_job"


def fan_out_manifest(count: int) -> dict[str, Any]:
    """An entry decision plus ``count`` decision nodes, each ending the job."""
    deciders = [f"d{index:02d}" for index in range(count)]
    return {
        "format": 2,
        "job": JOB,
        "entry": "start",
        "nodes": [
            {"id": "start", "kind": "decision"},
            *({"id": d, "kind": "decision"} for d in deciders),
        ],
        "transitions": [
            {"source": "start", "pattern": "*", "target": node(deciders[0])},
            *({"source": d, "pattern": "*", "target": terminal("COMPLETE")} for d in deciders),
        ],
    }


def decider(flow: Flow, source: str, outcome: str = "DONE") -> FlowDecisionRequest:
    return decision(flow, source, FlowTransitionKind.DECIDER, outcome, terminal("COMPLETE"))


def contend(repo, count: int, act):
    """``act(uow, index)`` in ``count`` threads, all released together; committed."""
    barrier = threading.Barrier(count)

    def work(index: int):
        with repo.begin() as uow:
            barrier.wait()
            result = act(uow, index)
            uow.commit()
        return result

    outcomes = run_in_threads(count, work)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    losers = [outcome.error for outcome in outcomes if not outcome.ok]
    return winners, losers


def test_concurrent_decisions_of_different_nodes_get_sequences_1_to_n(repo, clock):
    flow = launch_flow(repo, clock, fan_out_manifest(CONTENDERS))
    winners, losers = contend(
        repo,
        CONTENDERS,
        lambda uow, index: uow.append_flow_decision(decider(flow, f"d{index:02d}")),
    )
    assert losers == []
    assert sorted(d.sequence for d in winners) == list(range(1, CONTENDERS + 1))
    stored = list(
        models.FlowDecision.objects.filter(job_execution_id=flow.execution.id)
        .order_by("sequence")
        .values_list("sequence", "source_node_id")
    )
    assert [sequence for sequence, _ in stored] == list(range(1, CONTENDERS + 1))
    assert len({source for _, source in stored}) == CONTENDERS
    with repo.begin() as uow:
        assert uow.flow_decisions(flow.execution.id) == sorted(winners, key=lambda d: d.sequence)


def test_concurrent_decisions_of_one_node_have_one_winner(repo, clock):
    """The execution lock serializes the appends. Each loser waits on it, then
    reads the history in a fresh statement (READ COMMITTED), sees the winner's
    decision from that source node and refuses with FlowStateCorrupt (one
    decision per source node per execution) — before any insert, so the unique
    index never fires and no loser sees ConcurrentModification (that would need
    a lock wait beyond lock_timeout)."""
    flow = launch_flow(repo, clock, fan_out_manifest(1))
    outcomes = ["DONE", "SKIPPED", "RETRY", "OTHER"] * (CONTENDERS // 4)
    winners, losers = contend(
        repo,
        CONTENDERS,
        lambda uow, index: uow.append_flow_decision(decider(flow, "d00", outcomes[index])),
    )
    assert len(winners) == 1
    assert winners[0].sequence == 1
    assert len(losers) == CONTENDERS - 1
    assert all(isinstance(error, FlowStateCorrupt) for error in losers), losers
    assert models.FlowDecision.objects.filter(job_execution_id=flow.execution.id).count() == 1


def test_concurrent_starts_of_one_node_under_limit_1_have_one_winner(repo, clock):
    """Scenario 11.1 under real concurrency. The instance lock serializes the
    creators; each loser counts the node's rows after the winner committed and
    gets StartLimitExceeded — the limit is checked before the insert, so the
    unique (execution, node) index is not what refuses it."""
    flow = launch_flow(repo, clock, fan_out_manifest(1))
    winners, losers = contend(
        repo,
        CONTENDERS,
        lambda uow, index: uow.create_flow_step_execution(
            flow.execution.id, f"only-{index}", "only", 1
        ),
    )
    assert len(winners) == 1
    assert len(losers) == CONTENDERS - 1
    assert all(isinstance(error, StartLimitExceeded) for error in losers), losers
    assert all(
        (error.instance_id, error.node_id, error.limit) == (flow.instance_id, "only", 1)
        for error in losers
    )
    assert models.StepExecution.objects.filter(node_id="only").count() == 1


def test_concurrent_unlimited_starts_of_one_node_in_one_execution_have_one_winner(repo, clock):
    """Without a limit the losers reach the insert, which finds the winner's
    committed row of the node: StepExecutionExists (a repeated node)."""
    flow = launch_flow(repo, clock, fan_out_manifest(1))
    winners, losers = contend(
        repo,
        CONTENDERS,
        lambda uow, index: uow.create_flow_step_execution(
            flow.execution.id, f"only-{index}", "only"
        ),
    )
    assert len(winners) == 1
    assert all(isinstance(error, StepExecutionExists) for error in losers), losers
    assert models.StepExecution.objects.filter(node_id="only").count() == 1


def test_a_start_waits_for_the_instance_lock(repo, clock):
    """The first lock a flow start takes is the instance row's: while another
    transaction holds it, the start times out as ConcurrentModification and
    nothing is written."""
    flow = launch_flow(repo, clock, fan_out_manifest(1))
    with admin_connection() as admin, admin.transaction():
        admin.execute(
            "SELECT id FROM ob_job_instance WHERE id = %s FOR NO KEY UPDATE", (flow.instance_id,)
        )
        with repo.begin() as uow:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            with pytest.raises(ConcurrentModification):
                uow.create_flow_step_execution(flow.execution.id, "only", "only", 1)
    assert not models.StepExecution.objects.exists()
    with repo.begin() as uow:
        assert uow.create_flow_step_execution(flow.execution.id, "only", "only", 1).version == 0


def test_an_append_waits_for_the_execution_lock(repo, clock):
    """A decision of another node waits for the execution lock held by an
    uncommitted append (timing out as ConcurrentModification), and then gets the
    next sequence once the holder commits."""
    flow = launch_flow(repo, clock, fan_out_manifest(2))
    holding, release = threading.Event(), threading.Event()

    def holder():
        with repo.begin() as uow:
            appended = uow.append_flow_decision(decider(flow, "d00"))
            holding.set()
            release.wait(10)
            uow.commit()
        return appended

    def contender():
        holding.wait(10)
        try:
            with repo.begin() as uow:
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '200ms'")
                with pytest.raises(ConcurrentModification):
                    uow.append_flow_decision(decider(flow, "d01"))
        finally:
            release.set()
        return None

    outcomes = run_in_threads(2, lambda index: holder() if index == 0 else contender())
    assert all(outcome.ok for outcome in outcomes), [outcome.error for outcome in outcomes]
    with repo.begin() as uow:
        second = uow.append_flow_decision(decider(flow, "d01"))
        uow.commit()
    assert (outcomes[0].value.sequence, second.sequence) == (1, 2)


def test_a_reusable_lookup_does_not_wait_for_locks(repo, clock):
    """Reads take no locks: a lookup proceeds while an append holds the execution."""
    flow = launch_flow(repo, clock, fan_out_manifest(1))
    with admin_connection() as admin, admin.transaction():
        admin.execute(
            "SELECT id FROM ob_job_execution WHERE id = %s FOR UPDATE", (flow.execution.id,)
        )
        with repo.begin() as uow:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            assert (
                uow.find_reusable_flow_decision(
                    flow.instance_id, "d00", flow.digest, INPUT, FlowTransitionKind.DECIDER
                )
                is None
            )
            assert uow.flow_decisions(flow.execution.id) == []
            assert uow.latest_flow_step(flow.instance_id, "d00") is None
