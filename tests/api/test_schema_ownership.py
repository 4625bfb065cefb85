"""The OpenAPI document (``GET schema/?format=json``) tells of contract §2.5.2: each
runtime write under an execution lists ``execution_owned`` among its 409s (and
nothing else does), each job-scoped operation lists ``job_not_permitted``
among its 403s, and a token may be sent as ``Bearer`` (``bearerAuth``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from oxide_batch.roles import RUN_BATCH
from tests.api.support import url
from tests.api.test_permissions import ENDPOINTS, N

pytestmark = pytest.mark.standalone

ID = re.compile(r"\{(instance|execution|step|partition)_id\}")
OBJECT_PATHS = re.compile(rf"(executions|steps|partitions)/{N}(/|$)")
# Paths that name an object but act for an operator: bound by no job scope.
OPERATOR_ENDPOINTS = (
    "/recovery-proposal",
    "/recover",
    "/stop",
    "/abandon",
    "/lost-write/resolve",
    "/hold",
)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    response = APIClient().get(url("schema/"), {"format": "json"})
    assert response.status_code == 200
    found: dict[str, Any] = response.json()
    return found


@pytest.fixture(scope="module")
def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each operation by (method, path), the path as the permission matrix
    writes it (the API's root stripped, every id ``N``)."""
    root = url("")
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            normalised = ID.sub(str(N), path.removeprefix(root)).replace("{node_id}", "load")
            found[(method.upper(), normalised)] = operation
    return found


def codes(operation: dict[str, Any], status: str) -> set[str]:
    response = operation["responses"].get(status)
    if response is None:
        return set()
    return set(re.findall(r"`([a-z_]+)`", response["description"]))


RUNTIME_WRITES = [
    (method, path)
    for method, path, permission in ENDPOINTS
    if permission == RUN_BATCH
    and OBJECT_PATHS.match(path)
    and not path.endswith("/control")  # an observation: it answers owner_matches
]


def test_the_runtime_writes_are_the_expected_ones() -> None:
    assert len(RUNTIME_WRITES) == 14  # issue 43: the partition claim
    assert ("POST", f"partitions/{N}/complete") in RUNTIME_WRITES
    assert ("POST", f"executions/{N}/claim") in RUNTIME_WRITES


@pytest.mark.parametrize(("method", "path"), RUNTIME_WRITES)
def test_each_runtime_write_lists_execution_owned(
    method: str, path: str, operations: dict[tuple[str, str], dict[str, Any]]
) -> None:
    assert "execution_owned" in codes(operations[(method, path)], "409")


def test_nothing_else_lists_execution_owned(
    operations: dict[tuple[str, str], dict[str, Any]],
) -> None:
    listing = {key for key, op in operations.items() if "execution_owned" in codes(op, "409")}
    assert listing == set(RUNTIME_WRITES)


JOB_SCOPED = [
    (method, path)
    for method, path, permission in ENDPOINTS
    if permission != "public" and path != "descriptor" and not path.startswith("audit/")
    and not path.startswith(("purge/", "notifications/")) and not path.endswith(OPERATOR_ENDPOINTS)
]  # fmt: skip


@pytest.mark.parametrize(("method", "path"), JOB_SCOPED)
def test_each_job_scoped_operation_lists_job_not_permitted(
    method: str, path: str, operations: dict[tuple[str, str], dict[str, Any]]
) -> None:
    assert {"permission_denied", "job_not_permitted"} <= codes(operations[(method, path)], "403")


def test_bearer_is_offered_beside_token(
    document: dict[str, Any], operations: dict[tuple[str, str], dict[str, Any]]
) -> None:
    assert len(operations) == len([row for row in ENDPOINTS if row[2] != "public"])
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"]["type"] == "http"
    assert schemes["bearerAuth"]["scheme"] == "bearer"
    assert "Bearer <token>" in schemes["bearerAuth"]["description"]
    assert schemes["tokenAuth"]["in"] == "header"
    for key, operation in operations.items():
        security = operation.get("security", [])
        assert {"bearerAuth": []} in security, key
        assert {"tokenAuth": []} in security, key
