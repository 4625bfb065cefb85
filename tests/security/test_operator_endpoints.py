"""No runtime token can do an operator action: every operator endpoint, found
from the URL conf (and cross-checked with the OpenAPI document and the
permission matrix of tests/api/test_permissions.py), answers a runtime 403 and
writes nothing — even with a request an operator's identical call carries out."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.urls import resolve, reverse

from oxide_batch import models
from oxide_batch.api.docs import schema_document
from oxide_batch.repository import FixedClock
from tests.api import test_permissions
from tests.api.support import Runtime, problem, url
from tests.security.routes import PUBLIC, Route, api_routes, operator_routes

pytestmark = pytest.mark.django_db

CUTOFF = "2026-01-01T01:00:00.000Z"  # EPOCH + 1 h
SNAPSHOT_MODELS = (
    models.JobInstance,
    models.JobExecution,
    models.StepExecution,
    models.OperatorRequest,
    models.RecoveryDecision,
    models.RetentionRecord,
)


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables an operator action can write, in full."""
    found: dict[str, list[dict[str, Any]]] = {}
    for model in SNAPSHOT_MODELS:
        manager: Any = model.objects
        found[model.__name__] = list(manager.order_by("pk").values())
    return found


def test_the_url_conf_has_operator_endpoints_and_the_matrix_lists_every_route() -> None:
    """The permission matrix is a hand list: each (route, method) of the URL conf
    must be a row of it, with the permission the view itself declares."""
    declared = {(route.name, route.method): route.permission for route in api_routes()}
    listed = {
        (resolve(url(path)).url_name, method): permission
        for method, path, permission in test_permissions.ENDPOINTS
    }
    assert test_permissions.PUBLIC == PUBLIC
    assert listed == declared
    assert {route.name for route in operator_routes()} >= {
        "execution-stop",
        "execution-abandon",
        "execution-recover",
        "instance-hold",
        "purge-survey",
        "purge-apply",
    }


@pytest.mark.standalone
def test_the_openapi_document_names_the_same_operator_operations() -> None:
    document = schema_document()
    documented = {
        (path, method.upper())
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if any(
            f"Requires the `{route.permission}` permission." in operation.get("description", "")
            for route in operator_routes()
        )
    }
    assert documented == {(route.schema_path, route.method) for route in operator_routes()}


def finished(rt: Runtime, run: str) -> dict[str, Any]:
    execution = rt.started(run=run)
    return rt.move(execution, "COMPLETED")


def requests_for(operator: Runtime, rt: Runtime, clock: FixedClock) -> list[tuple[Route, str, Any]]:
    """(route, path, body) of every operator endpoint, each body one an operator's
    call would carry out: a stale STARTED execution (recover, stop), its instance
    (hold), an old COMPLETED instance (purge)."""
    finished(rt, "purgeable")
    clock.advance(timedelta(hours=1))
    live = rt.started(run="silent")
    clock.advance(timedelta(hours=1))
    proposal = operator.get(f"executions/{live['id']}/recovery-proposal")
    assert proposal["eligible"], proposal
    plan = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)
    assert len(plan["candidates"]) == 1, plan
    ids = {"execution_id": live["id"], "instance_id": live["job_instance_id"]}
    version = live["version"]
    bodies: dict[str, Any] = {
        "execution-recover": {
            "expected_version": version,
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": "op-recover",
        },
        "execution-stop": {"expected_version": version, "operation_id": "op-stop"},
        "execution-abandon": {
            "expected_version": version,
            "reason_code": "GIVE_UP",
            "operation_id": "op-abandon",
        },
        "instance-hold": {"reason_code": "LEGAL_HOLD", "operation_id": "op-hold"},
        "purge-survey": {"ended_before": CUTOFF},
        "purge-apply": {"plan": plan, "reason_code": "RETENTION", "operation_id": "op-purge"},
    }
    found = []
    for route in operator_routes():
        kwargs = {name: ids[name] for name in route.kwargs}
        # A new endpoint gets an empty body: the refusal must come before parsing anyway.
        found.append(
            (
                route,
                reverse(f"oxide_batch:api:{route.name}", kwargs=kwargs),
                bodies.get(route.name, {}),
            )
        )
    return found


def send(client: Any, method: str, path: str, body: Any) -> Any:
    return client.generic(method, path, json.dumps(body), content_type="application/json")


def test_a_runtime_token_is_refused_every_operator_action_and_writes_nothing(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    calls = requests_for(operator, rt, fixed)
    before = snapshot()

    for route, path, body in calls:
        response = send(rt.client, route.method, path, body)
        refused = problem(response, 403, "permission_denied")
        assert refused["detail"], (route.name, route.method)

    assert snapshot() == before  # no audit row, no changed row

    # The same requests from an operator act (so the bodies were good ones):
    # recovery first, while its evidence digest is current.
    by_name = {(route.name, route.method): (path, body) for route, path, body in calls}
    for key in [("execution-recover", "POST"), ("instance-hold", "PUT"), ("purge-apply", "POST")]:
        path, body = by_name[key]
        response = send(operator.client, key[1], path, body)
        assert response.status_code == 200, (key, response.content)
    after = snapshot()
    assert len(after["RecoveryDecision"]) == 1
    assert len(after["RetentionRecord"]) == 2  # the hold and the purge batch
