"""The rows a valid request of each operation needs, created through the API by
a superuser (every operation reached past authorization) on a fixed clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, fixed_api_clock
from tests.helpers import api_token

User = get_user_model()

TOKEN = "0123456789abcdef0123456789abcdef"
CONTEXT = {"schema": "range", "schema_version": 1, "payload": {"from": "a", "to": 99}}
CHECKPOINT = {"schema": "cursor", "schema_version": 2, "payload": {"offset": "k", "n": 7}}
FLOW: dict[str, Any] = {
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
FLOW_V2 = {**FLOW, "nodes": [*FLOW["nodes"], {"id": "audit", "kind": "step"}]}


@dataclass(frozen=True)
class Target:
    """A valid request: its path (ids of real rows) and body (or query)."""

    path: str
    body: dict[str, Any] = field(default_factory=dict)
    ok: tuple[int, ...] = (200, 201)


class World:
    """Creates, through the API, the rows a valid request of each operation needs."""

    def __init__(self, client: APIClient, clock: FixedClock) -> None:
        self.client = client
        self.rt = Runtime(client)
        self.clock = clock
        self.serial = 0
        self.targets: dict[str, Target] = {}

    def unique(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    # -- jobs
    def definition(self, manifest: dict[str, Any] = FLOW) -> str:
        body = {"job_name": "flow_job", "revision": self.unique("r"), "manifest": manifest}
        response = self.rt.post("definitions", body)
        assert response.status_code in (200, 201), response.content
        digest: str = response.json()["digest"]
        return digest

    def instance(self, job: str = "import_job") -> dict[str, Any]:
        body = {"job_name": job, "identifying_parameters": {"run": self.unique("run-")}}
        result: dict[str, Any] = self.rt.post("instances", body, 201)
        return result

    def starting(self) -> dict[str, Any]:
        instance = self.instance()
        result: dict[str, Any] = self.rt.post(f"instances/{instance['id']}/executions", {}, 201)
        return result

    def started(self) -> dict[str, Any]:
        return self.rt.move(self.starting(), "STARTED")

    def flow_started(self) -> tuple[dict[str, Any], str]:
        digest = self.definition()
        instance = self.instance("flow_job")
        execution = self.rt.post(
            f"instances/{instance['id']}/executions", {"definition_digest": digest}, 201
        )
        return self.rt.move(execution, "STARTED"), digest

    def started_step(self, execution: dict[str, Any] | None = None, name: str = "load") -> Any:
        return self.rt.started_step(execution or self.started(), name)

    # -- partitions
    def plan(self, parent: dict[str, Any], keys: tuple[str, ...] = ("a",)) -> list[Any]:
        entries = [{"key": key, "context": CONTEXT} for key in keys]
        created = self.rt.post(f"steps/{parent['id']}/partitions", {"entries": entries}, 201)
        partitions: list[Any] = created["partitions"]
        return partitions

    def assigned(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], Any]:
        execution = self.started()
        parent = self.started_step(execution, "parent")
        (partition,) = self.plan(parent)
        worker = self.started_step(execution, "worker")
        body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
        assigned = self.rt.post(f"partitions/{partition['id']}/assign", body, 200)
        return execution, parent, assigned, worker

    def completed_partition(self) -> tuple[dict[str, Any], dict[str, Any]]:
        _, parent, assigned, worker = self.assigned()
        worker = self.rt.move_step(worker, "COMPLETED")
        body = {"expected_version": assigned["version"], "worker_step_execution_id": worker["id"]}
        self.rt.post(f"partitions/{assigned['id']}/complete", body, 200)
        return parent, worker

    # -- generic rows for reads and for operations without a recipe
    @cached_property
    def ids(self) -> dict[str, Any]:
        execution, _ = self.flow_started()
        step = self.started_step(execution, "load")
        (partition,) = self.plan(step)
        return {
            "instance_id": execution["job_instance_id"],
            "execution_id": execution["id"],
            "step_id": step["id"],
            "partition_id": partition["id"],
            "node_id": "load",
        }


def build_world(monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    """A superuser (every operation reached past authorization) on a fixed clock."""
    clock = fixed_api_clock(monkeypatch)
    # Thousands of operator requests: the operator throttle is another test's subject.
    settings.OXIDE_BATCH_OPERATOR_THROTTLE_RATE = None
    user = User.objects.create_superuser("hostile", password=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    client.raise_request_exception = False  # a 500 is a verdict, not a crash of the test
    return World(client, clock)
