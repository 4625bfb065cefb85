"""The answers say what the schema says (contract §4.8): a member the server
sends is a member the operation's answer schema documents. The create_step
answer of a restart is where the step's taken-over checkpoint and context
arrive, so its schema documents both (nullable, present when the step was
created STARTED)."""

from __future__ import annotations

from typing import Any

import jsonschema

from oxide_batch.api.docs import schema_document
from tests.api.support import Runtime
from tests.api.test_schema_bodies import as_json_schema

KEY = {"job_name": "import_job", "identifying_parameters": {"run": "2026-07-30"}}
CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 5}}
CONTEXT = {"schema": "reader.context", "schema_version": 1, "payload": {"file": "a.csv"}}


def answer_schema(operation_id: str, status: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer's schema of ``operation_id`` at ``status`` (a ``$ref``), and the
    document's components, as JSON Schema."""
    document: dict[str, Any] = schema_document()
    for operations in document["paths"].values():
        for operation in operations.values():
            if operation.get("operationId") == operation_id:
                content = operation["responses"][status]["content"]["application/json"]
                return content["schema"], as_json_schema(document["components"])
    raise AssertionError(f"no operation {operation_id}")


def conforms(operation_id: str, status: str, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` is valid by the schema and has no member the schema leaves out;
    the schema of the answer's object is returned."""
    reference, components = answer_schema(operation_id, status)
    jsonschema.Draft4Validator({**reference, "components": components}).validate(answer)
    name = reference["$ref"].rsplit("/", 1)[-1]
    component: dict[str, Any] = components["schemas"][name]
    assert set(answer) <= set(component["properties"]), set(answer) - set(component["properties"])
    return component


def test_a_restarted_step_s_answer_documents_the_checkpoint_it_took_over(rt: Runtime) -> None:
    instance = rt.post("instances", KEY, 201)
    first = rt.move(rt.post(f"instances/{instance['id']}/executions", {}, 201), "STARTED")
    step = rt.post(
        f"executions/{first['id']}/steps", {"step_name": "load", "status": "STARTED"}, 201
    )
    body = {"expected_version": 1, "checkpoint": CHECKPOINT, "context": CONTEXT}
    step = rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    rt.move_step(step, "FAILED")
    rt.move(first, "FAILED")

    second = rt.move(rt.post(f"instances/{instance['id']}/executions", {}, 201), "STARTED")
    taken = rt.post(
        f"executions/{second['id']}/steps", {"step_name": "load", "status": "STARTED"}, 201
    )
    assert (taken["checkpoint"], taken["context"]) == (CHECKPOINT, CONTEXT)
    component = conforms("create_step", "201", taken)
    for member in ("checkpoint", "context"):
        assert component["properties"][member]["anyOf"][1] == {"type": "null"}
        assert member not in component.get("required", [])


def test_a_step_created_starting_has_neither_member_and_still_conforms(rt: Runtime) -> None:
    execution = rt.started()
    step = rt.step(execution)
    assert "checkpoint" not in step
    conforms("create_step", "201", step)
