"""Errors: one mapping of every typed error to a problem (and back, by the
client), and hostile input that must be a 4xx problem+json, never a 500."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, cast

import pytest
from django.db import OperationalError
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from oxide_batch.api.errors import problem_for
from oxide_batch.client.errors import ApiError, InvalidRequest, error_from_problem
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE, field_name, problem_member
from oxide_batch.domain import errors as errors_module
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    DomainError,
    NotFound,
    OxideBatchError,
    error_classes,
)
from oxide_batch.domain.status import BatchStatus
from tests.api.support import Runtime, field_error, problem, url
from tests.helpers import error_field_value

INPUT_SHAPED = {
    "identifier_out_of_range",
    "empty_partition_plan",
    "partition_plan_too_large",
    "duplicate_partition_key",
    "unsupported_manifest_version",
    "skip_not_eligible",
}
UNAVAILABLE = {
    "unavailable",
    "commit_outcome_unknown",
    "schema_uninitialized",
    "migration_required",
    "newer_schema",
}


def _dummy(hint: Any) -> Any:
    return error_field_value(hint, number=7, status=BatchStatus.STOPPING)


def instances() -> list[OxideBatchError]:
    found = []
    for cls in sorted(error_classes().values(), key=lambda c: c.code):
        if not dataclasses.is_dataclass(cls):
            continue
        hints = typing.get_type_hints(cls, vars(errors_module))
        values = {f.name: _dummy(hints[f.name]) for f in dataclasses.fields(cls)}
        found.append(cls(**values))
    return found


ERRORS = instances()


def expected_status(error: OxideBatchError) -> int:
    if error.code in INPUT_SHAPED or isinstance(error, DomainError):
        return 400
    if isinstance(error, NotFound):
        return 404
    if error.code == "job_not_permitted":  # a token limited to other jobs (contract §4.1)
        return 403
    if error.code in UNAVAILABLE:
        return 503
    return 409


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: error.code)
def test_every_typed_error_maps_to_one_problem_and_back(error: OxideBatchError) -> None:
    mapped = problem_for(error)
    assert mapped is not None
    status, document, headers = mapped
    assert status == expected_status(error)
    assert (headers.get("Retry-After") is not None) == (status == 503)
    json.dumps(document)  # JSON-ready
    if isinstance(error, DomainError):
        assert document["code"] == "invalid_request"
        (entry,) = document["errors"]["non_field_errors"]
        assert entry["code"] == error.code
    else:
        assert document["code"] == error.code
        assert document["detail"] == error.message
        assert document["status"] == status
    rebuilt = error_from_problem(status, document)
    assert type(rebuilt) is type(error)
    assert rebuilt.details() == error.details()  # type: ignore[attr-defined]


def test_corrupt_state_is_409() -> None:
    corrupt = [error for error in ERRORS if error.code.endswith("_corrupt")]
    assert len(corrupt) == 3
    assert all(expected_status(error) == 409 for error in corrupt)


def test_problem_members_never_shadow_the_http_status() -> None:
    assert problem_member("status") == "batch_status"
    assert field_name("batch_status") == "status"
    assert problem_member("detail") == "error_detail"
    assert field_name("error_detail") == "detail"
    assert problem_member("expected") == "expected"
    assert field_name("expected") == "expected"


def test_the_client_keeps_unknown_problems_as_api_errors() -> None:
    error = error_from_problem(403, {"code": "permission_denied", "detail": "no"})
    assert isinstance(error, ApiError)
    assert error.status == 403
    many = error_from_problem(
        400,
        {
            "code": "invalid_request",
            "detail": "d",
            "errors": {
                "a": [{"code": "required", "message": "m"}],
                "b": [{"code": "x", "message": "m"}],
            },
        },
    )
    assert isinstance(many, InvalidRequest)
    assert set(many.errors) == {"a", "b"}


# ------------------------------------------------------------------ hostile input


def raw(client: APIClient, path: str, body: bytes, content_type: str = "application/json") -> Any:
    return client.generic("POST", url(path), cast(Any, body), content_type=content_type)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", "malformed_json"),
        (b'{"job_name": "a", "job_name": "b"}', "repeated_key"),
        (b'{"job_name": NaN}', "non_finite_number"),
        (b'{"job_name": "a", "identifying_parameters": {"p": Infinity}}', "non_finite_number"),
        (b"[" * 65 + b"]" * 65, "too_deep"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, "too_deep"),
        (b"[" * 100000 + b"]" * 100000, "malformed_json"),
        (b'{"job_name": "\xff"}', "invalid_encoding"),
        (b'{"job_name": "\\ud800"}', "invalid_unicode"),
        (b'{"\\udfff": 1}', "invalid_unicode"),
        (b'{"job_name": 1' + b"0" * 5000 + b"}", "malformed_json"),
        (b"\xef\xbb\xbf{}", "malformed_json"),
    ],
)
def test_malformed_json_is_400(rt: Runtime, body: bytes, code: str) -> None:
    entry = field_error(raw(rt.client, "instances", body), "body", code)
    assert entry["message"]


@pytest.mark.parametrize("body", [b"[]", b'"x"', b"1", b"null", b"true"])
def test_a_body_that_is_not_an_object_is_400(rt: Runtime, body: bytes) -> None:
    problem(raw(rt.client, "instances", body), 400, "invalid_request")


def test_wrong_media_types_are_415(rt: Runtime) -> None:
    problem(
        raw(rt.client, "instances", b"job_name=x", "application/x-www-form-urlencoded"),
        415,
        "unsupported_media_type",
    )
    problem(raw(rt.client, "instances", b"{}", "text/plain"), 415, "unsupported_media_type")


def test_an_unacceptable_accept_header_is_406(rt: Runtime) -> None:
    response = rt.client.get(url("descriptor"), HTTP_ACCEPT="text/html")
    problem(response, 406, "not_acceptable")


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2 * 1024 * 1024)
def test_an_oversized_body_is_413(rt: Runtime) -> None:
    body = json.dumps({"job_name": "j", "identifying_parameters": {"p": "x" * (2 * 1024 * 1024)}})
    problem(raw(rt.client, "instances", body.encode()), 413, "request_too_large")


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("executions/0", 400, "invalid_request"),
        ("executions/-5", 400, "invalid_request"),
        (f"executions/{2**63}", 400, "identifier_out_of_range"),
        (f"steps/{10**40}/checkpoint", 400, "identifier_out_of_range"),
        (f"instances/{2**63 - 1}", 404, "job_instance_not_found"),
        ("executions/abc", 404, "not_found"),
        ("executions/1/nothing", 404, "not_found"),
        ("nothing", 404, "not_found"),
    ],
)
def test_path_identifiers(rt: Runtime, path: str, status: int, code: str) -> None:
    body = problem(rt.get(path, expect=None), status, code)
    if code == "invalid_request":
        assert next(iter(body["errors"].values()))[0]["code"] == "zero_identifier"
    if code == "identifier_out_of_range":
        assert body["kind"] in {"job execution", "step execution"}


def test_anonymous_gets_401_before_any_input_check() -> None:
    problem(APIClient().get(url("executions/0")), 401, "not_authenticated")


def test_a_database_fault_is_503_with_retry_after(rt: Runtime, monkeypatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("oxide_batch.api.views.executions.executions", fail)
    problem(rt.get("executions", expect=None), 503, "unavailable")


def test_commit_outcome_unknown_is_503(rt: Runtime, monkeypatch) -> None:
    _, execution = rt.launch()

    def lost(self: Any) -> None:
        raise CommitOutcomeUnknown()

    monkeypatch.setattr("oxide_batch.repository.unit_of_work.UnitOfWorkBase.commit", lost)
    response = rt.post(
        f"executions/{execution['id']}/transition", {"expected_version": 0, "status": "STARTED"}
    )
    problem(response, 503, "commit_outcome_unknown")


def test_an_unexpected_error_is_a_problem_500(rt: Runtime, monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("defect")

    monkeypatch.setattr("oxide_batch.api.views.executions.executions", broken)
    rt.client.raise_request_exception = False
    problem(rt.get("executions", expect=None), 500, "internal_error")


# ------------------------------------------------------------ never a 500 (fuzz)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "job_name",
    "identifying_parameters",
    "expected_version",
    "status",
    "failure",
    "step_name",
    "node_id",
    "start_limit",
    "counts",
    "checkpoint",
    "context",
    "entries",
    "exit_code",
    "owner_token",
    "worker_step_execution_id",
    "source_step_execution_id",
    "target",
    "kind",
    "manifest",
    "revision",
]
BODIES = st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=5) | JSON


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=BODIES,
    target=st.sampled_from(
        [
            "instances",
            "definitions",
            "transition",
            "steps",
            "checkpoint",
            "partitions",
            "assign",
            "flow",
        ]
    ),
)
def test_no_body_produces_a_500(rt: Runtime, body: Any, target: str) -> None:
    paths = {
        "instances": "instances",
        "definitions": "definitions",
        "transition": "executions/1/transition",
        "steps": "executions/1/steps",
        "checkpoint": "steps/1/checkpoint",
        "partitions": "steps/1/partitions",
        "assign": "partitions/1/assign",
        "flow": "executions/1/flow-decisions",
    }
    response = rt.client.post(url(paths[target]), json.dumps(body), content_type="application/json")
    assert response.status_code < 500, (response.status_code, response.content)
    if response.status_code >= 400:
        assert response["Content-Type"].startswith(PROBLEM_CONTENT_TYPE)


OPERATOR_FIELDS = [
    "expected_version",
    "operation_id",
    "reason_code",
    "disposition",
    "evidence_digest",
    "failure_category",
    "failure_id",
    "ended_before",
    "job_name",
    "statuses",
    "limit",
    "plan",
]
OPERATOR_BODIES = st.dictionaries(st.sampled_from(OPERATOR_FIELDS), JSON, max_size=6) | JSON
OPERATOR_TARGETS = {
    "recover": ("POST", "executions/1/recover"),
    "stop": ("POST", "executions/1/stop"),
    "abandon": ("POST", "executions/1/abandon"),
    "hold": ("PUT", "instances/1/hold"),
    "release": ("DELETE", "instances/1/hold"),
    "survey": ("POST", "purge/survey"),
    "apply": ("POST", "purge/apply"),
}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=OPERATOR_BODIES, target=st.sampled_from(sorted(OPERATOR_TARGETS)))
def test_no_operator_body_produces_a_500(operator: Runtime, body: Any, target: str) -> None:
    method, path = OPERATOR_TARGETS[target]
    response = operator.client.generic(
        method, url(path), json.dumps(body), content_type="application/json"
    )
    assert response.status_code < 500, (response.status_code, response.content)
    if response.status_code >= 400:
        assert response["Content-Type"].startswith(PROBLEM_CONTENT_TYPE)
