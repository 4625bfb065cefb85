"""One contract across the API (issue 15 point 3): contract §2.5.3's activity under one
name, ``unresolved_for`` in the commands' syntax, and a partition plan carried
into a restart without naming its source."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, field_error, problem
from tests.api.test_partitions import run_worker, setup_plan


def test_a_chunk_commit_moves_last_activity_at_not_the_executions_updated_at(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = rt.started()
    step = rt.started_step(execution, "load")
    before = rt.get(f"executions/{execution['id']}")
    fixed.advance(timedelta(minutes=5))
    step = rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": step["version"], "counts": {"read": 1}},
        200,
    )
    after = rt.get(f"executions/{execution['id']}")
    # updated_at is the row's last versioned write: a step's chunk does not move it.
    assert after["updated_at"] == before["updated_at"]
    assert after["last_activity_at"] == step["last_activity_at"] == step["updated_at"]
    assert after["last_activity_at"] > before["last_activity_at"]
    # The proposal, the list and the one-execution read say the same, by the same name.
    proposal = operator.get(f"executions/{execution['id']}/recovery-proposal")
    assert proposal["last_activity_at"] == after["last_activity_at"]
    assert "last_active_at" not in proposal
    listed = rt.get("executions")["results"][0]
    assert listed["last_activity_at"] == after["last_activity_at"]


def test_a_stop_request_is_not_activity_an_owner_observation_is(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    token = "ab" * 16
    _, execution = rt.launch()
    execution = rt.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": token},
        200,
    )
    execution = rt.move(execution, "STARTED")
    fixed.advance(timedelta(minutes=1))
    stopped = operator.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": execution["version"], "operation_id": "stop-1"},
        200,
    )["execution"]
    assert stopped["last_activity_at"] == execution["last_activity_at"]
    fixed.advance(timedelta(minutes=1))
    observed = rt.post(f"executions/{execution['id']}/control", {"owner_token": token}, 200)
    assert observed["execution"]["last_activity_at"] == observed["execution"]["last_observed_at"]
    assert observed["execution"]["last_activity_at"] > stopped["last_activity_at"]


SPELLINGS = [("300", "5m"), ("3600", "1h"), ("90", "90s"), ("0", "0s"), ("900", "15m")]


@pytest.mark.parametrize(("seconds", "duration"), SPELLINGS)
def test_unresolved_for_takes_the_commands_duration_syntax_and_seconds(
    rt: Runtime, viewer: Runtime, fixed: FixedClock, seconds: str, duration: str
) -> None:
    stale = rt.started("stale")
    unknown = rt.move(rt.started("unknown"), "UNKNOWN")
    fixed.advance(timedelta(minutes=10))
    fresh = rt.started("fresh")
    fixed.advance(timedelta(seconds=1))  # silent for 601 s, 601 s and 1 s

    def ids(value: str) -> list[int]:
        return [e["id"] for e in viewer.get("executions", unresolved_for=value)["results"]]

    found = set(ids(duration))
    assert ids(seconds) == ids(duration)
    assert unknown["id"] in found  # UNKNOWN is unresolved whatever its age
    # The age is read: each execution is listed exactly when it is old enough.
    assert (stale["id"] in found) is (int(seconds) <= 601)
    assert (fresh["id"] in found) is (int(seconds) <= 1)


def test_restart_partitions_without_a_source_takes_the_step_it_took_over_from(
    rt: Runtime,
) -> None:
    execution, parent, partitions = setup_plan(rt, ["a", "b"])
    run_worker(rt, execution, partitions[0], "worker-a")
    run_worker(rt, execution, partitions[1], "worker-b", "FAILED")
    rt.move_step(parent, "FAILED")
    rt.move(rt.get(f"executions/{execution['id']}"), "FAILED")
    again = rt.move(
        rt.post(f"instances/{execution['job_instance_id']}/executions", {}, 201), "STARTED"
    )
    target = rt.started_step(again, "parent")
    carried = rt.post(f"steps/{target['id']}/partitions/restart", {}, 201)
    statuses = {p["key"]: p["status"] for p in carried["partitions"]}
    assert statuses == {"a": "COMPLETED", "b": "STARTING"}
    # A step no earlier attempt ran has nothing to carry: the same code as a named
    # source without a plan.
    fresh = rt.started_step(again, "brand-new")
    problem(rt.post(f"steps/{fresh['id']}/partitions/restart", {}), 409, "restart_state_not_found")
    problem(rt.post("steps/987654/partitions/restart", {}), 404, "step_execution_not_found")
    field_error(
        rt.post(f"steps/{target['id']}/partitions/restart", {"source_step_execution_id": None}),
        "source_step_execution_id",
    )
