"""Recovery resolves the orphaned steps and fences the old worker (contract §2.5.6), over
the API on both databases. Before: after MARK_FAILED or ABANDON the STARTED step
stayed STARTED forever and the old worker's chunk commit and step completion were
accepted (200)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, problem

CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 100}}
CHUNK = {"read": 100, "processed": 100, "written": 100, "filtered": 0, "committed": 1,
         "rolled_back": 0}  # fmt: skip


def steps_in_every_state(rt: Runtime, execution: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One step per status a worker can leave behind, and one it finished."""
    done = rt.move_step(rt.started_step(execution, "extract"), "COMPLETED")
    starting = rt.step(execution, "validate")
    started = rt.started_step(execution, "load")
    started = rt.post(
        f"steps/{started['id']}/checkpoint",
        {"expected_version": started["version"], "counts": CHUNK, "checkpoint": CHECKPOINT},
        200,
    )
    # Not the latest step: a latest step in UNKNOWN is the unknown-commit marker.
    unknown = rt.move_step(rt.started_step(execution, "publish"), "UNKNOWN")
    stopping = rt.move_step(rt.started_step(execution, "index"), "STOPPING")
    return {
        "done": done,
        "starting": starting,
        "started": started,
        "stopping": stopping,
        "unknown": unknown,
    }


def recover(operator: Runtime, execution: dict[str, Any], **body: Any) -> dict[str, Any]:
    proposal = operator.get(f"executions/{execution['id']}/recovery-proposal")
    assert proposal["eligible"], proposal
    result: dict[str, Any] = operator.post(
        f"executions/{execution['id']}/recover",
        {
            "expected_version": proposal["version"],
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": "recover-1",
            **body,
        },
        200,
    )
    return result


@pytest.mark.parametrize("disposition", ["MARK_FAILED", "ABANDON"])
def test_recovery_resolves_every_unfinished_step_in_the_same_transaction(
    rt: Runtime, operator: Runtime, fixed: FixedClock, disposition: str
) -> None:
    execution = rt.started()
    steps = steps_in_every_state(rt, execution)
    fixed.advance(timedelta(minutes=16))

    result = recover(operator, execution, disposition=disposition)

    decided_at = result["decision"]["decided_at"]
    unfinished = [steps[name] for name in ("starting", "started", "stopping", "unknown")]
    assert result["decision"]["resolved_step_ids"] == sorted(s["id"] for s in unfinished)
    execution_failure = result["execution"]["failure"]
    for before in unfinished:
        after = rt.get(f"steps/{before['id']}")
        assert after["status"] == "FAILED", before["step_name"]
        assert after["ended_at"] == decided_at
        assert after["version"] == before["version"] + 1
        assert after["counts"] == before["counts"]  # counts and exit code untouched
        assert after["exit_code"] == before["exit_code"]
        # GET steps/{id} adds the failure's detail: a recovery records none (issue 40).
        assert after["failure"].pop("detail") is None
        if disposition == "MARK_FAILED":
            assert after["failure"] == execution_failure
        else:
            assert after["failure"]["category"] == "STALE_RECOVERED"
    assert rt.get(f"steps/{steps['done']['id']}") == steps["done"]
    # The checkpoint survives for the restart to take over.
    state = rt.get(f"steps/{steps['started']['id']}/checkpoint")
    assert state["checkpoint"] == CHECKPOINT
    decision = models.RecoveryDecision.objects.get()
    assert decision.resolved_step_ids == result["decision"]["resolved_step_ids"]
    listed = operator.get("audit/recovery-decisions")["results"]
    assert listed[0]["resolved_step_ids"] == result["decision"]["resolved_step_ids"]


