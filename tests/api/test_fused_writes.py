"""contract §4.2 "Fewer round trips" over HTTP: a whole run is launch, a step
created STARTED, chunk commits (the last one finishing the step) and one
transition with its exit code; each answer of a write carrying the owner token
carries the execution's control state; refusals write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch import models
from tests.api.support import Runtime, problem

TOKEN = "a1" * 16
OTHER = "b2" * 16
KEY = {"job_name": "import_job", "identifying_parameters": {"run": "2026-07-29"}}
CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 5}}


def launch(rt: Runtime, token: str = TOKEN) -> dict[str, Any]:
    launched: dict[str, Any] = rt.post("launches", {**KEY, "owner_token": token}, 201)
    return launched


def test_a_whole_run_is_k_plus_3_writes(rt: Runtime) -> None:
    launched = launch(rt)
    execution = launched["execution"]
    assert launched["instance"]["job_name"] == "import_job"
    assert (execution["status"], execution["version"], execution["owner_recorded"]) == (
        "STARTED",
        1,
        True,
    )
    assert execution["lease"] is not None
    assert execution["control"] == {"stop_requested": False, "owner_matches": True, "fenced": False}
    step = rt.post(
        f"executions/{execution['id']}/steps",
        {"step_name": "load", "status": "STARTED", "owner_token": TOKEN},
        201,
    )
    assert (step["status"], step["version"], step["checkpoint"], step["context"]) == (
        "STARTED",
        1,
        None,
        None,
    )
    step = rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": 1, "checkpoint": CHECKPOINT, "owner_token": TOKEN},
        200,
    )
    assert step["counts"]["committed"] == 1  # the default
    step = rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": 2, "finish": "COMPLETED", "exit_code": "LOADED", "owner_token": TOKEN},
        200,
    )
    assert (step["status"], step["version"], step["exit_code"]) == ("COMPLETED", 3, "LOADED")
    assert step["control"]["owner_matches"] is True
    ended = rt.post(
        f"executions/{execution['id']}/transition",
        {"expected_version": 1, "status": "COMPLETED", "exit_code": "DONE", "owner_token": TOKEN},
        200,
    )
    assert (ended["status"], ended["version"], ended["exit_code"]) == ("COMPLETED", 2, "DONE")


def test_a_second_launch_is_execution_already_active_and_a_refused_one_leaves_nothing(
    rt: Runtime,
) -> None:
    launch(rt)
    problem(rt.post("launches", {**KEY, "owner_token": OTHER}), 409, "execution_already_active")
    assert models.JobExecution.objects.count() == 1
    body = {"job_name": "new_job", "owner_token": TOKEN, "definition_digest": "ab" * 32}
    problem(rt.post("launches", body), 404, "definition_not_found")
    assert not models.JobInstance.objects.filter(job_name="new_job").exists()


def test_a_refused_finishing_chunk_leaves_the_step_started(rt: Runtime) -> None:
    execution = launch(rt)["execution"]
    step = rt.post(
        f"executions/{execution['id']}/steps", {"step_name": "load", "status": "STARTED"}, 201
    )
    body = {"expected_version": 0, "finish": "COMPLETED", "owner_token": TOKEN}
    problem(rt.post(f"steps/{step['id']}/checkpoint", body), 409, "stale_version")
    body = {"expected_version": 1, "finish": "COMPLETED", "owner_token": OTHER}
    problem(rt.post(f"steps/{step['id']}/checkpoint", body), 409, "execution_owned")
    assert rt.get(f"steps/{step['id']}")["status"] == "STARTED"
    assert rt.get(f"steps/{step['id']}")["version"] == 1


@pytest.mark.parametrize("finish", ["STOPPED", "STARTED"])
def test_a_chunk_finishes_its_step_completed_only(rt: Runtime, finish: str) -> None:
    execution = launch(rt)["execution"]
    step = rt.post(
        f"executions/{execution['id']}/steps", {"step_name": "load", "status": "STARTED"}, 201
    )
    problem(
        rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": 1, "finish": finish}), 400
    )


def test_a_stop_request_shows_in_the_next_write_s_answer(rt: Runtime, operator: Runtime) -> None:
    execution = launch(rt)["execution"]
    step = rt.post(
        f"executions/{execution['id']}/steps", {"step_name": "load", "status": "STARTED"}, 201
    )
    stop = {"expected_version": 1, "operation_id": "stop-1"}
    operator.post(f"executions/{execution['id']}/stop", stop, 200)
    answer = rt.post(
        f"steps/{step['id']}/checkpoint", {"expected_version": 1, "owner_token": TOKEN}, 200
    )
    assert answer["control"] == {"stop_requested": True, "owner_matches": True, "fenced": False}


CONTROL = {"stop_requested": False, "owner_matches": True, "fenced": False}


def test_every_partition_write_answers_with_control_and_refuses_another_token(
    rt: Runtime, operator: Runtime
) -> None:
    """Plan, assign, complete and aggregate carry ``owner_token`` as every runtime
    write does: the owner's gets ``control`` in the answer, another is
    ``execution_owned`` with nothing written, none answers as before."""
    execution = launch(rt)["execution"]
    steps = f"executions/{execution['id']}/steps"
    parent = rt.post(steps, {"step_name": "parent", "status": "STARTED"}, 201)
    worker = rt.post(steps, {"step_name": "worker", "status": "STARTED"}, 201)
    plan_body = {"entries": [{"key": "a"}]}
    problem(
        rt.post(f"steps/{parent['id']}/partitions", {**plan_body, "owner_token": OTHER}),
        409,
        "execution_owned",
    )
    plan = rt.post(f"steps/{parent['id']}/partitions", {**plan_body, "owner_token": TOKEN}, 201)
    assert plan["control"] == CONTROL
    [partition] = plan["partitions"]
    assert "control" not in partition
    cas = {"expected_version": 0, "worker_step_execution_id": worker["id"]}
    problem(
        rt.post(f"partitions/{partition['id']}/assign", {**cas, "owner_token": OTHER}),
        409,
        "execution_owned",
    )
    assigned = rt.post(f"partitions/{partition['id']}/assign", {**cas, "owner_token": TOKEN}, 200)
    assert (assigned["version"], assigned["control"]) == (1, CONTROL)
    rt.post(
        f"steps/{worker['id']}/checkpoint",
        {"expected_version": 1, "finish": "COMPLETED", "owner_token": TOKEN},
        200,
    )
    operator.post(
        f"executions/{execution['id']}/stop", {"expected_version": 1, "operation_id": "s-1"}, 200
    )
    completed = rt.post(
        f"partitions/{partition['id']}/complete",
        {"expected_version": 1, "worker_step_execution_id": worker["id"], "owner_token": TOKEN},
        200,
    )
    assert completed["control"] == {**CONTROL, "stop_requested": True}
    problem(
        rt.post(f"steps/{parent['id']}/aggregate", {"expected_version": 1, "owner_token": OTHER}),
        409,
        "execution_owned",
    )
    aggregated = rt.post(
        f"steps/{parent['id']}/aggregate", {"expected_version": 1, "owner_token": TOKEN}, 200
    )
    assert (aggregated["status"], aggregated["control"]["stop_requested"]) == ("COMPLETED", True)
    # Without a token: the answers of before, no control.
    assert "control" not in rt.get(f"steps/{parent['id']}")


def test_a_flow_decision_answers_with_control_and_refuses_another_token(rt: Runtime) -> None:
    from tests.api.test_flow import FLOW, decision

    body = {"job_name": "flow_job", "revision": "v1", "manifest": FLOW}
    digest = rt.post("definitions", body, 201)["digest"]
    launched = rt.post(
        "launches", {"job_name": "flow_job", "definition_digest": digest, "owner_token": TOKEN}, 201
    )
    step = rt.step(launched["execution"], "load")
    url = f"executions/{launched['execution']['id']}/flow-decisions"
    problem(rt.post(url, {**decision(step, digest), "owner_token": OTHER}), 409, "execution_owned")
    appended = rt.post(url, {**decision(step, digest), "owner_token": TOKEN}, 201)
    assert (appended["sequence"], appended["control"]) == (1, CONTROL)
