"""A restart over state that does not verify, and the partition-restart refusals,
through the API (contract §2.3.2, §2.4.5, §4.6)."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch import models
from tests.api.support import Runtime, field_error, problem

CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 42}}
CONTEXT = {"schema": "range", "schema_version": 1, "payload": {"from": 0, "to": 99}}


def chunk(rt: Runtime, step: dict[str, Any]) -> dict[str, Any]:
    body = {"expected_version": step["version"], "counts": {"read": 5}, "checkpoint": CHECKPOINT}
    result: dict[str, Any] = rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    return result


def next_attempt(rt: Runtime, execution: dict[str, Any]) -> dict[str, Any]:
    """Fail ``execution`` and start the instance's next attempt."""
    rt.move(rt.get(f"executions/{execution['id']}"), "FAILED")
    attempt = rt.post(f"instances/{execution['job_instance_id']}/executions", {}, 201)
    return rt.move(attempt, "STARTED")


@pytest.mark.parametrize("flow", [False, True], ids=["step", "flow-step"])
def test_a_restart_step_over_a_tampered_checkpoint_is_409_and_creates_no_step(
    rt: Runtime, flow: bool
) -> None:
    extra = {"node_id": "load"} if flow else {}
    execution = rt.started()
    step = rt.move_step(rt.step(execution, "load", **extra), "STARTED")
    chunk(rt, step)
    models.StepExecution.objects.filter(pk=step["id"]).update(checkpoint_checksum="0" * 64)
    attempt = next_attempt(rt, execution)
    response = rt.post(f"executions/{attempt['id']}/steps", {"step_name": "load", **extra})
    problem(response, 409, "fault_state_corrupt")
    assert not models.StepExecution.objects.filter(job_execution_id=attempt["id"]).exists()
    assert rt.get(f"executions/{attempt['id']}/steps")["results"] == []


# -- partition plan restarts -----------------------------------------------------------


def planned_parent(rt: Runtime) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    execution = rt.started()
    parent = rt.started_step(execution, "parent")
    entries = [{"key": key, "context": CONTEXT} for key in ("a", "b")]
    created = rt.post(f"steps/{parent['id']}/partitions", {"entries": entries}, 201)
    return execution, parent, created["partitions"]


def restart_plan(rt: Runtime, target: dict[str, Any], source: dict[str, Any]) -> Any:
    body = {"source_step_execution_id": source["id"]}
    return rt.post(f"steps/{target['id']}/partitions/restart", body)


def test_a_source_step_of_another_node_is_400_naming_the_source(rt: Runtime) -> None:
    execution, parent, _ = planned_parent(rt)
    other_node = rt.started_step(next_attempt(rt, execution), "elsewhere")
    entry = field_error(
        restart_plan(rt, other_node, parent),
        "source_step_execution_id",
        "partition_restart_mismatch",
    )
    assert entry["source_step_execution_id"] == parent["id"]
    assert entry["target_step_execution_id"] == other_node["id"]


def test_a_source_attempt_still_active_is_409_not_restartable(rt: Runtime) -> None:
    _, parent, _ = planned_parent(rt)
    body = problem(restart_plan(rt, parent, parent), 409, "not_restartable")
    assert body["batch_status"] == "STARTED"


def test_a_source_step_without_a_plan_is_409_restart_state_not_found(rt: Runtime) -> None:
    execution = rt.started()
    source = rt.started_step(execution, "parent")
    attempt = next_attempt(rt, execution)
    target = rt.started_step(attempt, "parent")
    body = problem(restart_plan(rt, target, source), 409, "restart_state_not_found")
    assert (body["execution_id"], body["step_name"]) == (attempt["id"], "parent")


def test_a_carried_context_that_does_not_verify_is_409_fault_state_corrupt(rt: Runtime) -> None:
    execution, parent, partitions = planned_parent(rt)
    models.StepPartition.objects.filter(pk=partitions[1]["id"]).update(context_checksum="0" * 64)
    target = rt.started_step(next_attempt(rt, execution), "parent")
    problem(restart_plan(rt, target, parent), 409, "fault_state_corrupt")
    assert not models.StepPartition.objects.filter(step_execution_id=target["id"]).exists()
