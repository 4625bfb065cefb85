"""Partition plans, assignment, completion, aggregation and restart through the API."""

from __future__ import annotations

from typing import Any

from tests.api.support import FAILURE, PARTITION_KEYS, Runtime, field_error, problem

CONTEXT = {"schema": "range", "schema_version": 1, "payload": {"from": 0, "to": 99}}


def plan(rt: Runtime, parent: dict[str, Any], entries: list[Any]) -> Any:
    return rt.post(f"steps/{parent['id']}/partitions", {"entries": entries})


def setup_plan(
    rt: Runtime, keys: list[str]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    execution = rt.started()
    parent = rt.started_step(execution, "parent")
    created = plan(rt, parent, [{"key": key, "context": CONTEXT} for key in keys]).json()
    return execution, parent, created["partitions"]


def run_worker(
    rt: Runtime,
    execution: dict[str, Any],
    partition: dict[str, Any],
    name: str,
    status: str = "COMPLETED",
) -> dict[str, Any]:
    worker = rt.started_step(execution, name)
    assigned = rt.post(
        f"partitions/{partition['id']}/assign",
        {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]},
        200,
    )
    assert assigned["status"] == "STARTED"
    assert assigned["context"] == CONTEXT  # the worker's input, for payload readers
    assert assigned["worker_step_execution_id"] == worker["id"]
    worker = rt.post(
        f"steps/{worker['id']}/checkpoint",
        {"expected_version": worker["version"], "counts": {"written": 3}},
        200,
    )
    extra = {"failure": FAILURE} if status == "FAILED" else {}
    worker = rt.move_step(worker, status, **extra)
    completed: dict[str, Any] = rt.post(
        f"partitions/{partition['id']}/complete",
        {"expected_version": assigned["version"], "worker_step_execution_id": worker["id"]},
        200,
    )
    return completed


def test_plan_in_key_byte_order_with_contexts_for_payload_readers(
    rt: Runtime, viewer: Runtime, operator: Runtime
) -> None:
    execution = rt.started()
    parent = rt.started_step(execution, "parent")
    response = plan(
        rt, parent, [{"key": "b", "context": CONTEXT}, {"key": "a"}, {"key": "Z"}, {"key": "é"}]
    )
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["step_execution_id"] == parent["id"]
    keys = [p["key"] for p in created["partitions"]]
    assert keys == ["Z", "a", "b", "é"]
    assert [p["ordinal"] for p in created["partitions"]] == [3, 2, 1, 4]
    first = created["partitions"][2]
    assert set(first) == PARTITION_KEYS | {"context"}
    assert first["context"] == CONTEXT
    assert first["status"] == "STARTING"
    assert first["worker_step_execution_id"] is None
    summary = {"by_status": {"STARTING": 4}, "claimable": 4, "running": 0, "settled": False}
    assert rt.get(f"steps/{parent['id']}/partitions") == {**created, "summary": summary}
    assert operator.get(f"steps/{parent['id']}/partitions") == {**created, "summary": summary}
    seen = viewer.get(f"steps/{parent['id']}/partitions")
    assert [set(p) for p in seen["partitions"]] == [PARTITION_KEYS] * 4


