"""Steps, chunk commits and checkpoints through the API."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from oxide_batch.repository import DjangoJobRepository
from tests.api.support import FAILURE, INSTANT, STEP_KEYS, Runtime, field_error, problem

CHECKPOINT = {
    "schema": "reader.offset",
    "schema_version": 1,
    "payload": {"offset": 42, "ratio": 0.5},
}
CONTEXT = {"schema": "ctx", "schema_version": 2, "payload": {"files": ["a", "b"]}}


def chunk(rt: Runtime, step: dict[str, Any], **body: Any) -> Any:
    return rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": step["version"], **body})


def test_create_and_read_steps(rt: Runtime, viewer: Runtime) -> None:
    execution = rt.started()
    step = rt.step(execution, "load")
    assert set(step) == STEP_KEYS
    assert step["status"] == "STARTING"
    assert step["node_id"] == "load"
    assert step["version"] == 0
    assert step["job_execution_id"] == execution["id"]
    assert INSTANT.fullmatch(step["created_at"])
    assert viewer.get(f"steps/{step['id']}") == step
    second = rt.step(execution, "store")
    listed = viewer.get(f"executions/{execution['id']}/steps")
    assert [s["id"] for s in listed["results"]] == [second["id"], step["id"]]
    assert listed["next"] is None
    assert listed["previous"] is None
    problem(viewer.get("steps/987654", expect=None), 404, "step_execution_not_found")
    problem(viewer.get("executions/987654/steps", expect=None), 404, "job_execution_not_found")


def test_step_creation_errors(rt: Runtime) -> None:
    _, execution = rt.launch()
    rt.step(execution, "load")
    path = f"executions/{execution['id']}/steps"
    body = problem(rt.post(path, {"step_name": "load"}), 409, "step_execution_exists")
    assert body["step_name"] == "load"
    problem(rt.post("executions/987654/steps", {"step_name": "x"}), 404, "job_execution_not_found")
    field_error(rt.post(path, {"step_name": "a\tb"}), "step_name", "name_contains_control")
    field_error(
        rt.post(path, {"step_name": "x", "node_id": " n"}),
        "node_id",
        "name_has_surrounding_whitespace",
    )
    field_error(rt.post(path, {"step_name": "x", "start_limit": 0}), "start_limit", "min_value")
    field_error(rt.post(path, {"step_name": "x", "start_limit": 1.0}), "start_limit", "invalid")
    finished = rt.move(rt.move(execution, "STARTED"), "COMPLETED")
    body = problem(rt.post(path, {"step_name": "late"}), 409, "invalid_state")
    assert body["batch_status"] == finished["status"]


def test_flow_steps_and_start_limits(rt: Runtime, viewer: Runtime) -> None:
    instance, execution = rt.launch()
    path = f"executions/{execution['id']}/steps"
    first = rt.post(path, {"step_name": "load", "node_id": "load/node", "start_limit": 1}, 201)
    assert first["node_id"] == "load/node"
    rt.move(rt.move(execution, "STARTED"), "FAILED")
    second = rt.post(f"instances/{instance['id']}/executions", {}, 201)
    response = rt.post(
        f"executions/{second['id']}/steps",
        {"step_name": "load", "node_id": "load/node", "start_limit": 1},
    )
    body = problem(response, 409, "start_limit_exceeded")
    assert (body["node_id"], body["limit"]) == ("load/node", 1)
    latest = viewer.get(f"instances/{instance['id']}/flow-steps/load/node")
    assert latest["id"] == first["id"]
    assert viewer.get(f"instances/{instance['id']}/flow-steps/load%2Fnode")["id"] == first["id"]
    only_limit = rt.post(
        f"executions/{second['id']}/steps", {"step_name": "other", "start_limit": 5}, 201
    )
    assert only_limit["node_id"] == "other"
    problem(
        viewer.get(f"instances/{instance['id']}/flow-steps/nothing", expect=None),
        404,
        "flow_step_not_found",
    )
    problem(
        viewer.get("instances/987654/flow-steps/load", expect=None), 404, "job_instance_not_found"
    )
    field_error(viewer.get(f"instances/{instance['id']}/flow-steps/%20x", expect=None), "node_id")
    field_error(
        viewer.get(f"instances/{instance['id']}/flow-steps/a%00b", expect=None),
        "node_id",
        "name_contains_control",
    )


def test_restart_takes_over_the_checkpoint(rt: Runtime) -> None:
    instance, execution = rt.launch()
    execution = rt.move(execution, "STARTED")
    step = rt.started_step(execution)
    step = chunk(rt, step, counts={"read": 5}, checkpoint=CHECKPOINT).json()
    rt.move_step(step, "FAILED")
    rt.move(execution, "FAILED")
    again = rt.post(f"instances/{instance['id']}/executions", {}, 201)
    restarted = rt.step(again, "load")
    assert restarted["counts"]["read"] == 5
    assert rt.get(f"steps/{restarted['id']}/checkpoint")["checkpoint"] == CHECKPOINT


def test_step_transitions(rt: Runtime) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    path = f"steps/{step['id']}/transition"
    problem(rt.post(path, {"expected_version": 0, "status": "COMPLETED"}), 409, "stale_version")
    problem(rt.post(path, {"expected_version": 1, "status": "STARTING"}), 409, "illegal_transition")
    problem(
        rt.post(path, {"expected_version": 1, "status": "FAILED"}),
        409,
        "failed_transition_missing_failure",
    )
    unknown = rt.move_step(step, "UNKNOWN")
    # Steps follow the full table: leaving UNKNOWN and abandoning are allowed.
    failed = rt.move_step(unknown, "FAILED", failure=FAILURE)
    abandoned = rt.move_step(failed, "ABANDONED")
    assert abandoned["status"] == "ABANDONED"
    assert abandoned["failure"] == {**FAILURE, "logs_url": None}
    problem(
        rt.post("steps/987654/transition", {"expected_version": 0, "status": "STARTED"}),
        404,
        "step_execution_not_found",
    )
    enriched = rt.post(
        f"steps/{step['id']}/exit-status", {"expected_version": 4, "exit_code": "DONE"}, 200
    )
    assert enriched["exit_code"] == "DONE"
    assert enriched["status"] == "ABANDONED"
    problem(
        rt.post(f"steps/{step['id']}/exit-status", {"expected_version": 4, "exit_code": "X"}),
        409,
        "stale_version",
    )
    problem(
        rt.post("steps/987654/exit-status", {"expected_version": 0, "exit_code": "X"}),
        404,
        "step_execution_not_found",
    )


def test_chunk_commits_add_deltas_and_keep_state(
    rt: Runtime, viewer: Runtime, operator: Runtime
) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    step = chunk(
        rt,
        step,
        counts={"read": 10, "written": 9, "filtered": 1, "committed": 1},
        checkpoint=CHECKPOINT,
        context=CONTEXT,
    ).json()
    assert step["version"] == 2
    step = chunk(rt, step, counts={"read": 10, "written": 10, "committed": 1}).json()
    assert step["counts"] == {
        "read": 20,
        "processed": 0,
        "written": 19,
        "filtered": 1,
        "committed": 2,
        "rolled_back": 0,
        "read_skip": 0,
        "process_skip": 0,
        "write_skip": 0,
    }
    state = rt.get(f"steps/{step['id']}/checkpoint")
    assert state == {"step": step, "checkpoint": CHECKPOINT, "context": CONTEXT}
    assert operator.get(f"steps/{step['id']}/checkpoint") == state
    problem(viewer.get(f"steps/{step['id']}/checkpoint", expect=None), 403, "permission_denied")
    empty = rt.started_step(execution, "other")
    assert rt.get(f"steps/{empty['id']}/checkpoint")["checkpoint"] is None
    problem(rt.get("steps/987654/checkpoint", expect=None), 404, "step_execution_not_found")


def test_chunk_commit_errors(rt: Runtime) -> None:
    execution = rt.started()
    step = rt.step(execution)
    body = problem(chunk(rt, step, counts={"read": 1}), 409, "invalid_state")
    assert body["batch_status"] == "STARTING"
    step = rt.move_step(step, "STARTED")
    problem(
        rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": 0}), 409, "stale_version"
    )
    full = chunk(rt, step, counts={"read": 2**63 - 1}).json()
    problem(chunk(rt, full, counts={"read": 1}), 409, "count_exhausted")
    problem(
        rt.post("steps/987654/checkpoint", {"expected_version": 0}), 404, "step_execution_not_found"
    )
    field_error(chunk(rt, step, counts={"read": -1}), "counts.read", "min_value")
    field_error(chunk(rt, step, counts={"read": 2**63}), "counts.read", "max_value")
    field_error(chunk(rt, step, counts={"reads": 1}), "counts.reads", "unknown_member")
    field_error(
        chunk(rt, step, checkpoint={"schema": "s", "payload": {}}), "checkpoint", "invalid_envelope"
    )
    field_error(
        chunk(rt, step, checkpoint={"schema": "s", "schema_version": 0, "payload": {}}),
        "checkpoint",
        "invalid_envelope",
    )
    field_error(
        chunk(rt, step, context={"schema": "s", "schema_version": 1, "payload": []}),
        "context",
        "invalid_envelope",
    )
    deep: Any = {}
    for _ in range(20):
        deep = {"d": deep}
    field_error(
        chunk(rt, step, checkpoint={"schema": "s", "schema_version": 1, "payload": deep}),
        "checkpoint",
        "invalid_envelope",
    )


@override_settings(OXIDE_BATCH_STATE_MAX_BYTES=100)
def test_checkpoint_size_follows_the_setting(rt: Runtime) -> None:
    step = rt.started_step(rt.started())
    entry = field_error(
        chunk(
            rt, step, checkpoint={"schema": "s", "schema_version": 1, "payload": {"x": "y" * 200}}
        ),
        "checkpoint",
        "invalid_envelope",
    )
    assert "100" in entry["message"]


def test_a_corrupt_checkpoint_is_409_never_500(rt: Runtime, repo: DjangoJobRepository) -> None:
    from oxide_batch import models

    step = rt.started_step(rt.started())
    chunk(rt, step, checkpoint=CHECKPOINT)
    models.StepExecution.objects.filter(pk=step["id"]).update(checkpoint_checksum="0" * 64)
    problem(rt.get(f"steps/{step['id']}/checkpoint", expect=None), 409, "fault_state_corrupt")
