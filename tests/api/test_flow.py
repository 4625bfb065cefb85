"""Flow decisions through the API."""

from __future__ import annotations

from typing import Any

from tests.api.support import INSTANT, Runtime, field_error, problem

FLOW = {
    "format": 2,
    "job": "flow_job",
    "entry": "load",
    "nodes": [{"id": "load", "kind": "step"}, {"id": "store", "kind": "step"}],
    "transitions": [
        {"source": "load", "pattern": "COMPLETED", "target": {"node": "store"}},
        {"source": "load", "pattern": "*", "target": {"terminal": "FAIL"}},
        {"source": "store", "pattern": "*", "target": {"terminal": "COMPLETE"}},
    ],
}
INPUT = "ab" * 32


def flow_execution(rt: Runtime) -> tuple[dict[str, Any], dict[str, Any], str]:
    definition = rt.post(
        "definitions", {"job_name": "flow_job", "revision": "v1", "manifest": FLOW}, 201
    )
    instance = rt.post("instances", {"job_name": "flow_job"}, 201)
    execution = rt.post(
        f"instances/{instance['id']}/executions", {"definition_digest": definition["digest"]}, 201
    )
    return instance, rt.move(execution, "STARTED"), definition["digest"]


def decision(step: dict[str, Any], fingerprint: str, **extra: Any) -> dict[str, Any]:
    return {
        "source_node_id": "load",
        "source_step_execution_id": step["id"],
        "kind": "STEP_EXIT",
        "observed_outcome": "COMPLETED",
        "target": {"node": "store"},
        "plan_fingerprint": fingerprint,
        "input_digest": INPUT,
        **extra,
    }


def test_append_list_and_reuse(rt: Runtime, viewer: Runtime) -> None:
    instance, execution, digest = flow_execution(rt)
    step = rt.step(execution, "load")
    appended = rt.post(f"executions/{execution['id']}/flow-decisions", decision(step, digest), 201)
    assert appended["sequence"] == 1
    assert appended["target"] == {"node": "store"}
    assert appended["plan_fingerprint"] == digest
    assert INSTANT.fullmatch(appended["decided_at"])
    listed = viewer.get(f"executions/{execution['id']}/flow-decisions")
    assert listed == {"results": [appended]}
    query: dict[str, Any] = {
        "node_id": "load",
        "plan_fingerprint": digest,
        "input_digest": INPUT,
        "kind": "STEP_EXIT",
    }
    found = viewer.get(f"instances/{instance['id']}/flow-decisions/reusable", **query)
    assert found == {"decision": appended}
    none = viewer.get(
        f"instances/{instance['id']}/flow-decisions/reusable", **{**query, "kind": "DECIDER"}
    )
    assert none == {"decision": None}
    problem(
        viewer.get("instances/987654/flow-decisions/reusable", expect=None, **query),
        404,
        "job_instance_not_found",
    )
    field_error(
        viewer.get(
            f"instances/{instance['id']}/flow-decisions/reusable",
            expect=None,
            **{**query, "kind": "X"},
        ),
        "kind",
    )
    field_error(
        viewer.get(
            f"instances/{instance['id']}/flow-decisions/reusable", expect=None, node_id="load"
        ),
        "plan_fingerprint",
        "required",
    )
    terminal = rt.post(
        f"executions/{execution['id']}/flow-decisions",
        decision(
            rt.step(execution, "store"),
            digest,
            source_node_id="store",
            target={"terminal": "COMPLETE"},
        ),
        201,
    )
    assert terminal["sequence"] == 2
    assert terminal["target"] == {"terminal": "COMPLETE"}


def test_flow_decision_errors(rt: Runtime, viewer: Runtime) -> None:
    _, execution, digest = flow_execution(rt)
    step = rt.step(execution, "load")
    path = f"executions/{execution['id']}/flow-decisions"
    problem(rt.post(path, decision(step, "0" * 64)), 409, "flow_state_corrupt")
    problem(
        rt.post(path, decision(step, digest, target={"terminal": "COMPLETE"})),
        409,
        "flow_state_corrupt",
    )
    problem(
        rt.post("executions/987654/flow-decisions", decision(step, digest)),
        404,
        "job_execution_not_found",
    )
    field_error(
        rt.post(path, decision(step, digest, target={"node": "a", "terminal": "FAIL"})),
        "target",
        "invalid_manifest",
    )
    field_error(
        rt.post(path, decision(step, digest, target={"terminal": "MAYBE"})),
        "target",
        "invalid_manifest",
    )
    field_error(rt.post(path, decision(step, digest, plan_fingerprint="XYZ")), "plan_fingerprint")
    field_error(rt.post(path, decision(step, digest, kind="GUESS")), "kind", "invalid_choice")
    field_error(
        rt.post(path, decision(step, digest, source_node_id="")), "source_node_id", "empty_name"
    )
    field_error(
        rt.post(path, decision(step, digest, reused_decision_id=0)),
        "reused_decision_id",
        "zero_identifier",
    )
    rt.post(path, decision(step, digest), 201)
    problem(rt.post(path, decision(step, digest)), 409, "flow_state_corrupt")
    problem(
        viewer.get("executions/987654/flow-decisions", expect=None), 404, "job_execution_not_found"
    )
    legacy = rt.started()
    assert viewer.get(f"executions/{legacy['id']}/flow-decisions") == {"results": []}
    problem(
        rt.post(f"executions/{legacy['id']}/flow-decisions", decision(step, digest)),
        409,
        "flow_state_corrupt",
    )


def test_a_finished_or_recovered_execution_takes_no_late_flow_decision(rt: Runtime) -> None:
    """Before, a decision appended to a FAILED (or recovered) execution was 201:
    a worker presumed dead could still write the flow, and a restart could
    then reuse that decision. Now 409 ``invalid_state``, nothing appended."""
    _, execution, digest = flow_execution(rt)
    step = rt.move_step(rt.started_step(execution, "load"), "COMPLETED")
    failed = rt.move(execution, "FAILED")
    path = f"executions/{execution['id']}/flow-decisions"
    body = problem(rt.post(path, decision(step, digest)), 409, "invalid_state")
    assert body["id"] == failed["id"]
    assert rt.get(path) == {"results": []}