def test_plan_errors(rt: Runtime) -> None:
    execution = rt.started()
    parent = rt.started_step(execution, "parent")
    problem(plan(rt, parent, []), 400, "empty_partition_plan")
    assert (
        problem(
            plan(rt, parent, [{"key": str(i)} for i in range(1025)]),
            400,
            "partition_plan_too_large",
        )["max"]
        == 1024
    )
    problem(plan(rt, parent, [{"key": "a"}, {"key": "a"}]), 400, "duplicate_partition_key")
    field_error(plan(rt, parent, [{"key": ""}]), "entries.0.key", "empty_name")
    field_error(
        plan(rt, parent, [{"key": "a"}, {"key": "x" * 129}]), "entries.1.key", "name_too_long"
    )
    field_error(
        plan(rt, parent, [{"key": "a\x00"}]), "entries.0.key", "null_characters_not_allowed"
    )
    field_error(plan(rt, parent, [{"key": 1}]), "entries.0.key", "invalid")
    big = {"schema": "s", "schema_version": 1, "payload": {"x": "y" * 5000}}
    field_error(
        plan(rt, parent, [{"key": "a", "context": big}]), "entries.0.context", "invalid_envelope"
    )
    field_error(rt.post(f"steps/{parent['id']}/partitions", {"entries": {"key": "a"}}), "entries")
    problem(plan(rt, {"id": 987654}, [{"key": "a"}]), 404, "step_execution_not_found")
    plan(rt, parent, [{"key": "a"}])
    problem(plan(rt, parent, [{"key": "b"}]), 409, "partition_plan_exists")
    done = rt.move_step(rt.started_step(execution, "done"), "COMPLETED")
    body = problem(plan(rt, done, [{"key": "a"}]), 409, "partition_parent_not_active")
    assert body["batch_status"] == "COMPLETED"
    problem(rt.get("steps/987654/partitions", expect=None), 404, "step_execution_not_found")


def test_assign_complete_aggregate(rt: Runtime) -> None:
    execution, parent, partitions = setup_plan(rt, ["east", "west"])
    east, west = partitions
    done_east = run_worker(rt, execution, east, "worker-east")
    assert done_east["status"] == "COMPLETED"
    assert done_east["counts"]["written"] == 3
    path = f"steps/{parent['id']}/aggregate"
    body = problem(
        rt.post(path, {"expected_version": parent["version"]}),
        409,
        "partition_aggregation_incomplete",
    )
    assert body["batch_status"] == "STARTING"
    run_worker(rt, execution, west, "worker-west", "FAILED")
    aggregated = rt.post(path, {"expected_version": parent["version"]}, 200)
    assert aggregated["status"] == "FAILED"
    assert aggregated["counts"]["written"] == 6
    assert aggregated["failure"] == {**FAILURE, "logs_url": None}
    # Re-running an aggregation that already applied: 200, the same parent.
    assert rt.post(path, {"expected_version": parent["version"]}, 200) == aggregated
    problem(rt.post(path, {"expected_version": 0}), 409, "stale_version")
    problem(
        rt.post("steps/987654/aggregate", {"expected_version": 0}), 404, "step_execution_not_found"
    )


