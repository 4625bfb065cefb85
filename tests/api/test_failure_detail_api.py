"""``failure.detail`` over HTTP (contract §2 "Failure detail", §4.3): a runtime
sends it with any failure it reports; ``GET executions/{id}`` and ``GET
steps/{id}`` show it as kept — every member to payload readers, the type alone
to viewers — at a constant query budget; hostile input is a 400 naming the
member or is sanitised as documented."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from tests.api.support import Runtime, field_error

pytestmark = pytest.mark.django_db
SECRET = "vault-Pa55word-xyz"
DETAIL = {
    "type": "builtins.ValueError",
    "message": "bad row 17: password=hunter2",
    "traceback": f"Traceback (most recent call last):\n  File 'job.py'\nValueError: {SECRET}",
}


def failure(detail: Any = DETAIL, failure_id: int = 7) -> dict[str, Any]:
    return {"category": "USER_COMPONENT", "failure_id": failure_id, "detail": detail}


def failed_execution(rt: Runtime, detail: Any = DETAIL) -> dict[str, Any]:
    execution = rt.started("detail_job", run="2026-07-29", vault=SECRET)
    return rt.move(execution, "FAILED", failure=failure(detail))


def test_operators_and_runtimes_read_the_scrubbed_detail(rt, operator, settings):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "traceback"
    execution = failed_execution(rt)
    assert "detail" not in execution["failure"]  # the write's answer: as it always was
    for reader in (rt, operator):
        shown = reader.get(f"executions/{execution['id']}")["failure"]
        assert shown["category"] == "USER_COMPONENT"
        detail = shown["detail"]
        assert detail["type"] == "builtins.ValueError"
        assert detail["message"] == "bad row 17: password=[redacted]"
        assert SECRET not in detail["traceback"]
        assert detail["traceback"].endswith("ValueError: [redacted]")
        assert detail["message_truncated"] is False


def test_a_viewer_reads_the_type_alone(rt, viewer):
    execution = failed_execution(rt)
    shown = viewer.get(f"executions/{execution['id']}")["failure"]
    assert shown["detail"] == {"type": "builtins.ValueError"}


def test_no_failure_no_detail_member_and_no_detail_kept_is_null(rt, operator):
    running = rt.started("detail_job", run="2026-07-30")
    assert operator.get(f"executions/{running['id']}")["failure"] is None
    failed = rt.move(rt.started("detail_job", run="2026-07-31"), "FAILED")
    assert operator.get(f"executions/{failed['id']}")["failure"]["detail"] is None


def test_a_step_shows_its_own_detail(rt, operator, viewer):
    execution = rt.started("detail_job", run="2026-08-01")
    step = rt.started_step(execution)
    rt.move_step(step, "FAILED", failure=failure({"type": "KeyError", "message": "'id'"}))
    shown = operator.get(f"steps/{step['id']}")["failure"]["detail"]
    assert shown["type"] == "KeyError"
    assert shown["message"] == "'id'"
    assert shown["traceback"] is None  # the default keeps type and message
    assert viewer.get(f"steps/{step['id']}")["failure"]["detail"] == {"type": "KeyError"}
    assert operator.get(f"executions/{execution['id']}")["failure"] is None


def test_a_long_message_is_cut_and_marked(rt, operator):
    execution = failed_execution(rt, {"type": "E", "message": "é" * 3000})
    detail = operator.get(f"executions/{execution['id']}")["failure"]["detail"]
    assert detail["message_truncated"] is True
    assert len(detail["message"].encode()) <= 2048
    assert detail["message"].endswith(" bytes]")


@pytest.mark.parametrize(
    ("detail", "member"),
    [
        ({"type": 7}, "failure.detail.type"),
        ({"message": ["a"]}, "failure.detail.message"),
        ({"traceback": {"x": 1}}, "failure.detail.traceback"),
        ({"stack": "x"}, "failure.detail.stack"),
        ("a string", "failure.detail"),
    ],
)
def test_a_detail_of_the_wrong_shape_is_a_400_naming_the_member(rt, detail, member):
    execution = rt.started("detail_job", run="2026-08-02")
    body = {"expected_version": execution["version"], "status": "FAILED"}
    response = rt.post(
        f"executions/{execution['id']}/transition", {**body, "failure": failure(detail)}
    )
    field_error(response, member)
    assert not models.FailureDetail.objects.exists()


def test_control_characters_are_stored_as_replacement_characters(rt, operator):
    sent = {"type": "Bad\nType\x00", "message": "line 1\r\nline\x002\ttab\x1b[31m"}
    execution = failed_execution(rt, sent)
    detail = operator.get(f"executions/{execution['id']}")["failure"]["detail"]
    assert detail["type"] == "Bad\ufffdType\ufffd"
    assert detail["message"] == "line 1\nline\ufffd2\ttab\ufffd[31m"


def test_reading_an_execution_or_a_step_costs_one_query_more_only_with_a_failure(rt, operator):
    """The budget stays constant: the execution (or step) in one query, its
    detail in one more when it has a failure — whatever the detail holds."""
    running = rt.started("detail_job", run="2026-08-03")
    execution = failed_execution(rt)
    step = rt.started_step(running)
    costs = {}
    for name, path in (
        ("running", f"executions/{running['id']}"),
        ("failed", f"executions/{execution['id']}"),
        ("step", f"steps/{step['id']}"),
    ):
        with CaptureQueriesContext(connection) as queries:
            operator.get(path)
        costs[name] = len(queries.captured_queries)
    assert costs["failed"] == costs["running"] + 1
    rt.move_step(step, "FAILED", failure=failure())
    with CaptureQueriesContext(connection) as queries:
        operator.get(f"steps/{step['id']}")
    assert len(queries.captured_queries) == costs["step"] + 1


def test_the_schema_documents_the_detail(served_document):
    components = served_document["components"]["schemas"]
    sent = components["FailureDetailRequest"]["properties"]
    assert set(sent) == {"type", "message", "traceback"}
    assert "2048" in sent["message"]["description"]
    shown = components["FailureWithDetail"]["properties"]["detail"]
    assert shown
    answers = [
        operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        for path in served_document["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict)
        and operation.get("operationId") in {"get_execution", "get_step"}
    ]
    assert sorted(answers) == [
        "#/components/schemas/ExecutionDetail",
        "#/components/schemas/StepDetail",
    ]
