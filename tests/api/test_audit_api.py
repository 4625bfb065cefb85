"""The append-only audit lists (contract §4.2 ``audit/*``): newest first with keyset
pagination, filters, evidence digests as a 12-character prefix, readable by viewers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.repository import FixedClock
from tests.api.support import INSTANT, Runtime, field_error, problem
from tests.api.test_lists import all_ids

AUDIT_DECISION_KEYS = {
    "id",
    "job_instance_id",
    "job_execution_id",
    "execution_version",
    "prior_status",
    "resulting_status",
    "reason_code",
    "actor",
    "operation_id",
    "evidence_digest_prefix",
    "decided_at",
    "resolved_step_ids",
    "eligibility",
    "override",
    "override_note",
}


def recovered(rt: Runtime, operator: Runtime, clock: FixedClock, run: str) -> dict[str, Any]:
    """A STARTED execution gone silent, marked FAILED by the operator: the response."""
    execution = rt.started(run=run)
    clock.advance(timedelta(minutes=16))
    proposal = operator.get(f"executions/{execution['id']}/recovery-proposal")
    body: dict[str, Any] = operator.post(
        f"executions/{execution['id']}/recover",
        {
            "expected_version": proposal["version"],
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": f"recover-{run}",
        },
        200,
    )
    return body


def test_recovery_decisions(
    rt: Runtime, operator: Runtime, viewer: Runtime, fixed: FixedClock
) -> None:
    first = recovered(rt, operator, fixed, "a")
    second = recovered(rt, operator, fixed, "b")
    page = viewer.get("audit/recovery-decisions")
    assert set(page) == {"next", "previous", "results"}
    rows = page["results"]
    assert [row["id"] for row in rows] == [second["decision"]["id"], first["decision"]["id"]]
    row = rows[1]
    assert set(row) == AUDIT_DECISION_KEYS
    digest = first["decision"]["evidence_digest"]
    assert row["evidence_digest_prefix"] == digest[:12]
    assert digest not in str(page)  # lists never show a digest in full
    assert (row["job_execution_id"], row["job_instance_id"]) == (
        first["execution"]["id"],
        first["execution"]["job_instance_id"],
    )
    assert (row["prior_status"], row["resulting_status"], row["execution_version"]) == (
        "STARTED",
        "FAILED",
        1,
    )
    # One name for the audited operator, and the operation id of the request that
    # made the decision, as on every audit row (issue 15).
    assert (row["reason_code"], row["actor"]) == ("WORKER_LOST", "operator-user")
    assert row["operation_id"] == "recover-a" == first["record"]["operation_id"]
    assert rows[0]["operation_id"] == "recover-b"
    assert INSTANT.fullmatch(row["decided_at"])
    only = viewer.get("audit/recovery-decisions", job_execution_id=first["execution"]["id"])
    assert [r["id"] for r in only["results"]] == [first["decision"]["id"]]
    by_instance = viewer.get(
        "audit/recovery-decisions", job_instance_id=second["execution"]["job_instance_id"]
    )
    assert [r["id"] for r in by_instance["results"]] == [second["decision"]["id"]]
    assert all_ids(viewer, "audit/recovery-decisions", page_size=1) == [
        second["decision"]["id"],
        first["decision"]["id"],
    ]


def test_operator_requests_filters(
    rt: Runtime, operator: Runtime, viewer: Runtime, fixed: FixedClock
) -> None:
    done = recovered(rt, operator, fixed, "a")
    execution = rt.started(run="b")
    stop = {"expected_version": 0, "operation_id": "stop-stale"}
    problem(operator.post(f"executions/{execution['id']}/stop", stop), 409, "stale_version")
    operator.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": 1, "operation_id": "stop-ok"},
        200,
    )
    rows = viewer.get("audit/operator-requests")["results"]
    assert [(r["action"], r["operation_id"], r["outcome"]) for r in rows] == [
        ("STOP", "stop-ok", "APPLIED"),
        ("STOP", "stop-stale", "REJECTED"),
        ("RECOVER", "recover-a", "APPLIED"),
    ]
    rejected = rows[1]
    assert (rejected["rejection_code"], rejected["rejection_details"]) == (
        "stale_version",
        {"expected": 0, "actual": 1},
    )
    assert (rejected["prior_status"], rejected["result_status"]) == (None, None)

    def ids(**filters: Any) -> list[str]:
        found = viewer.get("audit/operator-requests", **filters)["results"]
        return [r["operation_id"] for r in found]

    assert ids(outcome="REJECTED") == ["stop-stale"]
    assert ids(action="RECOVER") == ["recover-a"]
    assert ids(operation_id="stop-ok") == ["stop-ok"]
    assert ids(job_execution_id=execution["id"]) == ["stop-ok", "stop-stale"]
    assert ids(job_instance_id=done["execution"]["job_instance_id"]) == ["recover-a"]
    assert ids(job_execution_id=execution["id"], outcome="APPLIED") == ["stop-ok"]


@pytest.mark.parametrize(
    ("path", "parameter", "value"),
    [
        ("audit/operator-requests", "job_execution_id", "0"),
        ("audit/operator-requests", "job_execution_id", "x"),
        ("audit/operator-requests", "job_instance_id", str(2**63)),
        ("audit/operator-requests", "action", "HOLD"),
        ("audit/operator-requests", "outcome", "REPLAYED"),
        ("audit/operator-requests", "operation_id", "a b"),
        ("audit/recovery-decisions", "job_execution_id", "-1"),
        ("audit/retention-records", "action", "STOP"),
        ("audit/retention-records", "job_instance_id", "1.5"),
        ("audit/retention-records", "page_size", "0"),
    ],
)
def test_bad_audit_filters_are_400(viewer: Runtime, path: str, parameter: str, value: str) -> None:
    field_error(viewer.get(path, expect=None, **{parameter: value}), parameter)


def test_retention_records(rt: Runtime, operator: Runtime, viewer: Runtime) -> None:
    first, _ = rt.launch(parameters={"run": "a"})
    second, _ = rt.launch(parameters={"run": "b"})
    body = {"reason_code": "LEGAL_HOLD", "operation_id": "hold-a"}
    operator.put(f"instances/{first['id']}/hold", body, 200)
    operator.put(f"instances/{second['id']}/hold", {**body, "operation_id": "hold-b"}, 200)
    operator.delete(f"instances/{first['id']}/hold", {**body, "operation_id": "release-a"}, 200)
    rows = viewer.get("audit/retention-records")["results"]
    assert [(r["action"], r["operation_id"]) for r in rows] == [
        ("RELEASE_HOLD", "release-a"),
        ("HOLD", "hold-b"),
        ("HOLD", "hold-a"),
    ]
    assert {r["actor"] for r in rows} == {"operator-user"}
    assert rows[0]["counts"] == dict.fromkeys(rows[0]["counts"], 0)
    of_first = viewer.get("audit/retention-records", job_instance_id=first["id"])["results"]
    assert [r["operation_id"] for r in of_first] == ["release-a", "hold-a"]
    holds = viewer.get("audit/retention-records", action="HOLD")["results"]
    assert [r["operation_id"] for r in holds] == ["hold-b", "hold-a"]


@pytest.mark.parametrize(
    "path", ["audit/recovery-decisions", "audit/operator-requests", "audit/retention-records"]
)
def test_an_audit_page_is_a_constant_number_of_queries(
    rt: Runtime, operator: Runtime, viewer: Runtime, path: str
) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            viewer.get(path)
        assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
        return len(queries.captured_queries)

    empty = count()
    for n in range(3):
        instance, execution = rt.launch(parameters={"run": f"n{n}"})
        operator.put(
            f"instances/{instance['id']}/hold",
            {"reason_code": "LEGAL_HOLD", "operation_id": f"h{n}"},
            200,
        )
        operator.post(
            f"executions/{execution['id']}/stop", {"expected_version": 0, "operation_id": f"s{n}"}
        )
    assert count() == empty
