"""``POST executions/{id}/steps`` holds a flow node to its manifest's
``start_limit`` when the request leaves the limit out or asks for more
(contract §2.3.4, decision 210)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.support import Runtime, problem

ONCE = {
    "format": 2,
    "job": "once_job",
    "entry": "publish",
    "nodes": [{"id": "publish", "kind": "step", "start_limit": 1}],
    "transitions": [{"source": "publish", "pattern": "*", "target": {"terminal": "COMPLETE"}}],
}


def attempt(rt: Runtime, instance: dict[str, Any], digest: str | None = None) -> dict[str, Any]:
    body = {"definition_digest": digest} if digest else {}
    execution = rt.post(f"instances/{instance['id']}/executions", body, 201)
    return rt.move(execution, "STARTED")


@pytest.mark.parametrize(
    "body",
    [{"node_id": "publish"}, {"node_id": "publish", "start_limit": 3}, {}],
    ids=["node-without-limit", "higher-limit", "step-name-only"],
)
def test_the_second_start_of_a_once_node_is_refused(rt: Runtime, body: dict[str, Any]) -> None:
    definition = rt.post(
        "definitions", {"job_name": "once_job", "revision": "v1", "manifest": ONCE}, 201
    )
    instance = rt.post("instances", {"job_name": "once_job"}, 201)
    first = attempt(rt, instance, definition["digest"])
    rt.step(first, "publish", **body)
    rt.move(first, "FAILED")
    second = attempt(rt, instance)
    refused = problem(
        rt.post(f"executions/{second['id']}/steps", {"step_name": "publish", **body}),
        409,
        "start_limit_exceeded",
    )
    assert refused["limit"] == 1
