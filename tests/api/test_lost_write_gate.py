"""A lost write waits for a person (issue 38 point 5, contract §2.5.14): the
execution's answer shows the marker; a restart of its instance is refused with
``lost_write_unresolved`` — even once the marked execution is FAILED — until an
operator resolves it (audited, idempotent); then the restart goes ahead."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db.models import F

from oxide_batch import models
from tests.api.support import INSTANT, Runtime, field_error, problem

pytestmark = pytest.mark.django_db
CHUNK = {"read": 10, "processed": 10, "written": 10, "filtered": 0, "committed": 1}
RESOLVE = {"reason_code": "TARGET_CHECKED", "note": "rows 1-10 re-checked in the ledger"}


def lost_write_then_failed(rt: Runtime) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run whose chunk was refused as ``version_ahead`` (the store lost the
    step's last write), then FAILED by its runtime: the instance and the execution."""
    instance, execution = rt.launch()
    execution = rt.move(execution, "STARTED")
    step = rt.started_step(execution)
    models.StepExecution.objects.filter(pk=step["id"]).update(version=F("version") - 1)
    body = {"expected_version": step["version"], "counts": CHUNK}
    problem(rt.post(f"steps/{step['id']}/checkpoint", body), 409, "version_ahead")
    return instance, rt.move(execution, "FAILED")


def restart(rt: Runtime, instance: dict[str, Any]) -> Any:
    return rt.post(f"instances/{instance['id']}/executions", {})


def test_the_execution_answer_shows_the_marker(rt: Runtime, viewer: Runtime) -> None:
    _, failed = lost_write_then_failed(rt)
    shown = viewer.get(f"executions/{failed['id']}")["lost_write"]
    assert set(shown) == {"expected_version", "stored_version", "recorded_at", "resolved_at"}
    assert shown["expected_version"] == shown["stored_version"] + 1
    assert INSTANT.fullmatch(shown["recorded_at"])
    assert shown["resolved_at"] is None
    assert failed["lost_write"] == shown  # the transition's answer says it too
    clean = rt.started(run="clean")
    assert viewer.get(f"executions/{clean['id']}")["lost_write"] is None


def test_a_failed_execution_with_a_lost_write_is_not_restarted_until_resolved(
    rt: Runtime, operator: Runtime
) -> None:
    instance, failed = lost_write_then_failed(rt)
    refused = problem(restart(rt, instance), 409, "lost_write_unresolved")
    assert (refused["instance_id"], refused["execution_id"]) == (instance["id"], failed["id"])
    assert f"executions/{failed['id']}/lost-write/resolve" in refused["detail"]
    assert models.JobExecution.objects.filter(job_instance_id=instance["id"]).count() == 1
    path = f"executions/{failed['id']}/lost-write/resolve"
    resolved = operator.post(path, {**RESOLVE, "operation_id": "lw-1"}, 200)
    assert (resolved["outcome"], resolved["changed"]) == ("APPLIED", True)
    assert resolved["execution"]["status"] == "FAILED"
    assert INSTANT.fullmatch(resolved["execution"]["lost_write"]["resolved_at"])
    again = restart(rt, instance)
    assert again.status_code == 201, again.content


def test_resolving_is_audited_and_idempotent(rt: Runtime, operator: Runtime) -> None:
    _, failed = lost_write_then_failed(rt)
    path = f"executions/{failed['id']}/lost-write/resolve"
    first = operator.post(path, {**RESOLVE, "operation_id": "lw-2"}, 200)
    replay = operator.post(path, {**RESOLVE, "operation_id": "lw-2"}, 200)
    assert (replay["outcome"], replay["changed"]) == ("REPLAYED", True)
    assert replay["record"]["id"] == first["record"]["id"]
    problem(
        operator.post(path, {**RESOLVE, "note": "another note", "operation_id": "lw-2"}),
        409,
        "operation_id_conflict",
    )
    later = operator.post(path, {**RESOLVE, "operation_id": "lw-3"}, 200)
    assert (later["outcome"], later["changed"]) == ("APPLIED", False)
    (record,) = models.OperatorRequest.objects.filter(
        job_execution_id=failed["id"], operation_id="lw-2"
    )
    assert (record.action, record.outcome, record.reason_code, record.changed) == (
        "RESOLVE_LOST_WRITE",
        "APPLIED",
        "TARGET_CHECKED",
        True,
    )
    stored = models.JobExecution.objects.get(pk=failed["id"]).lost_write_resolution
    assert stored is not None
    assert stored["note"] == RESOLVE["note"]
    assert stored["operation_id"] == "lw-2"
    history = LogEntry.objects.filter(object_id=str(failed["id"])).order_by("id").first()
    assert history is not None
    assert RESOLVE["note"] in history.change_message


def test_a_viewer_may_not_resolve_and_bad_input_is_a_400(
    rt: Runtime, viewer: Runtime, operator: Runtime
) -> None:
    _, failed = lost_write_then_failed(rt)
    path = f"executions/{failed['id']}/lost-write/resolve"
    problem(viewer.post(path, {**RESOLVE, "operation_id": "lw-4"}), 403)
    field_error(operator.post(path, {**RESOLVE, "note": " padded", "operation_id": "lw-5"}), "note")
    field_error(operator.post(path, {"note": "x", "operation_id": "lw-6"}), "reason_code")
    problem(operator.post("executions/987654/lost-write/resolve", {**RESOLVE,
            "operation_id": "lw-7"}), 404, "job_execution_not_found")  # fmt: skip
