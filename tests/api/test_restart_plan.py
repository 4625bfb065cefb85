"""The restart plan agrees with what the restart then does (issue 40 point 4,
contract §2.3.6): one test per status an earlier step can have computes the
plan (``GET executions/{id}/restart-plan``), then restarts the instance through
the API and creates each step, and finds exactly the plan's action —

- ``skip`` → 409 ``not_restartable`` naming the earlier row and its status;
- ``rerun`` → 201, a fresh step (counts 0, no checkpoint);
- ``resume`` → 201, the earlier counts and checkpoint taken over;
- ``refuse`` → the 409 code the plan named (for a step, or the whole restart);
- ``run`` (a flow node not reached) → 201, fresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db.models import F

from oxide_batch import models
from tests.api.support import Runtime, problem

pytestmark = pytest.mark.django_db

JOB = "plan_job"
CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 42}}
ZERO = {"read": 0, "processed": 0, "written": 0, "filtered": 0, "committed": 0, "rolled_back": 0}
ZERO |= {"read_skip": 0, "process_skip": 0, "write_skip": 0}  # a step's skip counts (issue 42)
# How a step reaches each status through the runtime API.
PATHS = {
    "COMPLETED": ("COMPLETED",),
    "FAILED": ("FAILED",),
    "STOPPED": ("STOPPED",),
    "STARTED": (),
    "ABANDONED": ("FAILED", "ABANDONED"),
    "UNKNOWN": ("UNKNOWN",),
}


@dataclass(frozen=True)
class Case:
    """An earlier step ``work`` left in ``status`` by attempt 1, which ends
    ``ends``; ``flow``: attempt 1 runs a flow plan (node ``work`` with
    ``allow``/``limit``, node ``publish`` never reached); ``lost_write``: the
    store lost one of attempt 1's writes. ``action`` is what the plan says."""

    status: str
    action: str
    ends: str = "FAILED"
    flow: bool = False
    allow: bool = False
    limit: int | None = None
    lost_write: bool = False


CASES = {
    "completed": Case("COMPLETED", "skip"),
    "completed-allow-start-if-complete": Case("COMPLETED", "rerun", flow=True, allow=True),
    "failed": Case("FAILED", "resume"),
    "stopped": Case("STOPPED", "resume", ends="STOPPED"),
    "left-started": Case("STARTED", "resume"),
    "abandoned": Case("ABANDONED", "skip"),
    "unknown": Case("UNKNOWN", "refuse"),
    "start-limit-reached": Case("FAILED", "refuse", flow=True, limit=1),
    "completed-flow": Case("COMPLETED", "skip", flow=True, limit=2),
    "lost-write": Case("FAILED", "resume", lost_write=True),
}
REASONS = {
    "skip": "a restart skips it",
    "rerun": "runs again from the start, nothing taken over",
    "resume": "it resumes from its checkpoint, 5 read and 4 written carried",
    "refuse": "",
}


def manifest(case: Case) -> dict[str, Any]:
    work: dict[str, Any] = {"id": "work", "kind": "step", "allow_start_if_complete": case.allow}
    if case.limit is not None:
        work["start_limit"] = case.limit
    return {
        "format": 2,
        "job": JOB,
        "entry": "work",
        "nodes": [work, {"id": "publish", "kind": "step"}],
        "transitions": [
            {"source": "work", "pattern": "*", "target": {"node": "publish"}},
            {"source": "publish", "pattern": "*", "target": {"terminal": "COMPLETE"}},
        ],
    }


