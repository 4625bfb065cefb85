"""Remote partition claiming through the API (issue 43, contract §2.4.6): a claim
assigns the next partition in key byte order to a new worker step owned by the
claimant's own token; that worker's writes carry its token (the manager's and
any other are refused); nothing to claim is a 200 answer with its reason."""

from __future__ import annotations

from typing import Any

from oxide_batch import models
from tests.api.support import PARTITION_KEYS, STEP_KEYS, Runtime, field_error, problem

MANAGER = "a1" * 16
WORKER_1 = "c3" * 16
WORKER_2 = "d4" * 16
CONTEXT = {"schema": "range", "schema_version": 1, "payload": {"from": 0}}
CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 5}}
IDENTITY = {"host": "worker-7", "pid": 4242, "name": "w7", "client": "oxide-batch test"}


def managed(rt: Runtime, keys: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A STARTED execution claimed with ``MANAGER``, a STARTED parent step with
    a plan of ``keys``."""
    _, execution = rt.launch()
    execution = rt.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": MANAGER},
        200,
    )
    execution = rt.move(execution, "STARTED", owner_token=MANAGER)
    parent = rt.post(
        f"executions/{execution['id']}/steps",
        {"step_name": "fan", "owner_token": MANAGER},
        201,
    )
    parent = rt.post(
        f"steps/{parent['id']}/transition",
        {"expected_version": parent["version"], "status": "STARTED", "owner_token": MANAGER},
        200,
    )
    rt.post(
        f"steps/{parent['id']}/partitions",
        {"entries": [{"key": key, "context": CONTEXT} for key in keys], "owner_token": MANAGER},
        201,
    )
    return execution, parent


def claim(rt: Runtime, parent: dict[str, Any], token: str, **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = rt.post(
        f"steps/{parent['id']}/partitions/claim", {"owner_token": token, **extra}, 200
    )
    return answer


def chunk(rt: Runtime, step: dict[str, Any], token: str, **extra: Any) -> Any:
    return rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": step["version"], "counts": {"written": 2}, "owner_token": token,
         **extra},
    )  # fmt: skip


def test_claims_go_in_key_order_to_new_worker_steps_owned_by_the_claimant(rt: Runtime) -> None:
    execution, parent = managed(rt, ["b", "a", "c"])
    first = claim(rt, parent, WORKER_1, worker=IDENTITY)
    assert first["claimed"] is True
    assert set(first) == {"claimed", "partition", "worker_step", "checkpoint", "context",
                          "lease", "control"}  # fmt: skip
    assert set(first["partition"]) == PARTITION_KEYS | {"context"}
    assert first["partition"]["key"] == "a"
    assert first["partition"]["status"] == "STARTED"
    assert first["partition"]["retries"] == 0
    assert first["partition"]["context"] == CONTEXT
    worker = first["worker_step"]
    assert set(worker) == STEP_KEYS
    assert worker["step_name"] == "fan:2"  # the ordinal of key "a"
    assert worker["status"] == "STARTED"
    assert worker["job_execution_id"] == execution["id"]
    assert worker["worker"]["host"] == "worker-7"
    assert worker["worker"]["pid"] == 4242
    assert first["partition"]["worker_step_execution_id"] == worker["id"]
    assert first["checkpoint"] is None
    assert first["context"] is None
    assert first["lease"]["ttl_seconds"] == 60
    assert first["control"] == {"stop_requested": False, "owner_matches": True, "fenced": False}
    row = models.StepExecution.objects.get(pk=worker["id"])
    assert row.owner_token is not None
    assert bytes(row.owner_token) == bytes.fromhex(WORKER_1)
    assert row.claimed_partition_id == first["partition"]["id"]
    second = claim(rt, parent, WORKER_2)
    assert second["partition"]["key"] == "b"
    third = claim(rt, parent, WORKER_2)
    assert third["partition"]["key"] == "c"
    # Every partition has a live worker: ask again later.
    waiting = claim(rt, parent, WORKER_2)
    assert waiting["claimed"] is False
    assert waiting["reason"] == "all_assigned"
    assert waiting["step"]["id"] == parent["id"]
    assert set(waiting) == {"claimed", "reason", "step", "control"}


def test_worker_writes_carry_its_own_token(rt: Runtime) -> None:
    _, parent = managed(rt, ["a"])
    claimed = claim(rt, parent, WORKER_1)
    worker = claimed["worker_step"]
    # The manager's token, or another worker's, is not this worker's: refused.
    problem(chunk(rt, worker, MANAGER), 409, "execution_owned")
    problem(chunk(rt, worker, WORKER_2), 409, "execution_owned")
    response = chunk(rt, worker, WORKER_1, checkpoint=CHECKPOINT)
    assert response.status_code == 200, response.content
    worker = response.json()
    assert worker["control"]["owner_matches"] is True
    worker = rt.post(
        f"steps/{worker['id']}/transition",
        {"expected_version": worker["version"], "status": "COMPLETED", "owner_token": WORKER_1},
        200,
    )
    partition = claimed["partition"]
    body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
    problem(
        rt.post(f"partitions/{partition['id']}/complete", {**body, "owner_token": MANAGER}),
        409,
        "execution_owned",
    )
    done = rt.post(f"partitions/{partition['id']}/complete", {**body, "owner_token": WORKER_1}, 200)
    assert done["status"] == "COMPLETED"
    assert done["counts"]["written"] == 2
    assert done["control"]["owner_matches"] is True
    # The manager's one read per interval says it may aggregate.
    assert rt.get(f"steps/{parent['id']}/partitions")["summary"] == {
        "by_status": {"COMPLETED": 1}, "claimable": 0, "running": 0, "settled": True,
    }  # fmt: skip
    # Nothing left to run.
    finished = claim(rt, parent, WORKER_2)
    assert finished["claimed"] is False
    assert finished["reason"] == "finished"


def test_a_failed_partition_is_claimed_again_and_resumes_from_its_checkpoint(
    rt: Runtime,
) -> None:
    _, parent = managed(rt, ["a"])
    claimed = claim(rt, parent, WORKER_1)
    worker = chunk(rt, claimed["worker_step"], WORKER_1, checkpoint=CHECKPOINT).json()
    worker = rt.post(
        f"steps/{worker['id']}/transition",
        {"expected_version": worker["version"], "status": "FAILED", "owner_token": WORKER_1,
         "failure": {"category": "USER_COMPONENT", "failure_id": 1}},
        200,
    )  # fmt: skip
    partition = claimed["partition"]
    failed = rt.post(
        f"partitions/{partition['id']}/complete",
        {"expected_version": partition["version"], "worker_step_execution_id": worker["id"],
         "owner_token": WORKER_1},
        200,
    )  # fmt: skip
    assert failed["status"] == "FAILED"
    # Not settled: the failed partition has retries left.
    assert rt.get(f"steps/{parent['id']}/partitions")["summary"] == {
        "by_status": {"FAILED": 1}, "claimable": 1, "running": 0, "settled": False,
    }  # fmt: skip
    again = claim(rt, parent, WORKER_2)
    assert again["claimed"] is True
    assert again["partition"]["retries"] == 1
    assert again["worker_step"]["step_name"] == "fan:1#2"
    assert again["checkpoint"] == CHECKPOINT
    assert again["worker_step"]["counts"]["written"] == 2  # carried as a restart carries them


def test_stop_request_and_parent_states(rt: Runtime, operator: Runtime) -> None:
    execution, parent = managed(rt, ["a", "b"])
    claimed = claim(rt, parent, WORKER_1)
    current = rt.get(f"executions/{execution['id']}")
    operator.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": current["version"], "operation_id": "stop-1"},
        200,
    )
    stopping = claim(rt, parent, WORKER_2)
    assert stopping == {**stopping, "claimed": False, "reason": "stopping"}
    assert stopping["control"]["stop_requested"] is True
    # The running worker hears the stop at its next chunk boundary.
    answer = chunk(rt, claimed["worker_step"], WORKER_1).json()
    assert answer["control"]["stop_requested"] is True


def test_claim_errors(rt: Runtime) -> None:
    execution, parent = managed(rt, ["a"])
    field_error(rt.post(f"steps/{parent['id']}/partitions/claim", {}), "owner_token")
    field_error(
        rt.post(f"steps/{parent['id']}/partitions/claim", {"owner_token": "xyz"}), "owner_token"
    )
    field_error(
        rt.post(
            f"steps/{parent['id']}/partitions/claim",
            {"owner_token": WORKER_1, "worker": {"pid": 0}},
        ),
        "worker.pid",
    )
    problem(
        rt.post("steps/987654/partitions/claim", {"owner_token": WORKER_1}),
        404,
        "step_execution_not_found",
    )
    starting = rt.post(
        f"executions/{execution['id']}/steps", {"step_name": "later", "owner_token": MANAGER}, 201
    )
    problem(
        rt.post(f"steps/{starting['id']}/partitions/claim", {"owner_token": WORKER_1}),
        409,
        "partition_parent_not_active",
    )
