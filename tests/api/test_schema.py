"""OpenAPI 3 (drf-spectacular): every operation, its bodies and its problems; docs offline."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
import yaml
from django.contrib.staticfiles import finders
from rest_framework.test import APIClient

from oxide_batch import roles
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from tests.api.support import EXECUTION_KEYS, PARTITION_KEYS, STEP_KEYS, url
from tests.api.test_permissions import ENDPOINTS

pytestmark = pytest.mark.standalone

BODY_METHODS = ("POST", "PUT", "DELETE")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    from oxide_batch.api.docs import schema_document

    document: dict[str, Any] = schema_document()
    return document


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


def test_the_schema_is_served_to_anyone_as_json_by_default() -> None:
    response = APIClient().get(url("schema/"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "oxide_batch API"
    # The paths begin at the site's root, which the servers entry names.
    assert document["servers"] == [{"url": "http://testserver/", "description": "this server"}]
    assert all(path.startswith(url("")) for path in document["paths"])


@pytest.mark.parametrize(
    ("query", "accept"),
    [({"format": "yaml"}, "*/*"), ({}, "application/yaml")],
    ids=["query", "accept"],
)
def test_the_schema_is_yaml_on_request(query: dict[str, str], accept: str) -> None:
    response = APIClient().get(url("schema/"), query, HTTP_ACCEPT=accept)
    assert response.status_code == 200
    document = yaml.safe_load(response.content)
    assert document["info"]["title"] == "oxide_batch API"
    assert "servers" in document


def test_every_endpoint_is_documented(schema: dict[str, Any]) -> None:
    documented = {(method, path) for method, path, _ in operations(schema)}
    routed = {
        (
            method,
            path.replace("987654321", "{id}")
            .replace("/load", "/{node_id}")
            .replace("/oncall", "/{name}"),
        )
        for method, path, permission in ENDPOINTS
        if permission != "public"
    }
    normalised = set()
    for method, path in documented:
        for name in ("instance_id", "execution_id", "step_id", "partition_id", "delivery_id"):
            path = path.replace("{" + name + "}", "{id}")
        normalised.add((method, path.removeprefix("/api/v1/")))
    assert normalised == routed


def test_every_operation_documents_its_problems(schema: dict[str, Any]) -> None:
    for method, path, operation in operations(schema):
        responses = operation["responses"]
        assert operation["operationId"], path
        successes = [code for code in responses if code.startswith("2")]
        assert successes, (method, path)
        for code in ("401", "403", "503"):
            assert PROBLEM_CONTENT_TYPE in responses[code]["content"], (method, path, code)
            assert "codes:" in responses[code]["description"]
        if method in BODY_METHODS:
            for code in ("400", "413", "415"):
                assert code in responses, (method, path, code)
        if "{" in path and "{name}" not in path:  # a rule's name is no identifier
            assert "identifier_out_of_range" in responses["400"]["description"], path
        if method in BODY_METHODS:
            assert operation["requestBody"]["content"]["application/json"], path


def test_documented_codes_name_the_endpoint_errors(schema: dict[str, Any]) -> None:
    transition = schema["paths"]["/api/v1/executions/{execution_id}/transition"]["post"]
    assert "`stale_version`" in transition["responses"]["409"]["description"]
    assert "`job_execution_not_found`" in transition["responses"]["404"]["description"]
    plan = schema["paths"]["/api/v1/steps/{step_id}/partitions"]["post"]
    assert "`duplicate_partition_key`" in plan["responses"]["400"]["description"]
    recover = schema["paths"]["/api/v1/executions/{execution_id}/recover"]["post"]
    for code in (
        "stale_version",
        "recovery_not_allowed",
        "execution_not_stale",
        "recovery_evidence_stale",
        "unresolved_recovery_required",
        "operation_id_conflict",
    ):
        assert f"`{code}`" in recover["responses"]["409"]["description"], code
    apply = schema["paths"]["/api/v1/purge/apply"]["post"]
    assert "`retention_plan_stale`" in apply["responses"]["409"]["description"]
    hold = schema["paths"]["/api/v1/instances/{instance_id}/hold"]
    assert "`job_instance_not_found`" in hold["delete"]["responses"]["404"]["description"]


def test_operator_shapes_match_the_schema(schema: dict[str, Any]) -> None:
    from tests.api.test_operator_api import DECISION_KEYS, PROPOSAL_KEYS, RECORD_KEYS
    from tests.api.test_retention_api import PLAN_KEYS, RETENTION_RECORD_KEYS

    assert _properties(schema, "RecoveryProposal") == PROPOSAL_KEYS
    assert _properties(schema, "OperatorRecord") == RECORD_KEYS
    assert _properties(schema, "RecoveryDecision") == DECISION_KEYS
    assert _properties(schema, "RetentionRecord") == RETENTION_RECORD_KEYS
    assert _properties(schema, "PurgePlan") == PLAN_KEYS
    assert _properties(schema, "RecoverResponse") == {
        "outcome",
        "replayed",
        "changed",
        "operation_id",
        "execution",
        "record",
        "decision",
    }
    # The plan handed back to apply is documented as the survey's answer.
    apply = schema["components"]["schemas"]["PurgeApplyRequest"]["properties"]["plan"]
    assert apply["allOf"][0]["$ref"].endswith("/PurgePlanRequest")


def test_the_schema_generates_without_warnings() -> None:
    from drf_spectacular.drainage import GENERATOR_STATS

    from oxide_batch.api.docs import schema_document

    GENERATOR_STATS.reset()
    with GENERATOR_STATS.silence():
        schema_document()
    assert not GENERATOR_STATS._warn_cache, list(GENERATOR_STATS._warn_cache)
    assert not GENERATOR_STATS._error_cache, list(GENERATOR_STATS._error_cache)


def _properties(schema: dict[str, Any], name: str) -> set[str]:
    return set(schema["components"]["schemas"][name]["properties"])


def test_representations_match_the_schema(schema: dict[str, Any]) -> None:
    # ``control`` is answered by a runtime write that carried an owner token only.
    assert _properties(schema, "Execution") == EXECUTION_KEYS | {"control"}
    assert _properties(schema, "Step") == STEP_KEYS | {"control"}
    assert _properties(schema, "Partition") == PARTITION_KEYS | {"context", "control"}
    for name in ("Execution", "Step", "Partition", "Plan", "FlowDecision"):
        assert "control" not in schema["components"]["schemas"][name].get("required", [])
    assert _properties(schema, "Problem") >= {"type", "title", "status", "code", "detail", "errors"}
    assert _properties(schema, "ExecutionPage") == {"next", "previous", "results"}
    status = schema["components"]["schemas"]["BatchStatusEnum"]["enum"]
    assert status == [
        "STARTING",
        "STARTED",
        "STOPPING",
        "STOPPED",
        "FAILED",
        "COMPLETED",
        "ABANDONED",
        "UNKNOWN",
    ]


@pytest.mark.parametrize(("path", "asset"), [("docs/", "swagger-ui-dist"), ("redoc/", "redoc")])
def test_the_docs_pages_are_served_offline(path: str, asset: str) -> None:
    response = APIClient().get(url(path))
    assert response.status_code == 200
    page = response.content.decode()
    assert f"drf_spectacular_sidecar/{asset}" in page
    assert "cdn." not in page
    assert "jsdelivr" not in page
    assert "unpkg" not in page
    assert finders.find(f"drf_spectacular_sidecar/{asset}") is not None


def test_the_migrations_create_the_roles_the_api_checks(db: None) -> None:
    """0009 made the groups, 0013 the per-action operator permissions; together
    they are the table the code checks (``operate_batch`` of 0009 stays in the
    database but grants nothing any more)."""
    from django.contrib.auth.models import Group

    groups = importlib.import_module("oxide_batch.migrations.0009_api_groups")
    actions = importlib.import_module("oxide_batch.migrations.0013_operator_action_permissions")
    notify = importlib.import_module("oxide_batch.migrations.0022_notifications")
    legacy = {"operate_batch"}
    migrated = {
        **{code: name for code, name in groups.PERMISSIONS.items() if code not in legacy},
        **actions.PERMISSIONS,
        **notify.PERMISSIONS,
    }
    assert dict(roles.PERMISSIONS) == migrated
    assert set(roles.OPERATOR_PERMISSIONS) == set(actions.PERMISSIONS)
    expected = {name: set(codes) - legacy for name, codes in groups.ROLES.items()}
    expected[actions.GROUP] |= set(actions.PERMISSIONS)
    expected[notify.GROUP] |= set(notify.PERMISSIONS)
    assert {name: set(codes) for name, codes in roles.ROLES.items()} == expected
    for name, codenames in roles.ROLES.items():
        granted = set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))
        assert granted - legacy == set(codenames)
