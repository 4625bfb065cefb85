"""The restart plan's read (issue 40): three queries whatever the number of
attempts and steps — the newest row per step name across attempts is what a
restarted step would take over; an execution that cannot be restarted says
why with no steps; and the steps a restart attempt skipped (one query)."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.restart_plan import PlanAction
from oxide_batch.selectors.restart_plan import (
    execution_restart_plan,
    plan_document,
    skipped_steps,
)
from tests.helpers import failure, key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


def step(repo: Any, execution: Any, name: str, *targets: BatchStatus, read: int = 0) -> Any:
    """A step of ``execution`` started, one chunk of ``read`` items, moved through ``targets``."""
    with repo.begin() as uow:
        row = uow.create_step_execution(execution.id, name, started=True)
        row = uow.commit_chunk(row.id, row.version, ExecutionCounts(read=read, committed=1))
        for target in targets:
            transition = LifecycleTransition(
                target, failure=failure() if target is S.FAILED else None
            )
            row = uow.transition_step_execution(row.id, row.version, transition)
        uow.commit()
    return row


def restart(repo: Any, execution: Any) -> Any:
    with repo.begin() as uow:
        attempt = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    return move(repo, attempt, S.STARTED)


def three_attempts(repo: Any, clock: Any, steps: int) -> tuple[Any, Any, dict[str, Any]]:
    """Attempt 1 completes ``extract`` and fails in ``step-i``; attempt 2 fails
    them again (skipping ``extract``); attempt 3 is FAILED with nothing run."""
    first = move(repo, launch(repo, key(run=f"n{steps}")), S.STARTED, clock=clock)
    rows = {"extract": step(repo, first, "extract", S.COMPLETED, read=3)}
    for index in range(steps):
        step(repo, first, f"step-{index}", S.FAILED, read=1)
    second = restart(repo, move(repo, first, S.FAILED, clock=clock))
    for index in range(steps):
        rows[f"step-{index}"] = step(repo, second, f"step-{index}", S.FAILED, read=1)
    third = restart(repo, move(repo, second, S.FAILED, clock=clock))
    return move(repo, third, S.FAILED, clock=clock), second, rows


@pytest.mark.parametrize("steps", [1, 6])
def test_the_plan_is_read_in_three_queries_whatever_the_history(
    repo, clock, django_assert_num_queries, steps
):
    third, _, rows = three_attempts(repo, clock, steps)
    with django_assert_num_queries(3):
        read = execution_restart_plan(third.id)
    plan = read.plan
    assert plan.restartable
    assert not read.more
    # The newest row per step name, across attempts: extract from attempt 1,
    # the others from attempt 2 (attempt 3 ran nothing).
    assert {(s.step_name, s.source.id if s.source else None) for s in plan.steps} == {
        (name, row.id) for name, row in rows.items()
    }
    actions = {s.step_name: (s.action, s.source.attempt if s.source else None) for s in plan.steps}
    assert actions["extract"] == (PlanAction.SKIP, 1)
    assert actions["step-0"] == (PlanAction.RESUME, 2)
    resumed = next(s for s in plan.steps if s.step_name == "step-0")
    assert (resumed.counts, resumed.checkpoint) == (rows["step-0"].counts, False)
    assert "from the start (no checkpoint)" in resumed.reason


def test_a_plan_of_an_execution_that_cannot_restart_says_why(repo, clock):
    first = move(repo, launch(repo, key(run="done")), S.STARTED, clock=clock)
    step(repo, first, "extract", S.COMPLETED)
    completed = move(repo, first, S.COMPLETED, clock=clock)
    document = plan_document(execution_restart_plan(completed.id))
    assert (document["restartable"], document["steps"]) == (False, [])
    assert document["refusal"]["code"] == "completed_instance"

    failed = move(repo, launch(repo, key(run="again")), S.STARTED, S.FAILED, clock=clock)
    running = restart(repo, failed)
    superseded = plan_document(execution_restart_plan(failed.id))["refusal"]
    assert superseded["code"] == "superseded"
    assert f"execution {running.id}" in superseded["detail"]
    active = plan_document(execution_restart_plan(running.id))["refusal"]
    assert active["code"] == "execution_already_active"


def test_a_restart_attempt_lists_the_steps_it_skipped_in_one_query(
    repo, clock, django_assert_num_queries
):
    third, second, rows = three_attempts(repo, clock, 3)
    skipped_by = {}
    for attempt in (second, third):
        row = type("Row", (), {})()
        row.pk, row.job_instance_id = attempt.id, attempt.job_instance_id
        row.attempt, row.restart_of_id = attempt.attempt, attempt.restart_of_id
        with django_assert_num_queries(1):
            skipped_by[attempt.attempt] = skipped_steps(row)
    # Attempt 2 and 3 both skipped extract, which attempt 1 completed; the
    # failed steps are not skipped (attempt 2 ran them, attempt 3 would resume them).
    for attempt in (2, 3):
        rows_skipped, more = skipped_by[attempt]
        assert [(r["step_name"], r["attempt"], r["id"]) for r in rows_skipped] == [
            ("extract", 1, rows["extract"].id)
        ]
        assert not more
    first = type("Row", (), {"restart_of_id": None})()
    with django_assert_num_queries(0):
        assert skipped_steps(first) == ([], False)