def test_an_unknown_commit_abandoned_resolves_its_steps_as_unknown_commit(
    rt: Runtime, operator: Runtime
) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    execution = rt.move(
        execution, "UNKNOWN", failure={"category": "UNKNOWN_COMMIT", "failure_id": 41}
    )
    recover(operator, execution, disposition="ABANDON", reason_code="UNKNOWN_EFFECT")
    after = rt.get(f"steps/{step['id']}")
    assert (after["status"], after["failure"]["category"]) == ("FAILED", "UNKNOWN_COMMIT")


def test_the_old_worker_is_fenced_after_recovery(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    fixed.advance(timedelta(minutes=16))
    recover(operator, execution)

    def chunk(version: int) -> Any:
        return rt.post(
            f"steps/{step['id']}/checkpoint",
            {"expected_version": version, "counts": CHUNK, "checkpoint": CHECKPOINT},
        )

    def complete(version: int) -> Any:
        return rt.post(
            f"steps/{step['id']}/transition", {"expected_version": version, "status": "COMPLETED"}
        )

    # With the version it last saw, and with the version re-read: always a 409.
    problem(chunk(step["version"]), 409, "stale_version")
    problem(complete(step["version"]), 409, "stale_version")
    fresh = rt.get(f"steps/{step['id']}")["version"]
    problem(chunk(fresh), 409, "invalid_state")
    problem(complete(fresh), 409, "illegal_transition")
    after = rt.get(f"steps/{step['id']}")
    assert (after["status"], after["version"], after["counts"]["read"]) == ("FAILED", fresh, 0)
    # Nor can it start new work under the recovered execution.
    problem(rt.post(f"executions/{execution['id']}/steps", {"step_name": "late"}), 409,
            "invalid_state")  # fmt: skip


def test_every_runtime_write_to_a_recovered_row_is_refused(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    """Beyond chunk commits and completion: exit enrichment of the step and of
    the execution, FAILED → ABANDONED (which the table alone allows a step), a
    flow decision — each a 409 even with the version re-read."""
    execution = rt.started()
    step = rt.started_step(execution)
    fixed.advance(timedelta(minutes=16))
    recovered = recover(operator, execution)["execution"]
    fresh = rt.get(f"steps/{step['id']}")

    problem(rt.post(f"steps/{step['id']}/exit-status",
                    {"expected_version": fresh["version"], "exit_code": "COMPLETED"}), 409,
            "invalid_state")  # fmt: skip
    problem(rt.post(f"steps/{step['id']}/transition",
                    {"expected_version": fresh["version"], "status": "ABANDONED"}), 409,
            "illegal_transition")  # fmt: skip
    problem(rt.post(f"executions/{execution['id']}/exit-status",
                    {"expected_version": recovered["version"], "exit_code": "COMPLETED"}), 409,
            "invalid_state")  # fmt: skip
    assert rt.get(f"steps/{step['id']}") == fresh
    after = rt.get(f"executions/{execution['id']}")
    assert (after["exit_code"], after["version"]) == ("UNKNOWN", recovered["version"])
    # The operator is not fenced: a recovered FAILED execution may be abandoned.
    abandoned = operator.post(
        f"executions/{execution['id']}/abandon",
        {"expected_version": recovered["version"], "reason_code": "GIVE_UP", "operation_id": "ab"},
        200,
    )
    assert abandoned["execution"]["status"] == "ABANDONED"


def test_a_step_finished_by_its_runtime_is_not_fenced(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    """Only what the recovery resolved is fenced: a COMPLETED step of the
    recovered execution keeps its normal rules (its exit code may be enriched)."""
    execution = rt.started()
    done = rt.move_step(rt.started_step(execution, "extract"), "COMPLETED")
    rt.started_step(execution, "load")
    fixed.advance(timedelta(minutes=16))
    recover(operator, execution)
    enriched = rt.post(
        f"steps/{done['id']}/exit-status",
        {"expected_version": done["version"], "exit_code": "NOOP"},
        200,
    )
    assert (enriched["exit_code"], enriched["status"]) == ("NOOP", "COMPLETED")
