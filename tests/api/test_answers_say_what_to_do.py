"""More answers that say what to do (contract §4.6, issue 38): a completed
instance points to new identifying parameters; a stale version names the
stored one and says to re-read; malformed JSON says where (line and column);
an oversize checkpoint names its limit and the setting that sets it; a 413
names the body limit and its setting; a 401 challenges with both schemes the
API reads; the execution's `counts` are documented for what they are."""

from __future__ import annotations

import json
from typing import Any, cast

from django.test import override_settings
from rest_framework.test import APIClient

from oxide_batch.api.docs import schema_document
from oxide_batch.selectors.pages import step_totals
from tests.api.support import Runtime, field_error, problem, url


def raw(client: APIClient, path: str, body: bytes) -> Any:
    return client.generic("POST", url(path), cast(Any, body), content_type="application/json")


def test_a_completed_instance_says_to_use_new_identifying_parameters(rt: Runtime) -> None:
    instance, execution = rt.launch()
    rt.move(rt.move(execution, "STARTED"), "COMPLETED")
    body = problem(rt.post(f"instances/{instance['id']}/executions", {}), 409, "completed_instance")
    assert body["detail"] == (
        f"job instance {instance['id']} is already completed and is never run again: "
        "to run the job again, use new identifying parameters (a new instance)"
    )


def test_a_stale_version_names_the_stored_version_and_says_to_re_read(rt: Runtime) -> None:
    _, execution = rt.launch()
    rt.move(execution, "STARTED")  # version 1
    stale = {"expected_version": 0, "status": "STOPPING"}
    body = problem(rt.post(f"executions/{execution['id']}/transition", stale), 409, "stale_version")
    assert (body["expected"], body["actual"]) == (0, 1)
    assert body["detail"] == (
        "expected version 0 but the stored version is 1: someone else wrote it since you "
        "read it; re-read it, and if your change still applies, send it again with "
        "expected_version 1"
    )


def test_malformed_json_says_where(rt: Runtime) -> None:
    body = b'{\n  "job_name": "import_job",\n  identifying_parameters: {}\n}'
    entry = field_error(raw(rt.client, "instances", body), "body", "malformed_json")
    assert entry["message"] == (
        "malformed JSON at line 3, column 3: Expecting property name enclosed in double quotes"
    )
    assert "identifying_parameters" not in entry["message"]  # where, never what


@override_settings(OXIDE_BATCH_STATE_MAX_BYTES=100)
def test_an_oversize_checkpoint_names_the_limit_and_its_setting(rt: Runtime) -> None:
    step = rt.started_step(rt.started())
    checkpoint = {"schema": "s", "schema_version": 1, "payload": {"x": "y" * 200}}
    answer = rt.post(
        f"steps/{step['id']}/checkpoint", {"expected_version": 1, "checkpoint": checkpoint}
    )
    entry = field_error(answer, "checkpoint", "invalid_envelope")
    size = len(json.dumps(checkpoint, separators=(",", ":"), sort_keys=True))
    assert entry["message"] == (
        f"invalid checkpoint: {size} bytes of canonical JSON, larger than the limit of "
        "100 bytes (the setting OXIDE_BATCH_STATE_MAX_BYTES sets it)"
    )


@override_settings(OXIDE_BATCH_STATE_MAX_DEPTH=2)
def test_a_too_deep_context_names_the_limit_and_its_setting(rt: Runtime) -> None:
    step = rt.started_step(rt.started())
    context = {"schema": "s", "schema_version": 1, "payload": {"a": {"b": 1}}}
    answer = rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": 1, "context": context})
    entry = field_error(answer, "context", "invalid_envelope")
    assert entry["message"] == (
        "invalid context: nested 3 levels deep, deeper than the limit of 2 "
        "(the setting OXIDE_BATCH_STATE_MAX_DEPTH sets it)"
    )


def test_an_oversize_partition_context_says_its_limit_is_fixed(rt: Runtime) -> None:
    execution = rt.started()
    parent = rt.started_step(execution)
    context = {"schema": "s", "schema_version": 1, "payload": {"x": "y" * 5000}}
    answer = rt.post(
        f"steps/{parent['id']}/partitions", {"entries": [{"key": "a", "context": context}]}
    )
    assert answer.status_code == 400, answer.content
    assert "larger than the limit of 4096 bytes (a fixed limit)" in answer.content.decode()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=4096)
def test_a_413_names_the_limit_and_its_setting(rt: Runtime) -> None:
    body = json.dumps({"job_name": "j", "identifying_parameters": {"p": "x" * 5000}})
    document = problem(raw(rt.client, "instances", body.encode()), 413, "request_too_large")
    assert document["max_bytes"] == 4096
    assert document["detail"] == (
        "the request body is larger than the limit of 4096 bytes (the setting "
        "DATA_UPLOAD_MAX_MEMORY_SIZE sets it): send less in one request"
    )


def test_a_401_challenges_with_token_and_bearer() -> None:
    for header in (None, "Bearer nonsense"):
        client = APIClient()
        if header is not None:
            client.credentials(HTTP_AUTHORIZATION=header)
        response = client.get(url("descriptor"))
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == "Token, Bearer"


def test_execution_counts_are_documented_as_the_job_level_counters(rt: Runtime) -> None:
    """A run that read 20 records: the execution's `counts` stay 0 (only a
    terminal rollback moves them), the steps carry the 20 — as the console's
    selector sums them — and the schema says so where a reader looks."""
    execution = rt.started()
    step = rt.started_step(execution)
    counts = {"read": 20, "processed": 20, "written": 20, "committed": 1}
    rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": 1, "counts": counts}, 200)
    answer = rt.get(f"executions/{execution['id']}")
    assert answer["counts"]["read"] == 0
    steps = rt.get(f"executions/{execution['id']}/steps")["results"]
    assert (
        sum(s["counts"]["read"] for s in steps) == 20 == step_totals(execution["id"])["read_count"]
    )
    described = schema_document()["components"]["schemas"]["Execution"]["properties"]["counts"]
    text = described["description"]
    assert "job-level counters" in text
    assert "terminal rollback" in text
    assert "the steps' totals" in text
