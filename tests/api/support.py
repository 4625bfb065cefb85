"""Helpers of the API tests: role clients, problem checks, a runtime story."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.urls import reverse
from rest_framework.test import APIClient

from oxide_batch.api import deps
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.repository import FixedClock
from oxide_batch.roles import OPERATOR, RUNTIME, VIEWER
from tests.conftest import EPOCH
from tests.helpers import api_token

User = get_user_model()

ROLES = ("anonymous", "nobody", "viewer", "runtime", "operator", "superuser")
GROUP_OF = {"viewer": VIEWER, "runtime": RUNTIME, "operator": OPERATOR}
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
DIGEST = re.compile(r"[0-9a-f]{64}")
PROBLEM_KEYS = {"type", "title", "status", "code", "detail"}
EXECUTION_KEYS = {
    "id",
    "job_instance_id",
    "job_name",
    "attempt",
    "status",
    "exit_code",
    "created_at",
    "started_at",
    "ended_at",
    "updated_at",
    "counts",
    "failure",
    "version",
    "stop_requested",
    "stop_requested_at",
    "owner_recorded",
    "last_observed_at",
    "last_activity_at",
    "definition",
    "lease",
    "lost_write",
    "worker",
}
STEP_KEYS = {
    "id",
    "job_instance_id",
    "job_execution_id",
    "step_name",
    "node_id",
    "status",
    "exit_code",
    "created_at",
    "started_at",
    "ended_at",
    "updated_at",
    "counts",
    "failure",
    "version",
    "last_activity_at",
    "worker",
}
PARTITION_KEYS = {
    "id",
    "step_execution_id",
    "key",
    "ordinal",
    "status",
    "exit_code",
    "counts",
    "version",
    "worker_step_execution_id",
    "retries",
}
COUNT_KEYS = {"read", "processed", "written", "filtered", "committed", "rolled_back"}
FAILURE = {"category": "USER_COMPONENT", "failure_id": 7}


def make_user(role: str) -> AbstractUser | None:
    """A user named ``<role>-user`` in the role's group (None: anonymous)."""
    if role == "anonymous":
        return None
    if role == "superuser":
        return User.objects.create_superuser(f"{role}-user", password=None)
    user = User.objects.create_user(f"{role}-user", password=None)
    if role in GROUP_OF:
        user.groups.add(Group.objects.get(name=GROUP_OF[role]))
    return user


def token_client(user: AbstractUser | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    return client


def role_clients() -> Callable[[str], APIClient]:
    """A token client per role, made (with its user) on first use; the groups
    must exist."""
    made: dict[str, APIClient] = {}

    def build(role: str) -> APIClient:
        if role not in made:
            made[role] = token_client(make_user(role))
        return made[role]

    return build


def fixed_api_clock(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The API's clock, fixed at EPOCH (recovery staleness, purge ages)."""
    clock = FixedClock(EPOCH)
    monkeypatch.setattr(deps, "clock", clock)
    return clock


def url(path: str) -> str:
    """``path`` under the API's root, wherever the project mounts it (the
    service: ``/api/v1/``; the host project of tests/host: ``/batch/api/v1/``)."""
    return reverse("oxide_batch:api:descriptor").removesuffix("descriptor") + path.lstrip("/")


def problem(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert ``response`` is a problem+json with ``status`` (and ``code``); its body."""
    assert response.status_code == status, (response.status_code, _body(response))
    assert response["Content-Type"].startswith(PROBLEM_CONTENT_TYPE), response["Content-Type"]
    body = _body(response)
    assert set(body) >= PROBLEM_KEYS, body
    assert body["status"] == status
    assert body["type"].endswith(body["code"])
    if code is not None:
        assert body["code"] == code, body
    if status == 503:
        assert response["Retry-After"].isdigit()
    result: dict[str, Any] = body
    return result


def field_error(response: Any, field: str, code: str | None = None) -> dict[str, Any]:
    """Assert a 400 ``invalid_request`` naming ``field`` (with ``code``); that entry."""
    body = problem(response, 400, "invalid_request")
    assert field in body["errors"], body
    entry: dict[str, Any] = body["errors"][field][0]
    if code is not None:
        assert entry["code"] == code, body
    return entry


def _body(response: Any) -> Any:
    content = getattr(response, "content", b"")
    try:
        return json.loads(content)
    except ValueError:
        return content[:500]


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, _body(response))
    assert response["Content-Type"].startswith("application/json")
    return response.json()


class Runtime:
    """A runtime driving the API with an ``APIClient``."""

    def __init__(self, client: APIClient) -> None:
        self.client = client

    def post(self, path: str, body: Any = None, status: int | None = None) -> Any:
        response = self.client.post(url(path), body if body is not None else {}, format="json")
        if status is None:
            return response
        return ok(response, status)

    def put(self, path: str, body: Any = None, status: int | None = None) -> Any:
        response = self.client.put(url(path), body if body is not None else {}, format="json")
        return response if status is None else ok(response, status)

    def delete(self, path: str, body: Any = None, status: int | None = None) -> Any:
        response = self.client.delete(url(path), body if body is not None else {}, format="json")
        return response if status is None else ok(response, status)

    def get(self, path: str, expect: int | None = 200, **params: Any) -> Any:
        response = self.client.get(url(path), params)
        if expect is None:
            return response
        return ok(response, expect)

    def launch(
        self, job: str = "import_job", parameters: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        body = {"job_name": job, "identifying_parameters": parameters or {"run": "2026-07-29"}}
        response = self.post("instances", body)
        assert response.status_code in (200, 201), response.content
        instance = response.json()
        execution = self.post(f"instances/{instance['id']}/executions", {}, 201)
        return instance, execution

    def move(self, execution: dict[str, Any], status: str, **extra: Any) -> dict[str, Any]:
        body = {"expected_version": execution["version"], "status": status, **extra}
        if status == "FAILED" and "failure" not in extra:
            body["failure"] = FAILURE
        result: dict[str, Any] = self.post(f"executions/{execution['id']}/transition", body, 200)
        return result

    def move_step(self, step: dict[str, Any], status: str, **extra: Any) -> dict[str, Any]:
        body = {"expected_version": step["version"], "status": status, **extra}
        if status == "FAILED" and "failure" not in extra:
            body["failure"] = FAILURE
        result: dict[str, Any] = self.post(f"steps/{step['id']}/transition", body, 200)
        return result

    def started(self, job: str = "import_job", **parameters: Any) -> dict[str, Any]:
        _, execution = self.launch(job, parameters or None)
        return self.move(execution, "STARTED")

    def step(self, execution: dict[str, Any], name: str = "load", **extra: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.post(
            f"executions/{execution['id']}/steps", {"step_name": name, **extra}, 201
        )
        return result

    def started_step(self, execution: dict[str, Any], name: str = "load") -> dict[str, Any]:
        return self.move_step(self.step(execution, name), "STARTED")
