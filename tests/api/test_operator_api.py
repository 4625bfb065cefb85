"""Operator endpoints: the recovery proposal, audited recovery, stop and abandon
(contract §4.2, §2.5.5, §2.5.9, §4.1). Each success
shape, each error code by name, replays (same status, ``replayed: true``),
operation-id conflicts, REJECTED audit rows and the audited actor."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.domain.canonical import canonical_bytes, sha256_hex
from oxide_batch.repository import FixedClock
from oxide_batch.roles import OPERATOR
from tests.api.conftest import token_client
from tests.api.support import (
    DIGEST,
    EXECUTION_KEYS,
    FAILURE,
    INSTANT,
    Runtime,
    field_error,
    ok,
    problem,
    url,
)

User = get_user_model()

PROPOSAL_KEYS = {
    "job_execution_id",
    "status",
    "attempt",
    "version",
    "eligible",
    "reason_code",
    "owner_recorded",
    "failure_category",
    "default_failure_category",
    "last_activity_at",
    "inactive_seconds",
    "threshold_seconds",
    "eligibility",
    "rule",
    "lease_ttl_seconds",
    "lease_expires_at",
    "markers",
    "evidence",
    "evidence_digest",
}
EVIDENCE_KEYS = {
    "v",
    "job_execution_id",
    "status",
    "attempt",
    "version",
    "owner_recorded",
    "last_activity_at",
    "last_observed_at",
    "newest_step_write_at",
    "stop_requested_at",
    "latest_step",
    "markers",
}
MARKER_KEYS = {"unknown_commit", "completed_partition", "committed_flow_decision"}
RESPONSE_KEYS = {"outcome", "replayed", "changed", "operation_id", "execution", "record"}
RECORD_KEYS = {
    "id",
    "action",
    "operation_id",
    "actor",
    "outcome",
    "changed",
    "job_instance_id",
    "job_execution_id",
    "reason_code",
    "observed_version",
    "prior_status",
    "result_status",
    "rejection_code",
    "rejection_details",
    "request_digest",
    "requested_at",
}
DECISION_KEYS = {
    "id",
    "job_execution_id",
    "execution_version",
    "prior_status",
    "resulting_status",
    "reason_code",
    "actor",
    "operation_id",
    "evidence_digest",
    "decided_at",
    "resolved_step_ids",
    "eligibility",
    "override",
    "override_note",
}
UNKNOWN_COMMIT = {"category": "UNKNOWN_COMMIT", "failure_id": 41}
OPERATOR_NAME = "operator-user"


def orphan(rt: Runtime, clock: FixedClock, minutes: int = 16) -> dict[str, Any]:
    """A STARTED execution whose runtime went silent ``minutes`` ago."""
    execution = rt.started()
    clock.advance(timedelta(minutes=minutes))
    return execution


def unknown_commit(rt: Runtime, job: str = "import_job") -> dict[str, Any]:
    """An execution the runtime reported as an unknown commit."""
    execution = rt.started(job)
    return rt.move(execution, "UNKNOWN", failure=UNKNOWN_COMMIT)


def proposal_of(runtime: Runtime, execution: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = runtime.get(f"executions/{execution['id']}/recovery-proposal")
    return result


def recover_body(proposal: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    body = {
        "expected_version": proposal["version"],
        "disposition": "MARK_FAILED",
        "reason_code": "WORKER_LOST",
        "evidence_digest": proposal["evidence_digest"],
        "operation_id": "recover-1",
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


def audit_rows(runtime: Runtime, **filters: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = runtime.get("audit/operator-requests", **filters)["results"]
    return rows


def check_response(body: dict[str, Any], *, outcome: str = "APPLIED") -> None:
    assert set(body) >= RESPONSE_KEYS, body
    assert body["outcome"] == outcome
    assert body["replayed"] is (outcome == "REPLAYED")
    assert set(body["execution"]) == EXECUTION_KEYS
    assert set(body["record"]) == RECORD_KEYS
    assert body["record"]["actor"] == OPERATOR_NAME
    assert body["record"]["outcome"] == "APPLIED"
    assert DIGEST.fullmatch(body["record"]["request_digest"])
    assert INSTANT.fullmatch(body["record"]["requested_at"])


# The host project of tests/host leaves the request-id middleware out.
REQUEST_IDS = (
    "oxide_batch.observability.middleware.RequestObservabilityMiddleware" in settings.MIDDLEWARE
)


def rejected_and_replayed(
    operator: Runtime, path: str, body: dict[str, Any], code: str
) -> dict[str, Any]:
    """The refusal is the problem ``code``, leaves one REJECTED row, and replays
    as the same problem with ``replayed: true`` (nothing audited twice)."""
    first = problem(operator.post(path, body), 409, code)
    assert "replayed" not in first
    rows = audit_rows(operator, operation_id=body["operation_id"])
    assert [(row["outcome"], row["rejection_code"]) for row in rows] == [("REJECTED", code)]
    assert rows[0]["actor"] == OPERATOR_NAME
    again = problem(operator.post(path, body), 409, code)
    assert again == {**first, "replayed": True, "request_id": again["request_id"]}
    if REQUEST_IDS:  # each response has its own (the optional middleware, README)
        assert again["request_id"] != first["request_id"]
    assert len(audit_rows(operator, operation_id=body["operation_id"])) == 1
    return first


# ------------------------------------------------------------------ the proposal


def test_a_proposal_of_an_unknown_commit(rt: Runtime, viewer: Runtime, fixed: FixedClock) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    execution = rt.move(execution, "UNKNOWN", failure=UNKNOWN_COMMIT)
    fixed.advance(timedelta(seconds=90))
    proposal = proposal_of(viewer, execution)  # a read: viewers may
    assert set(proposal) == PROPOSAL_KEYS
    assert proposal["job_execution_id"] == execution["id"]
    assert (proposal["status"], proposal["version"], proposal["attempt"]) == ("UNKNOWN", 2, 1)
    assert (proposal["eligible"], proposal["reason_code"]) == (True, None)
    assert proposal["failure_category"] == "UNKNOWN_COMMIT"
    assert proposal["default_failure_category"] == "UNKNOWN_COMMIT"
    assert proposal["markers"] == {
        "unknown_commit": True,
        "completed_partition": False,
        "committed_flow_decision": False,
    }
    assert (proposal["inactive_seconds"], proposal["threshold_seconds"]) == (90, 900)
    assert INSTANT.fullmatch(proposal["last_activity_at"])
    evidence = proposal["evidence"]
    assert set(evidence) == EVIDENCE_KEYS
    assert set(evidence["markers"]) == MARKER_KEYS
    assert evidence["latest_step"] == {
        "id": step["id"],
        "status": "STARTED",
        "version": 1,
        "checkpoint": None,
    }
    # The evidence is the digest's input, exactly: a client can check the digest.
    assert DIGEST.fullmatch(proposal["evidence_digest"])
    assert sha256_hex(canonical_bytes(evidence)) == proposal["evidence_digest"]
    # The clock is not evidence: later, the same digest.
    fixed.advance(timedelta(hours=1))
    later = proposal_of(viewer, execution)
    assert later["evidence_digest"] == proposal["evidence_digest"]
    assert later["inactive_seconds"] == 90 + 3600


def test_a_proposal_shows_the_checkpoint_descriptor(rt: Runtime, fixed: FixedClock) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    envelope = {"schema": "reader.offset", "schema_version": 3, "payload": {"offset": 7}}
    rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": step["version"], "checkpoint": envelope},
        200,
    )
    checkpoint = proposal_of(rt, execution)["evidence"]["latest_step"]["checkpoint"]
    assert (checkpoint["schema"], checkpoint["schema_version"]) == ("reader.offset", 3)
    assert checkpoint["size"] > 0
    assert checkpoint["intact"] is True


def test_a_proposal_that_is_not_eligible_is_still_200(rt: Runtime, fixed: FixedClock) -> None:
    fresh = orphan(rt, fixed, minutes=5)
    proposal = proposal_of(rt, fresh)
    assert (proposal["eligible"], proposal["reason_code"]) == (False, "execution_not_stale")
    assert proposal["default_failure_category"] == "STALE_RECOVERED"
    assert proposal["inactive_seconds"] == 300
    _, launched = rt.launch(parameters={"run": "done"})
    done = rt.move(rt.move(launched, "STARTED"), "COMPLETED")
    proposal = proposal_of(rt, done)
    assert (proposal["eligible"], proposal["reason_code"]) == (False, "recovery_not_allowed")


def test_a_proposal_of_nothing(viewer: Runtime) -> None:
    problem(viewer.get("executions/987654/recovery-proposal", expect=None), 404,
            "job_execution_not_found")  # fmt: skip
    field_error(viewer.get("executions/0/recovery-proposal", expect=None), "execution_id")
    problem(viewer.get(f"executions/{2**63}/recovery-proposal", expect=None), 400,
            "identifier_out_of_range")  # fmt: skip


# ----------------------------------------------------------------------- recover


def test_recover_marks_a_stale_orphan_failed(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = orphan(rt, fixed)
    proposal = proposal_of(operator, execution)
    assert proposal["eligible"]
    path = f"executions/{execution['id']}/recover"
    body = operator.post(path, recover_body(proposal), 200)
    check_response(body)
    assert set(body) == RESPONSE_KEYS | {"decision"}
    assert body["changed"] is True
    assert body["operation_id"] == "recover-1"
    recovered = body["execution"]
    assert (recovered["status"], recovered["version"]) == ("FAILED", execution["version"] + 1)
    assert recovered["failure"]["category"] == "STALE_RECOVERED"
    assert recovered["failure"]["failure_id"] > 0  # generated by the server
    assert recovered["ended_at"] == "2026-01-01T00:16:00.000Z"
    decision = body["decision"]
    assert set(decision) == DECISION_KEYS
    assert decision["evidence_digest"] == proposal["evidence_digest"]  # in full
    assert (decision["prior_status"], decision["resulting_status"]) == ("STARTED", "FAILED")
    assert (decision["execution_version"], decision["reason_code"]) == (1, "WORKER_LOST")
    assert decision["actor"] == OPERATOR_NAME == body["record"]["actor"]
    assert decision["operation_id"] == body["operation_id"] == body["record"]["operation_id"]
    record = body["record"]
    assert (record["action"], record["prior_status"], record["result_status"]) == (
        "RECOVER",
        "STARTED",
        "FAILED",
    )
    assert (record["observed_version"], record["job_execution_id"]) == (1, execution["id"])
    assert record["job_instance_id"] == execution["job_instance_id"]
    # A replay: the recorded outcome, the same status, nothing acts twice.
    again = operator.post(path, recover_body(proposal), 200)
    check_response(again, outcome="REPLAYED")
    assert again["decision"] == decision
    assert again["record"] == record
    assert again["execution"]["version"] == recovered["version"]
    assert models.RecoveryDecision.objects.count() == 1
    assert models.OperatorRequest.objects.count() == 1
    # FAILED by recovery is restartable.
    rt.post(f"instances/{execution['job_instance_id']}/executions", {}, 201)


def test_recover_with_a_given_failure_and_abandon(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = orphan(rt, fixed)
    proposal = proposal_of(operator, execution)
    body = operator.post(
        f"executions/{execution['id']}/recover",
        recover_body(proposal, failure_category="PERMANENT_INFRASTRUCTURE", failure_id=945),
        200,
    )
    assert body["execution"]["failure"] == {
        "category": "PERMANENT_INFRASTRUCTURE",
        "failure_id": 945,
        "logs_url": None,
    }
    lost = unknown_commit(rt, "other_job")
    proposal = proposal_of(operator, lost)
    body = operator.post(
        f"executions/{lost['id']}/recover",
        recover_body(
            proposal, disposition="ABANDON", reason_code="OPERATOR_DECISION", operation_id="r-2"
        ),
        200,
    )
    assert body["execution"]["status"] == "ABANDONED"
    assert body["decision"]["resulting_status"] == "ABANDONED"
    problem(rt.post(f"instances/{lost['job_instance_id']}/executions", {}), 409,
            "abandoned_instance")  # fmt: skip


def test_recover_refusals_in_check_order(rt: Runtime, operator: Runtime, fixed: FixedClock) -> None:
    execution = orphan(rt, fixed)
    proposal = proposal_of(operator, execution)
    path = f"executions/{execution['id']}/recover"
    stale = rejected_and_replayed(
        operator, path, recover_body(proposal, expected_version=0, operation_id="r-1"),
        "stale_version",
    )  # fmt: skip
    assert (stale["expected"], stale["actual"]) == (0, 1)
    _, launched = rt.launch(parameters={"run": "done"})
    done = rt.move(rt.move(launched, "STARTED"), "COMPLETED")
    rejected_and_replayed(
        operator,
        f"executions/{done['id']}/recover",
        recover_body(proposal_of(operator, done), operation_id="r-2"),
        "recovery_not_allowed",
    )
    fresh = rt.started("fresh_job")
    body = rejected_and_replayed(
        operator,
        f"executions/{fresh['id']}/recover",
        recover_body(proposal_of(operator, fresh), operation_id="r-3"),
        "execution_not_stale",
    )
    assert (body["inactive_seconds"], body["threshold_seconds"]) == (0, 900)
    rejected_and_replayed(
        operator, path, recover_body(proposal, evidence_digest="0" * 64, operation_id="r-4"),
        "recovery_evidence_stale",
    )  # fmt: skip
    # Nothing changed the execution.
    assert rt.get(f"executions/{execution['id']}")["status"] == "STARTED"


def test_changed_evidence_is_recovery_evidence_stale(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    fixed.advance(timedelta(minutes=16))
    proposal = proposal_of(operator, execution)
    assert proposal["eligible"]
    # The runtime was alive after all: a chunk commits (the job's version stays).
    rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": step["version"]}, 200)
    fixed.advance(timedelta(minutes=16))
    rejected_and_replayed(
        operator,
        f"executions/{execution['id']}/recover",
        recover_body(proposal),
        "recovery_evidence_stale",
    )


def test_an_unknown_commit_needs_unknown_effect(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = unknown_commit(rt)
    proposal = proposal_of(operator, execution)
    path = f"executions/{execution['id']}/recover"
    rejected_and_replayed(
        operator, path, recover_body(proposal, operation_id="r-1"), "unresolved_recovery_required"
    )
    body = operator.post(
        path, recover_body(proposal, reason_code="UNKNOWN_EFFECT", operation_id="r-2"), 200
    )
    assert body["execution"]["failure"]["category"] == "UNKNOWN_COMMIT"
    assert body["decision"]["prior_status"] == "UNKNOWN"
    rows = audit_rows(operator, job_execution_id=execution["id"])
    assert [(r["operation_id"], r["outcome"]) for r in rows] == [
        ("r-2", "APPLIED"),
        ("r-1", "REJECTED"),
    ]


def test_a_used_operation_id_with_another_body_is_a_conflict(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = orphan(rt, fixed)
    proposal = proposal_of(operator, execution)
    path = f"executions/{execution['id']}/recover"
    operator.post(path, recover_body(proposal), 200)
    body = problem(
        operator.post(path, recover_body(proposal, reason_code="OTHER_REASON")),
        409,
        "operation_id_conflict",
    )
    assert (body["action"], body["operation_id"]) == ("RECOVER", "recover-1")
    # A refusal replays only for the same body, too.
    rejected = recover_body(proposal, expected_version=0, operation_id="r-x")
    problem(operator.post(path, rejected), 409, "stale_version")
    problem(operator.post(path, {**rejected, "expected_version": 5}), 409,
            "operation_id_conflict")  # fmt: skip
    # Conflicts are not audited.
    assert models.OperatorRequest.objects.count() == 2


def test_recover_input_errors(rt: Runtime, operator: Runtime, fixed: FixedClock) -> None:
    execution = orphan(rt, fixed)
    proposal = proposal_of(operator, execution)
    path = f"executions/{execution['id']}/recover"

    def post(**overrides: Any) -> Any:
        return operator.post(path, recover_body(proposal, **overrides))

    field_error(post(evidence_digest="ABC"), "evidence_digest", "invalid")
    field_error(post(evidence_digest=proposal["evidence_digest"].upper()), "evidence_digest")
    field_error(post(disposition="RETRY"), "disposition", "invalid_choice")
    field_error(post(reason_code="worker lost"), "reason_code", "invalid_characters")
    field_error(post(reason_code=""), "reason_code", "empty_name")
    field_error(post(operation_id="a b"), "operation_id", "invalid_characters")
    field_error(post(operation_id="x" * 65), "operation_id", "name_too_long")
    field_error(post(failure_id=0), "failure_id", "zero_identifier")
    field_error(post(failure_category="NOPE"), "failure_category", "invalid_choice")
    field_error(post(expected_version="1"), "expected_version", "invalid")
    field_error(post(operator="mallory"), "operator", "unknown_member")
    field_error(operator.post(path, {}), "operation_id", "required")
    # Not found: 404, not audited.
    problem(operator.post("executions/987654/recover", recover_body(proposal)), 404,
            "job_execution_not_found")  # fmt: skip
    assert models.OperatorRequest.objects.count() == 0


# ----------------------------------------------------------- the override (contract §2.5.5)

NOTE = "host batch-7 was powered off at 02:10 (ticket OPS-9): its worker is gone"


def claimed_started(rt: Runtime) -> dict[str, Any]:
    """A STARTED execution its runtime claimed: it holds a lease."""
    _, execution = rt.launch("owned_job")
    execution = rt.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": "ab" * 16},
        200,
    )
    return rt.move(execution, "STARTED")


def test_an_override_with_a_note_recovers_an_execution_whose_lease_is_held(
    rt: Runtime, operator: Runtime, viewer: Runtime, fixed: FixedClock
) -> None:
    execution = claimed_started(rt)
    fixed.advance(timedelta(seconds=20))  # 40 s of its 60 s lease left
    proposal = proposal_of(operator, execution)
    assert (proposal["eligible"], proposal["rule"]) == (False, "lease")
    path = f"executions/{execution['id']}/recover"
    problem(operator.post(path, recover_body(proposal)), 409, "execution_not_stale")
    body = recover_body(proposal, operation_id="override-1", override={"note": NOTE})
    recovered = operator.post(path, body, 200)
    check_response(recovered)
    decision = recovered["decision"]
    assert (decision["eligibility"], decision["override"], decision["override_note"]) == (
        "operator_override",
        True,
        NOTE,
    )
    assert recovered["execution"]["status"] == "FAILED"
    (row,) = viewer.get("audit/recovery-decisions")["results"]
    assert (row["eligibility"], row["override"], row["override_note"]) == (
        "operator_override",
        True,
        NOTE,
    )
    # The same request replays; the same operation id with another note conflicts.
    assert operator.post(path, body, 200)["replayed"] is True
    other = {**body, "override": {"note": "another reason"}}
    problem(operator.post(path, other), 409, "operation_id_conflict")
    # The worker, alive after all, is fenced: its next write is refused.
    problem(
        rt.post(path.replace("/recover", "/transition"),
                {"expected_version": execution["version"], "status": "COMPLETED"}),
        409,
        "stale_version",
    )  # fmt: skip


def test_an_override_of_an_eligible_execution_records_the_rule_and_the_note(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = claimed_started(rt)
    fixed.advance(timedelta(minutes=2))  # the lease expired anyway
    proposal = proposal_of(operator, execution)
    assert (proposal["eligible"], proposal["eligibility"]) == (True, "lease_expired")
    body = recover_body(proposal, override={"note": NOTE})
    decision = operator.post(f"executions/{execution['id']}/recover", body, 200)["decision"]
    assert (decision["eligibility"], decision["override"], decision["override_note"]) == (
        "lease_expired",
        False,
        NOTE,
    )


def test_an_override_never_recovers_a_finished_execution(rt: Runtime, operator: Runtime) -> None:
    failed = rt.move(rt.started(), "FAILED", failure=FAILURE)
    proposal = proposal_of(operator, failed)
    body = recover_body(proposal, override={"note": NOTE})
    rejected_and_replayed(
        operator, f"executions/{failed['id']}/recover", body, "recovery_not_allowed"
    )


@pytest.mark.parametrize(
    ("override", "path", "code"),
    [
        ({}, "override.note", "required"),
        ({"note": ""}, "override.note", "recovery_field_empty"),
        ({"note": " padded"}, "override.note", "recovery_field_surrounding_whitespace"),
        ({"note": "two\nlines"}, "override.note", "recovery_field_control_character"),
        ({"note": "é" * 501}, "override.note", "recovery_field_too_long"),
        ({"note": NOTE, "by": "mallory"}, "override.by", "unknown_member"),
        (True, "override", "invalid"),
    ],
)
def test_an_override_needs_a_note_the_audit_can_show(
    rt: Runtime, operator: Runtime, fixed: FixedClock, override: Any, path: str, code: str
) -> None:
    execution = claimed_started(rt)
    proposal = proposal_of(operator, execution)
    body = recover_body(proposal, override=override)
    field_error(operator.post(f"executions/{execution['id']}/recover", body), path, code)
    assert models.OperatorRequest.objects.count() == 0
    assert models.JobExecution.objects.get(pk=execution["id"]).status == "STARTED"


# -------------------------------------------------------------------------- stop


def test_stop_records_who_and_when(rt: Runtime, operator: Runtime, fixed: FixedClock) -> None:
    execution = rt.started()
    fixed.advance(timedelta(seconds=5))
    path = f"executions/{execution['id']}/stop"
    body = operator.post(path, {"expected_version": 1, "operation_id": "stop-1"}, 200)
    check_response(body)
    assert set(body) == RESPONSE_KEYS
    assert body["changed"] is True
    stopped = body["execution"]
    assert (stopped["status"], stopped["version"]) == ("STARTED", 1)  # untouched
    assert stopped["stop_requested"] is True
    assert stopped["stop_requested_at"] == "2026-01-01T00:00:05.000Z"
    assert (body["record"]["action"], body["record"]["result_status"]) == ("STOP", "STARTED")
    again = operator.post(path, {"expected_version": 1, "operation_id": "stop-1"}, 200)
    check_response(again, outcome="REPLAYED")
    assert again["record"] == body["record"]
    problem(operator.post(path, {"expected_version": 0, "operation_id": "stop-1"}), 409,
            "operation_id_conflict")  # fmt: skip


def test_stop_refusals_and_no_ops(rt: Runtime, operator: Runtime) -> None:
    execution = rt.started()
    path = f"executions/{execution['id']}/stop"
    rejected_and_replayed(
        operator, path, {"expected_version": 0, "operation_id": "s-1"}, "stale_version"
    )
    lost = unknown_commit(rt, "lost_job")
    body = rejected_and_replayed(
        operator,
        f"executions/{lost['id']}/stop",
        {"expected_version": lost["version"], "operation_id": "s-2"},
        "invalid_state",
    )
    assert body["batch_status"] == "UNKNOWN"
    done = rt.move(rt.started("done_job"), "COMPLETED")
    # A no-op stop skips the version check.
    body = operator.post(
        f"executions/{done['id']}/stop", {"expected_version": 99, "operation_id": "s-3"}, 200
    )
    assert (body["outcome"], body["changed"]) == ("APPLIED", False)
    assert body["execution"]["stop_requested"] is False
    problem(operator.post("executions/987654/stop", {"expected_version": 0,
            "operation_id": "s-4"}), 404, "job_execution_not_found")  # fmt: skip
    field_error(operator.post(path, {"expected_version": -1, "operation_id": "s"}),
                "expected_version")  # fmt: skip
    field_error(operator.post(path, {"expected_version": 1}), "operation_id", "required")


def test_a_runtime_observing_the_stop_moves_to_stopping(rt: Runtime, operator: Runtime) -> None:
    _, execution = rt.launch()
    token = "0e" * 16
    execution = rt.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": token},
        200,
    )
    execution = rt.move(execution, "STARTED")
    operator.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": execution["version"], "operation_id": "stop-owned"},
        200,
    )
    control = rt.post(f"executions/{execution['id']}/control", {"owner_token": token}, 200)
    assert control["stop_requested"] is True
    assert control["execution"]["status"] == "STOPPING"


# ----------------------------------------------------------------------- abandon


def test_abandon_a_failed_attempt(rt: Runtime, operator: Runtime) -> None:
    failed = rt.move(rt.started(), "FAILED")
    path = f"executions/{failed['id']}/abandon"
    request = {"expected_version": failed["version"], "reason_code": "BAD_INPUT",
               "operation_id": "a-1"}  # fmt: skip
    body = operator.post(path, request, 200)
    check_response(body)
    assert body["changed"] is True
    assert body["execution"]["status"] == "ABANDONED"
    assert body["execution"]["version"] == failed["version"] + 1
    assert (body["record"]["prior_status"], body["record"]["reason_code"]) == (
        "FAILED",
        "BAD_INPUT",
    )
    check_response(operator.post(path, request, 200), outcome="REPLAYED")
    # Already ABANDONED: a no-op without a version check.
    body = operator.post(path, {**request, "expected_version": 0, "operation_id": "a-2"}, 200)
    assert (body["outcome"], body["changed"]) == ("APPLIED", False)
    problem(rt.post(f"instances/{failed['job_instance_id']}/executions", {}), 409,
            "abandoned_instance")  # fmt: skip
    # The admin's own history has the action under the token's user, the replay
    # added nothing, the no-op says so (decision 135).
    entries = LogEntry.objects.filter(object_id=str(failed["id"])).order_by("id")
    ids = {r.operation_id: r.id for r in models.OperatorRequest.objects.all()}
    names = dict(get_user_model().objects.values_list("pk", "username"))
    assert [(names[e.user_id], e.change_message) for e in entries] == [
        ("operator-user", "Abandoned: FAILED → ABANDONED, reason BAD_INPUT; "
                          f"operator request #{ids['a-1']} (a-1)"),
        ("operator-user", "Abandon: nothing to change (already ABANDONED), reason BAD_INPUT; "
                          f"operator request #{ids['a-2']} (a-2)"),
    ]  # fmt: skip


def test_abandon_refusals(rt: Runtime, operator: Runtime) -> None:
    running = rt.started()
    body = rejected_and_replayed(
        operator,
        f"executions/{running['id']}/abandon",
        {"expected_version": 1, "reason_code": "BAD_INPUT", "operation_id": "a-1"},
        "invalid_state",
    )
    assert body["batch_status"] == "STARTED"
    stopped = rt.move(rt.move(rt.started("other_job"), "STOPPING"), "STOPPED")
    rejected_and_replayed(
        operator,
        f"executions/{stopped['id']}/abandon",
        {"expected_version": 0, "reason_code": "BAD_INPUT", "operation_id": "a-2"},
        "stale_version",
    )
    field_error(
        operator.post(
            f"executions/{stopped['id']}/abandon",
            {"expected_version": 3, "reason_code": "bad", "operation_id": "a-3"},
        ),
        "reason_code",
        "invalid_characters",
    )
    problem(
        operator.post(
            "executions/987654/abandon",
            {"expected_version": 0, "reason_code": "X", "operation_id": "a-4"},
        ),
        404,
        "job_execution_not_found",
    )


# ------------------------------------------------------------------------ actors


def test_the_audited_actor_is_the_tokens_user_never_the_body(rt: Runtime) -> None:
    user = User.objects.create_user("dave smith")  # outside the actor character set
    user.groups.add(Group.objects.get(name=OPERATOR))
    client = token_client(user)
    execution = rt.started()
    response = client.post(
        url(f"executions/{execution['id']}/stop"),
        {"expected_version": 1, "operation_id": "stop-dave", "actor": "mallory"},
        format="json",
    )
    field_error(response, "actor", "unknown_member")  # no client-supplied actor
    body = ok(
        client.post(
            url(f"executions/{execution['id']}/stop"),
            {"expected_version": 1, "operation_id": "stop-dave"},
            format="json",
        )
    )
    assert body["record"]["actor"] == f"user:{user.pk}"
    row = models.OperatorRequest.objects.get()
    assert (row.actor, row.actor_user_id) == (f"user:{user.pk}", user.pk)


def test_the_same_request_from_another_operator_replays(
    rt: Runtime, operator: Runtime, client_for: Callable[[str], APIClient]
) -> None:
    execution = rt.started()
    request = {"expected_version": 1, "operation_id": "stop-shared"}
    operator.post(f"executions/{execution['id']}/stop", request, 200)
    other = Runtime(client_for("superuser"))
    body = other.post(f"executions/{execution['id']}/stop", request, 200)
    assert (body["outcome"], body["replayed"]) == ("REPLAYED", True)
    assert body["record"]["actor"] == OPERATOR_NAME  # who acted, not who asked again
