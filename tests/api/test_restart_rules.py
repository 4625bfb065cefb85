"""Restart skips what completed, over HTTP (contract §2.3.2): a step of a
restart attempt over an earlier COMPLETED, ABANDONED or UNKNOWN row is 409
``not_restartable`` naming the step and the earlier row (``status`` is carried as
``batch_status``); ``allow_start_if_complete: true`` runs a COMPLETED step again
from nothing; a flow node's own attribute decides for it."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client.wire import problem_member
from tests.api.support import Runtime, field_error, problem

CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 42}}
CONTEXT = {"schema": "reader.files", "schema_version": 1, "payload": {"files": ["a"]}}
ZERO = {"read": 0, "processed": 0, "written": 0, "filtered": 0, "committed": 0, "rolled_back": 0}
ZERO |= {"read_skip": 0, "process_skip": 0, "write_skip": 0}  # a step's skip counts (issue 42)
# How a step reaches each status through the runtime API (steps follow the full
# lifecycle table, ABANDONED and leaving UNKNOWN included).
PATHS = {
    "COMPLETED": ("COMPLETED",),
    "FAILED": ("FAILED",),
    "STOPPED": ("STOPPED",),
    "STARTED": (),
    "ABANDONED": ("FAILED", "ABANDONED"),
    "UNKNOWN": ("UNKNOWN",),
}
# The earlier row's status → the answer without and with allow_start_if_complete.
RULES = {
    "COMPLETED": (409, 201),
    "ABANDONED": (409, 409),
    "UNKNOWN": (409, 409),
    "FAILED": (201, 201),
    "STOPPED": (201, 201),
    "STARTED": (201, 201),
}
MESSAGES = {
    "COMPLETED": "create it with allow_start_if_complete: true",
    "ABANDONED": "a restart skips it",
    "UNKNOWN": "must be resolved first",
}


def ran(rt: Runtime, execution: dict[str, Any], name: str, status: str, **extra: Any) -> Any:
    """A step of ``execution`` started, with one chunk (checkpoint and context),
    then moved to ``status``."""
    step = rt.move_step(rt.step(execution, name, **extra), "STARTED")
    body = {
        "expected_version": step["version"],
        "counts": {"read": 5, "committed": 1},
        "checkpoint": CHECKPOINT,
        "context": CONTEXT,
    }
    step = rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    for target in PATHS[status]:
        step = rt.move_step(step, target)
    return step


def next_attempt(rt: Runtime, execution: dict[str, Any]) -> dict[str, Any]:
    """Fail ``execution`` and start the instance's next attempt."""
    rt.move(rt.get(f"executions/{execution['id']}"), "FAILED")
    attempt = rt.post(f"instances/{execution['job_instance_id']}/executions", {}, 201)
    return rt.move(attempt, "STARTED")


def create(rt: Runtime, attempt: dict[str, Any], name: str, **extra: Any) -> Any:
    return rt.post(f"executions/{attempt['id']}/steps", {"step_name": name, **extra})


def steps_of(rt: Runtime, attempt: dict[str, Any]) -> list[str]:
    return [step["step_name"] for step in rt.get(f"executions/{attempt['id']}/steps")["results"]]


def assert_not_restartable(response: Any, status: str, name: str, earlier_id: int) -> Any:
    body = problem(response, 409, "not_restartable")
    assert problem_member("status") == "batch_status"
    assert (body["batch_status"], body["step_name"], body["step_execution_id"]) == (
        status,
        name,
        earlier_id,
    )
    assert MESSAGES[status] in body["detail"]
    return body