def first_attempt(rt: Runtime, case: Case) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Attempt 1 with step ``work`` (one chunk: 5 read, a checkpoint) left in
    ``case.status``, ended ``case.ends``: the instance, the execution, the step id."""
    body: dict[str, Any] = {}
    if case.flow:
        definition = rt.post(
            "definitions", {"job_name": JOB, "revision": "v1", "manifest": manifest(case)}, 201
        )
        body = {"definition_digest": definition["digest"]}
    instance = rt.post("instances", {"job_name": JOB}, 201)
    execution = rt.move(rt.post(f"instances/{instance['id']}/executions", body, 201), "STARTED")
    step = rt.move_step(create(rt, execution, case, "work", 201), "STARTED")
    chunk = {"expected_version": step["version"], "counts": {"read": 5, "written": 4}}
    step = rt.post(f"steps/{step['id']}/checkpoint", {**chunk, "checkpoint": CHECKPOINT}, 200)
    if case.lost_write:
        # The store lost the chunk it acknowledged: the next write is version_ahead.
        models.StepExecution.objects.filter(pk=step["id"]).update(version=F("version") - 1)
        chunk = {"expected_version": step["version"], "counts": {"read": 1}}
        problem(rt.post(f"steps/{step['id']}/checkpoint", chunk), 409, "version_ahead")
        step = rt.get(f"steps/{step['id']}")
    for target in PATHS[case.status]:
        step = rt.move_step(step, target)
    execution = rt.move(rt.get(f"executions/{execution['id']}"), case.ends)
    return instance, execution, step["id"]


def create(
    rt: Runtime, execution: dict[str, Any], case: Case, name: str, status: int | None = None
) -> Any:
    body: dict[str, Any] = {"step_name": name}
    if case.flow:
        body["node_id"] = name
    return rt.post(f"executions/{execution['id']}/steps", body, status)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_plan_is_what_the_restart_does(rt: Runtime, viewer: Runtime, case: Case) -> None:
    instance, failed, earlier_id = first_attempt(rt, case)
    plan = viewer.get(f"executions/{failed['id']}/restart-plan")
    assert plan["execution_id"] == failed["id"]
    (work,) = plan["steps"]
    assert (work["step_name"], work["action"], work["status"]) == ("work", case.action, case.status)
    assert (work["from_step_execution_id"], work["from_attempt"]) == (earlier_id, 1)
    assert REASONS[case.action] in work["reason"]
    assert work["from_execution_id"] == failed["id"]
    assert [(node["node_id"], node["action"]) for node in plan["unreached"]] == (
        [("publish", "run")] if case.flow else []
    )

    restart = rt.post(f"instances/{instance['id']}/executions", {})
    if case.lost_write:
        assert plan["restartable"] is False
        problem(restart, 409, plan["refusal"]["code"])
        assert plan["refusal"]["code"] == "lost_write_unresolved"
        return
    assert (plan["restartable"], plan["refusal"]) == (True, None)
    assert restart.status_code == 201, restart.content
    attempt = rt.move(restart.json(), "STARTED")
    answer = create(rt, attempt, case, "work")
    if case.action == "skip":
        refused = problem(answer, 409, "not_restartable")
        assert (refused["batch_status"], refused["step_execution_id"]) == (case.status, earlier_id)
        assert work["refusal"] is None
    elif case.action == "refuse":
        code = "start_limit_exceeded" if case.limit else "not_restartable"
        assert work["refusal"]["code"] == code
        problem(answer, 409, code)
    else:
        assert answer.status_code == 201, answer.content
        state = rt.get(f"steps/{answer.json()['id']}/checkpoint")
        carried = (state["step"]["counts"], state["checkpoint"] is not None)
        if case.action == "rerun":
            assert carried == (ZERO, False) == (ZERO, work["checkpoint"])
            assert work["counts"] is None
        else:
            assert (
                carried == (work["counts"], work["checkpoint"]) == (state["step"]["counts"], True)
            )
            assert state["checkpoint"] == CHECKPOINT
            assert work["counts"]["read"] == 5
    for node in plan["unreached"]:
        fresh = create(rt, attempt, case, node["step_name"], 201)
        assert (fresh["counts"], node["from_step_execution_id"]) == (ZERO, None)


def test_an_unknown_execution_is_404_and_a_running_one_says_why(
    rt: Runtime, viewer: Runtime
) -> None:
    missing = viewer.get("executions/987654321/restart-plan", expect=None)
    problem(missing, 404, "job_execution_not_found")
    running = rt.started()
    plan = viewer.get(f"executions/{running['id']}/restart-plan")
    assert (plan["restartable"], plan["steps"], plan["unreached"]) == (False, [], [])
    assert plan["refusal"]["code"] == "execution_already_active"
    assert plan["assumes"] == "the same definition"
