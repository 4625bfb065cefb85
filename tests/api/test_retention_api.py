"""Holds and the two-phase purge over HTTP (contract §2.5.10, §2.5.11, §4.1):
success shapes, replays, conflicts and each error by name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import override_settings

from oxide_batch import models
from oxide_batch.repository import FixedClock
from tests.api.support import DIGEST, INSTANT, Runtime, field_error, problem

HOLD_RESPONSE_KEYS = {"outcome", "replayed", "changed", "operation_id", "hold", "record"}
PURGE_RESPONSE_KEYS = {"outcome", "replayed", "changed", "operation_id", "counts", "record"}
RETENTION_RECORD_KEYS = {
    "id",
    "action",
    "operation_id",
    "actor",
    "reason_code",
    "request_digest",
    "job_instance_id",
    "plan_digest",
    "batch_bound",
    "counts",
    "changed",
    "outcome",
    "rejection_code",
    "rejection_details",
    "applied_at",
}
PLAN_KEYS = {
    "cutoff",
    "job_name",
    "statuses",
    "bound",
    "candidates",
    "counts",
    "held_excluded",
    "plan_digest",
}
COUNT_KINDS = {
    "flow_decisions",
    "step_partitions",
    "step_executions",
    "job_executions",
    "job_instances",
}
CUTOFF = "2026-01-01T01:00:00.000Z"  # EPOCH + 1 h
OPERATOR_NAME = "operator-user"


def finished(rt: Runtime, run: str, job: str = "import_job", steps: int = 1) -> dict[str, Any]:
    """A COMPLETED instance with ``steps`` steps; its execution."""
    execution = rt.started(job, run=run)
    for index in range(steps):
        rt.move_step(rt.started_step(execution, f"step-{index}"), "COMPLETED")
    return rt.move(execution, "COMPLETED")


def hold_body(**overrides: Any) -> dict[str, Any]:
    return {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1", **overrides}


# ------------------------------------------------------------------------- holds


def test_place_replay_and_release_a_hold(
    rt: Runtime, operator: Runtime, viewer: Runtime, fixed: FixedClock
) -> None:
    instance, execution = rt.launch()
    path = f"instances/{instance['id']}/hold"
    fixed.advance(timedelta(seconds=3))
    body = operator.put(path, hold_body(), 200)
    rt.move(execution, "STARTED")  # holds never block lifecycle actions
    assert set(body) == HOLD_RESPONSE_KEYS
    assert (body["outcome"], body["replayed"], body["changed"]) == ("APPLIED", False, True)
    assert body["hold"] == {
        "job_instance_id": instance["id"],
        "actor": OPERATOR_NAME,
        "reason_code": "LEGAL_HOLD",
        "placed_at": "2026-01-01T00:00:03.000Z",
    }
    record = body["record"]
    assert set(record) == RETENTION_RECORD_KEYS
    assert (record["action"], record["actor"], record["job_instance_id"]) == (
        "HOLD",
        OPERATOR_NAME,
        instance["id"],
    )
    assert (record["plan_digest"], record["batch_bound"]) == (None, None)
    assert DIGEST.fullmatch(record["request_digest"])
    assert viewer.get(f"instances/{instance['id']}")["hold"] == {
        "actor": OPERATOR_NAME,
        "reason_code": "LEGAL_HOLD",
        "placed_at": "2026-01-01T00:00:03.000Z",
    }
    again = operator.put(path, hold_body(), 200)
    assert (again["outcome"], again["replayed"]) == ("REPLAYED", True)
    assert again["record"] == record
    assert again["hold"] == body["hold"]
    conflict = problem(operator.put(path, hold_body(reason_code="OTHER")), 409,
                       "operation_id_conflict")  # fmt: skip
    assert conflict["action"] == "HOLD"
    # Placing again (another operation) replaces the hold.
    replaced = operator.put(path, hold_body(reason_code="AUDIT", operation_id="hold-2"), 200)
    assert replaced["hold"]["reason_code"] == "AUDIT"
    released = operator.delete(path, hold_body(reason_code="DONE", operation_id="rel-1"), 200)
    assert set(released) == HOLD_RESPONSE_KEYS
    assert (released["outcome"], released["changed"], released["hold"]) == ("APPLIED", True, None)
    assert released["record"]["action"] == "RELEASE_HOLD"
    assert viewer.get(f"instances/{instance['id']}")["hold"] is None
    # Releasing when none is held succeeds, recorded as unchanged.
    nothing = operator.delete(path, hold_body(reason_code="DONE", operation_id="rel-2"), 200)
    assert (nothing["changed"], nothing["hold"]) == (False, None)
    assert models.RetentionRecord.objects.count() == 4


def test_hold_errors(operator: Runtime, rt: Runtime) -> None:
    problem(operator.put("instances/987654/hold", hold_body()), 404, "job_instance_not_found")
    problem(operator.delete("instances/987654/hold", hold_body()), 404, "job_instance_not_found")
    assert models.RetentionRecord.objects.count() == 0  # not found is not audited
    instance, _ = rt.launch()
    path = f"instances/{instance['id']}/hold"
    field_error(operator.put(path, hold_body(reason_code="legal")), "reason_code",
                "invalid_characters")  # fmt: skip
    field_error(operator.put(path, hold_body(operation_id="")), "operation_id", "empty_name")
    field_error(operator.delete(path, {"operation_id": "x"}), "reason_code", "required")
    field_error(operator.put(path, hold_body(actor="me")), "actor", "unknown_member")
    field_error(operator.put("instances/0/hold", hold_body()), "instance_id")
    # Only PUT and DELETE.
    problem(operator.post(path, hold_body()), 405, "method_not_allowed")


# ------------------------------------------------------------------------- purge


def test_survey_and_apply_a_purge(rt: Runtime, operator: Runtime, fixed: FixedClock) -> None:
    old = [finished(rt, run=f"old-{n}", steps=2) for n in range(3)]
    held = old[2]
    operator.put(f"instances/{held['job_instance_id']}/hold", hold_body(), 200)
    fixed.advance(timedelta(hours=2))
    young = finished(rt, run="young")
    fixed.advance(timedelta(hours=2))

    plan = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)
    assert set(plan) == PLAN_KEYS
    assert plan["cutoff"] == CUTOFF
    assert (plan["job_name"], plan["bound"], plan["held_excluded"]) == (None, 1000, 1)
    assert plan["statuses"] == ["STOPPED", "FAILED", "COMPLETED", "ABANDONED"]
    assert plan["candidates"] == [
        {
            "instance_id": execution["job_instance_id"],
            "executions": [{"id": execution["id"], "version": execution["version"]}],
        }
        for execution in old[:2]
    ]
    assert plan["counts"] == {
        "flow_decisions": 0,
        "step_partitions": 0,
        "step_executions": 4,
        "job_executions": 2,
        "job_instances": 2,
    }
    assert DIGEST.fullmatch(plan["plan_digest"])

    request = {"plan": plan, "reason_code": "SCHEDULED_PURGE", "operation_id": "purge-1"}
    body = operator.post("purge/apply", request, 200)
    assert set(body) == PURGE_RESPONSE_KEYS
    assert (body["outcome"], body["replayed"], body["changed"]) == ("APPLIED", False, True)
    assert body["counts"] == plan["counts"]
    record = body["record"]
    assert set(record) == RETENTION_RECORD_KEYS
    assert (record["action"], record["plan_digest"], record["batch_bound"]) == (
        "APPLY_PURGE",
        plan["plan_digest"],
        1000,
    )
    assert record["counts"] == plan["counts"]
    assert INSTANT.fullmatch(record["applied_at"])
    for execution in old[:2]:
        problem(operator.get(f"executions/{execution['id']}", expect=None), 404,
                "job_execution_not_found")  # fmt: skip
    operator.get(f"executions/{held['id']}")
    operator.get(f"executions/{young['id']}")
    # A replay: the recorded outcome, nothing deleted twice.
    again = operator.post("purge/apply", request, 200)
    assert (again["outcome"], again["replayed"], again["changed"]) == ("REPLAYED", True, True)
    assert again["counts"] == plan["counts"]
    assert again["record"] == record
    assert models.RetentionRecord.objects.filter(action="APPLY_PURGE").count() == 1
    problem(operator.post("purge/apply", {**request, "reason_code": "OTHER"}), 409,
            "operation_id_conflict")  # fmt: skip
    # An empty plan applies with zero counts.
    empty = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)
    assert (empty["candidates"], empty["held_excluded"]) == ([], 1)
    body = operator.post("purge/apply", {"plan": empty, "operation_id": "purge-2"}, 200)
    assert (body["changed"], set(body["counts"].values())) == (False, {0})
    assert body["record"]["reason_code"] == "SCHEDULED_PURGE"  # the default


def test_survey_filters(rt: Runtime, operator: Runtime, fixed: FixedClock) -> None:
    finished(rt, run="a")
    other = finished(rt, run="b", job="other_job")
    failed = rt.move(rt.started("failed_job"), "FAILED")
    fixed.advance(timedelta(hours=2))
    plan = operator.post(
        "purge/survey", {"ended_before": CUTOFF, "job_name": "other_job", "limit": 5}, 200
    )
    assert [c["instance_id"] for c in plan["candidates"]] == [other["job_instance_id"]]
    assert (plan["job_name"], plan["bound"]) == ("other_job", 5)
    plan = operator.post(
        "purge/survey", {"ended_before": CUTOFF, "statuses": ["FAILED", "ABANDONED"]}, 200
    )
    assert plan["statuses"] == ["FAILED", "ABANDONED"]
    assert [c["instance_id"] for c in plan["candidates"]] == [failed["job_instance_id"]]
    plan = operator.post("purge/survey", {"ended_before": CUTOFF, "limit": 1}, 200)
    assert len(plan["candidates"]) == 1
    # An offset other than Z is converted to UTC.
    plan = operator.post("purge/survey", {"ended_before": "2026-01-01T02:00:00+01:00"}, 200)
    assert plan["cutoff"] == CUTOFF


def test_survey_input_errors(operator: Runtime, fixed: FixedClock, settings: Any) -> None:
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(hours=1)
    fixed.advance(timedelta(hours=2))

    def survey(**body: Any) -> Any:
        return operator.post("purge/survey", body)

    # Younger than OXIDE_BATCH_PURGE_MIN_AGE (1 h).
    entry = field_error(survey(ended_before="2026-01-01T01:30:00Z"), "ended_before",
                        "age_bound_too_small")  # fmt: skip
    assert entry["minimum_seconds"] == 3600
    field_error(survey(ended_before="2026-01-01T00:00:00"), "ended_before", "invalid")
    field_error(survey(ended_before="yesterday"), "ended_before", "invalid")
    field_error(survey(ended_before=5), "ended_before", "invalid")
    field_error(survey(), "ended_before", "required")
    field_error(survey(ended_before=CUTOFF, statuses=["STARTED"]), "statuses",
                "non_terminal_status")  # fmt: skip
    field_error(survey(ended_before=CUTOFF, statuses=[]), "statuses", "empty_status_set")
    field_error(survey(ended_before=CUTOFF, statuses=["NOPE"]), "statuses.0")
    field_error(survey(ended_before=CUTOFF, limit=0), "limit", "batch_bound_out_of_range")
    field_error(survey(ended_before=CUTOFF, limit=1001), "limit", "batch_bound_out_of_range")
    field_error(survey(ended_before=CUTOFF, job_name=" x"), "job_name",
                "name_has_surrounding_whitespace")  # fmt: skip


def test_a_changed_or_edited_plan_is_stale_and_deletes_nothing(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = finished(rt, run="a")
    fixed.advance(timedelta(hours=2))
    plan = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)
    assert len(plan["candidates"]) == 1
    # Edited: another version observed (the digest no longer matches).
    edited = {**plan, "candidates": [{**plan["candidates"][0], "executions": [
        {"id": execution["id"], "version": execution["version"] + 1}]}]}  # fmt: skip
    problem(operator.post("purge/apply", {"plan": edited, "operation_id": "p-1"}), 409,
            "retention_plan_stale")  # fmt: skip
    # Changed under it: a hold was placed since the survey.
    operator.put(f"instances/{execution['job_instance_id']}/hold", hold_body(), 200)
    problem(operator.post("purge/apply", {"plan": plan, "operation_id": "p-2"}), 409,
            "retention_plan_stale")  # fmt: skip
    operator.get(f"executions/{execution['id']}")
    # Each refusal is audited (contract §2.5.11): REJECTED with the problem's code.
    rejected = models.RetentionRecord.objects.filter(action="APPLY_PURGE").order_by("id")
    assert [(r.operation_id, r.outcome, r.rejection_code) for r in rejected] == [
        ("p-1", "REJECTED", "retention_plan_stale"),
        ("p-2", "REJECTED", "retention_plan_stale"),
    ]
    assert all(r.deleted_job_instances == 0 for r in rejected)
    # A replay answers the same problem, marked replayed, and records nothing.
    replayed = problem(operator.post("purge/apply", {"plan": plan, "operation_id": "p-2"}), 409,
                       "retention_plan_stale")  # fmt: skip
    assert replayed["replayed"] is True
    assert rejected.count() == 2
    # The audit list shows the refusals.
    listed = operator.get("audit/retention-records?action=APPLY_PURGE&outcome=REJECTED", 200)
    assert [(r["operation_id"], r["outcome"], r["rejection_code"]) for r in listed["results"]] == [
        ("p-2", "REJECTED", "retention_plan_stale"),
        ("p-1", "REJECTED", "retention_plan_stale"),
    ]


def test_apply_input_errors(operator: Runtime, fixed: FixedClock, settings: Any) -> None:
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(hours=1)
    fixed.advance(timedelta(hours=2))
    plan = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)

    def apply(**body: Any) -> Any:
        return operator.post("purge/apply", {"operation_id": "p", **body})

    field_error(apply(plan={**plan, "plan_digest": "xyz"}), "plan", "malformed_purge_plan")
    field_error(apply(plan={"cutoff": CUTOFF}), "plan", "malformed_purge_plan")
    field_error(apply(plan={**plan, "statuses": ["STARTED"]}), "plan", "non_terminal_status")
    field_error(apply(plan=[plan]), "plan", "not_an_object")
    field_error(apply(plan=plan, reason_code="scheduled"), "reason_code", "invalid_characters")
    field_error(operator.post("purge/apply", {"plan": plan}), "operation_id", "required")
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(0)):
        young = operator.post("purge/survey", {"ended_before": "2026-01-01T01:30:00Z"}, 200)
    # The minimum age is checked again at apply (here: the setting went back to 1 h).
    field_error(apply(plan=young), "plan", "age_bound_too_small")


def test_an_operator_replay_after_the_purge_answers_the_recorded_outcome(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = rt.started("import_job", run="replayed")
    stop = {"expected_version": execution["version"], "operation_id": "stop-before-purge"}
    first = operator.post(f"executions/{execution['id']}/stop", stop, 200)
    rt.move(first["execution"], "FAILED")
    fixed.advance(timedelta(hours=2))
    plan = operator.post("purge/survey", {"ended_before": CUTOFF}, 200)
    operator.post("purge/apply", {"plan": plan, "operation_id": "purge-1"}, 200)
    assert not models.JobExecution.objects.filter(pk=execution["id"]).exists()

    again = operator.post(f"executions/{execution['id']}/stop", stop, 200)

    assert (again["outcome"], again["replayed"], again["changed"]) == ("REPLAYED", True, True)
    assert again["record"] == first["record"]
    assert again["execution"] is None  # purged: the audit row still answers
