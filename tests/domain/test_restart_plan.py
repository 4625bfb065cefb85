"""The restart plan in the domain (issue 40): for each status of the newest
earlier row × the node's ``allow_start_if_complete`` × a partition's rerun, the
plan's action is what ``step_takes_over`` decides (take over → ``resume``,
fresh → ``rerun``, refused → ``skip`` or, for UNKNOWN, ``refuse``); the
node's declared start limit is held first; the whole plan follows
``plan_new_attempt`` (the lost-write gate lists the steps still)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import NotRestartable
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.flow import FlowNode, FlowPlan, NodeKind
from oxide_batch.domain.launch import step_takes_over
from oxide_batch.domain.restart_plan import EarlierStep, PlanAction, planned_step, restart_plan
from tests.domain.builders import job_execution

S = BatchStatus
COUNTS = ExecutionCounts(read=9, written=8, committed=2)


def row(status: BatchStatus, *, rerun: bool = False, node: str = "load") -> EarlierStep:
    return EarlierStep(41, 31, 1, "load", node, status, COUNTS, True, rerun)


def node(*, allow: bool = False, limit: int | None = None, kind=NodeKind.STEP) -> FlowNode:
    return FlowNode("load", kind, "load", limit, allow)


def expected(status: BatchStatus, allow: bool, rerun: bool) -> PlanAction:
    try:
        takes_over = step_takes_over(
            status, step_name="load", earlier_id=41, allow_start_if_complete=allow,
            partition_rerun=rerun,
        )  # fmt: skip
    except NotRestartable:
        return PlanAction.REFUSE if status is S.UNKNOWN else PlanAction.SKIP
    return PlanAction.RESUME if takes_over else PlanAction.RERUN


@pytest.mark.parametrize("rerun", [False, True], ids=["plain", "partition-rerun"])
@pytest.mark.parametrize("allow", [False, True], ids=["default", "allow-start-if-complete"])
@pytest.mark.parametrize("status", list(S), ids=str)
def test_the_action_is_what_step_creation_decides(status, allow, rerun):
    planned = planned_step(
        row(status, rerun=rerun), instance_id=30, node=node(allow=allow), starts=1
    )
    assert planned.action is expected(status, allow, rerun)
    if planned.action is PlanAction.RESUME:
        assert (planned.counts, planned.checkpoint) == (COUNTS, True)
    else:
        assert (planned.counts, planned.checkpoint) == (None, False)
    assert (planned.refusal is not None) == (planned.action is PlanAction.REFUSE)


def test_the_start_limit_is_held_before_the_status():
    limited = planned_step(row(S.COMPLETED), instance_id=30, node=node(limit=2), starts=2)
    assert (limited.action, limited.refusal.code) == (PlanAction.REFUSE, "start_limit_exceeded")
    under = planned_step(row(S.COMPLETED), instance_id=30, node=node(limit=3), starts=2)
    assert under.action is PlanAction.SKIP


def plan_of(latest, **options):
    flow = FlowPlan(
        "load",
        {
            "load": node(),
            "choose": FlowNode("choose", NodeKind.DECISION, "choose"),
            "publish": FlowNode("publish", NodeKind.PARTITIONED_STEP, "publish"),
        },
        (),
    )
    return restart_plan(
        execution=job_execution(S.FAILED),
        latest=latest,
        lost_write_of=options.get("lost_write_of"),
        earlier=[row(S.FAILED)],
        flow=flow,
        starts={"load": 1},
    )


def test_the_whole_plan_follows_plan_new_attempt():
    plan = plan_of(job_execution(S.FAILED))
    assert plan.restartable
    assert [(s.node_id, s.action) for s in plan.steps] == [("load", PlanAction.RESUME)]
    # Only step nodes are listed as not reached (a decision runs no step).
    assert [(s.node_id, s.action) for s in plan.unreached] == [("publish", PlanAction.RUN)]
    marked = plan_of(job_execution(S.FAILED), lost_write_of=7)
    assert marked.refusal.code == "lost_write_unresolved"
    assert [s.action for s in marked.steps] == [PlanAction.RESUME]
    later = plan_of(job_execution(S.STARTED, execution_id=32, attempt=2))
    assert (later.refusal.code, later.steps, later.unreached) == ("superseded", (), ())