@pytest.fixture
def two_steps(rt: Runtime) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``extract`` COMPLETED and ``load`` FAILED in a failed first attempt; the
    started restart attempt."""
    execution = rt.started()
    extract = ran(rt, execution, "extract", "COMPLETED")
    load = ran(rt, execution, "load", "FAILED")
    return next_attempt(rt, execution), extract, load


def test_a_completed_step_is_409_not_restartable_naming_the_earlier_row(rt: Runtime, two_steps):
    attempt, extract, _ = two_steps
    body = assert_not_restartable(
        create(rt, attempt, "extract"), "COMPLETED", "extract", extract["id"]
    )
    assert "a restart skips it" in body["detail"]
    assert steps_of(rt, attempt) == []
    assert not models.StepExecution.objects.filter(job_execution_id=attempt["id"]).exists()


def test_allow_start_if_complete_is_201_and_takes_nothing_over(rt: Runtime, two_steps):
    attempt, extract, _ = two_steps
    again = rt.post(
        f"executions/{attempt['id']}/steps",
        {"step_name": "extract", "allow_start_if_complete": True},
        201,
    )
    assert (again["status"], again["version"], again["counts"]) == ("STARTING", 0, ZERO)
    assert again["id"] != extract["id"]
    state = rt.get(f"steps/{again['id']}/checkpoint")
    assert (state["checkpoint"], state["context"]) == (None, None)
    assert state["step"]["counts"] == ZERO


def test_the_failed_step_takes_over_its_checkpoint(rt: Runtime, two_steps):
    attempt, _, load = two_steps
    resumed = rt.post(f"executions/{attempt['id']}/steps", {"step_name": "load"}, 201)
    assert resumed["counts"] == load["counts"]
    state = rt.get(f"steps/{resumed['id']}/checkpoint")
    assert (state["checkpoint"], state["context"]) == (CHECKPOINT, CONTEXT)


def test_allow_start_if_complete_false_is_the_default(rt: Runtime, two_steps):
    attempt, extract, _ = two_steps
    response = create(rt, attempt, "extract", allow_start_if_complete=False)
    assert_not_restartable(response, "COMPLETED", "extract", extract["id"])


@pytest.mark.parametrize(
    ("status", "allow", "expected"),
    [
        (status, allow, answers[allow])
        for status, answers in RULES.items()
        for allow in (False, True)
    ],
    ids=[f"{status}-allow={allow}" for status in RULES for allow in (False, True)],
)
def test_the_earlier_rows_status_decides_the_answer(rt: Runtime, status, allow, expected):
    execution = rt.started()
    earlier = ran(rt, execution, "work", status)
    assert earlier["status"] == status
    attempt = next_attempt(rt, execution)
    response = create(rt, attempt, "work", allow_start_if_complete=allow)
    if expected == 409:
        assert_not_restartable(response, status, "work", earlier["id"])
        assert steps_of(rt, attempt) == []
        return
    assert response.status_code == 201, response.content
    state = rt.get(f"steps/{response.json()['id']}/checkpoint")
    if status == "COMPLETED":
        assert (state["step"]["counts"], state["checkpoint"]) == (ZERO, None)
    else:
        assert (state["step"]["counts"], state["checkpoint"]) == (earlier["counts"], CHECKPOINT)


# A JSON true or false only: no string, number or null stands for one.
NOT_BOOLEAN = {
    "string-true": ("true", "invalid"),
    "string-yes": ("yes", "invalid"),
    "one": (1, "invalid"),
    "zero": (0, "invalid"),
    "null": (None, "null"),
    "list": ([], "invalid"),
    "object": ({}, "invalid"),
}


@pytest.mark.parametrize(("value", "code"), NOT_BOOLEAN.values(), ids=NOT_BOOLEAN.keys())
def test_a_non_boolean_allow_start_if_complete_is_400(rt: Runtime, two_steps, value, code):
    attempt, _, _ = two_steps
    response = create(rt, attempt, "extract", allow_start_if_complete=value)
    field_error(response, "allow_start_if_complete", code)
    assert steps_of(rt, attempt) == []


# -- flow steps ------------------------------------------------------------------------

FLOW = {
    "format": 2,
    "job": "flow_job",
    "entry": "extract",
    "nodes": [
        {"id": "extract", "kind": "step", "allow_start_if_complete": True},
        {"id": "load", "kind": "step"},
    ],
    "transitions": [
        {"source": "extract", "pattern": "*", "target": {"node": "load"}},
        {"source": "load", "pattern": "*", "target": {"terminal": "COMPLETE"}},
    ],
}


def flow_restart(rt: Runtime) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Both nodes COMPLETED in a failed first attempt; the started restart attempt."""
    definition = rt.post(
        "definitions", {"job_name": "flow_job", "revision": "v1", "manifest": FLOW}, 201
    )
    instance = rt.post("instances", {"job_name": "flow_job"}, 201)
    execution = rt.post(
        f"instances/{instance['id']}/executions", {"definition_digest": definition["digest"]}, 201
    )
    execution = rt.move(execution, "STARTED")
    earlier = {
        node: ran(rt, execution, node, "COMPLETED", node_id=node) for node in ("extract", "load")
    }
    return next_attempt(rt, execution), earlier


@pytest.mark.parametrize("allow", [False, True])
def test_a_flow_node_that_allows_a_start_if_complete_runs_again_whatever_the_request(
    rt: Runtime, allow: bool
):
    attempt, _ = flow_restart(rt)
    again = rt.post(
        f"executions/{attempt['id']}/steps",
        {"step_name": "extract", "node_id": "extract", "allow_start_if_complete": allow},
        201,
    )
    assert rt.get(f"steps/{again['id']}/checkpoint")["checkpoint"] is None


@pytest.mark.parametrize("allow", [False, True])
def test_a_flow_node_that_does_not_allow_it_is_409_whatever_the_request(rt: Runtime, allow: bool):
    attempt, earlier = flow_restart(rt)
    response = create(rt, attempt, "load", node_id="load", allow_start_if_complete=allow)
    assert_not_restartable(response, "COMPLETED", "load", earlier["load"]["id"])
    assert steps_of(rt, attempt) == []


# -- the schema ------------------------------------------------------------------------


def test_the_schema_documents_the_flag_and_the_refusal() -> None:
    from oxide_batch.api.docs import schema_document

    schema = schema_document()
    create_step = schema["paths"]["/api/v1/executions/{execution_id}/steps"]["post"]
    assert "`not_restartable`" in create_step["responses"]["409"]["description"]
    assert "allow_start_if_complete" in create_step["description"]
    reference = create_step["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][reference.rsplit("/", 1)[-1]]
    field = request["properties"]["allow_start_if_complete"]
    assert (field["type"], field["default"]) == ("boolean", False)
    assert "not_restartable" in field["description"]
    assert "allow_start_if_complete" not in request.get("required", [])