def test_assign_and_complete_errors(rt: Runtime) -> None:
    execution, parent, partitions = setup_plan(rt, ["a", "b"])
    first, second = partitions
    worker = rt.started_step(execution, "worker")
    assign = f"partitions/{first['id']}/assign"
    problem(
        rt.post(assign, {"expected_version": 5, "worker_step_execution_id": worker["id"]}),
        409,
        "version_ahead",  # a version the partition never had here: a lost write
    )
    problem(
        rt.post(assign, {"expected_version": 0, "worker_step_execution_id": parent["id"]}),
        409,
        "partition_worker_mismatch",
    )
    problem(
        rt.post(assign, {"expected_version": 0, "worker_step_execution_id": 987654}),
        404,
        "step_execution_not_found",
    )
    problem(
        rt.post(
            "partitions/987654/assign",
            {"expected_version": 0, "worker_step_execution_id": worker["id"]},
        ),
        404,
        "step_partition_not_found",
    )
    field_error(
        rt.post(assign, {"expected_version": 0, "worker_step_execution_id": 0}),
        "worker_step_execution_id",
        "zero_identifier",
    )
    assigned = rt.post(
        assign, {"expected_version": 0, "worker_step_execution_id": worker["id"]}, 200
    )
    problem(
        rt.post(
            f"partitions/{second['id']}/assign",
            {"expected_version": 0, "worker_step_execution_id": worker["id"]},
        ),
        409,
        "partition_worker_already_assigned",
    )
    body = problem(
        rt.post(assign, {"expected_version": 1, "worker_step_execution_id": worker["id"]}),
        409,
        "partition_update_not_allowed",
    )
    assert body["batch_status"] == "STARTED"
    complete = f"partitions/{first['id']}/complete"
    other = rt.started_step(execution, "other")
    problem(
        rt.post(complete, {"expected_version": 1, "worker_step_execution_id": other["id"]}),
        409,
        "partition_worker_stale",
    )
    body = problem(
        rt.post(complete, {"expected_version": 1, "worker_step_execution_id": worker["id"]}),
        409,
        "partition_aggregation_incomplete",
    )
    assert body["batch_status"] == "STARTED"
    problem(
        rt.post(complete, {"expected_version": 0, "worker_step_execution_id": worker["id"]}),
        409,
        "stale_version",
    )
    problem(
        rt.post(
            "partitions/987654/complete",
            {"expected_version": 0, "worker_step_execution_id": worker["id"]},
        ),
        404,
        "step_partition_not_found",
    )
    assert assigned["version"] == 1
    # A parent that is not STARTED refuses assignment.
    new_parent = rt.step(execution, "waiting")
    waiting = plan(rt, new_parent, [{"key": "k"}]).json()["partitions"][0]
    body = problem(
        rt.post(
            f"partitions/{waiting['id']}/assign",
            {"expected_version": 0, "worker_step_execution_id": other["id"]},
        ),
        409,
        "partition_parent_not_active",
    )
    assert body["batch_status"] == "STARTING"


def test_restart_a_plan(rt: Runtime) -> None:
    execution, parent, partitions = setup_plan(rt, ["a", "b"])
    run_worker(rt, execution, partitions[0], "worker-a")
    run_worker(rt, execution, partitions[1], "worker-b", "FAILED")
    rt.move_step(parent, "FAILED")
    path = f"instances/{execution['job_instance_id']}/executions"
    target_parent = None
    problem(
        rt.post("steps/987654/partitions/restart", {"source_step_execution_id": parent["id"]}),
        404,
        "step_execution_not_found",
    )
    execution = rt.get(f"executions/{execution['id']}")
    rt.move(execution, "FAILED")
    again = rt.move(rt.post(path, {}, 201), "STARTED")
    target_parent = rt.started_step(again, "parent")
    restart = f"steps/{target_parent['id']}/partitions/restart"
    carried = rt.post(restart, {"source_step_execution_id": parent["id"]}, 201)
    statuses = {
        p["key"]: (p["status"], p["worker_step_execution_id"] is None)
        for p in carried["partitions"]
    }
    assert statuses == {"a": ("COMPLETED", False), "b": ("STARTING", True)}
    assert carried["partitions"][0]["context"] == CONTEXT
    problem(
        rt.post(restart, {"source_step_execution_id": parent["id"]}), 409, "partition_plan_exists"
    )
    unrelated = rt.started_step(again, "unrelated")
    field_error(
        rt.post(
            f"steps/{unrelated['id']}/partitions/restart",
            {"source_step_execution_id": parent["id"]},
        ),
        "source_step_execution_id",
        "partition_restart_mismatch",
    )
    field_error(
        rt.post(restart, {"source_step_execution_id": "1"}), "source_step_execution_id", "invalid"
    )


def test_a_plan_under_a_finished_execution_is_invalid_state(rt: Runtime) -> None:
    """A step left STARTED under a FAILED execution (or one a recovery fenced)
    starts no new partitions: 409 ``invalid_state`` naming the execution."""
    execution = rt.started()
    step = rt.started_step(execution, "manager")
    rt.move(execution, "FAILED")
    body = problem(
        rt.post(f"steps/{step['id']}/partitions", {"entries": [{"key": "a"}]}), 409, "invalid_state"
    )
    assert body["id"] == execution["id"]
    assert rt.get(f"steps/{step['id']}/partitions")["partitions"] == []
