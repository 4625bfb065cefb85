"""Only the claimant writes (contract §2.5.2): once runtime user A claimed an execution,
every runtime write to it or anything under it (steps, chunks, partitions,
flow decisions) by another runtime user B is 409 ``execution_owned`` with
``other_user: true`` and writes nothing, whatever B's token or header; A's own
writes go on, through ``Token`` or ``Bearer``. An unclaimed execution takes
any runtime user's writes; B's ``control`` observes without matching or
stopping; operators are bound by none of it; a recovered owner's observation
is refused (``invalid_state`` naming the decision) and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.repository import FixedClock
from oxide_batch.roles import RUNTIME
from tests.api.support import Runtime, problem
from tests.api.test_flow import FLOW, decision
from tests.helpers import api_token

User = get_user_model()

# Owner token values (16 bytes as hex): A's, and another runtime process's.
TOKEN_A = "a1" * 16
TOKEN_B = "b2" * 16
CHUNK = {"read": 5, "processed": 5, "written": 5, "filtered": 0, "committed": 1,
         "rolled_back": 0}  # fmt: skip
CHECKPOINT = {"schema": "reader.offset", "schema_version": 1, "payload": {"offset": 5}}
KEYWORDS = ("Token", "Bearer")


def database_rows() -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of the app, in key order: what "nothing written"
    is compared against (versions, instants, counts, audit rows and tokens alike)."""
    return {
        model._meta.label: list(model._default_manager.order_by("pk").values())
        for model in apps.get_app_config("oxide_batch").get_models()
    }


def runtime_token(username: str) -> str:
    """An API token of a new user of the ``batch-runtime`` group."""
    user = User.objects.create_user(username)
    user.groups.add(Group.objects.get(name=RUNTIME))
    return api_token(user)


def runtime_for(token: str, keyword: str = "Token") -> Runtime:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token}")
    return Runtime(client)


@pytest.fixture
def token_a(db: None) -> str:
    return runtime_token("runtime-a")


@pytest.fixture
def token_b(db: None) -> str:
    return runtime_token("runtime-b")


@pytest.fixture
def alice(token_a: str) -> Runtime:
    """Runtime user A (``Token`` header): the claimant."""
    return runtime_for(token_a)


@pytest.fixture
def bob(token_b: str) -> Runtime:
    """Runtime user B (``Token`` header): another user of the same group."""
    return runtime_for(token_b)


def claim(runtime: Runtime, execution: dict[str, Any], token: str = TOKEN_A) -> dict[str, Any]:
    result: dict[str, Any] = runtime.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": token},
        200,
    )
    return result


def execution_of(
    a: Runtime, claimed: bool, *, job: str = "owned_job", starting: bool = False
) -> dict[str, Any]:
    """A new attempt made by A: claimed by A (owner token ``TOKEN_A``) or not,
    then STARTED unless ``starting``."""
    _, execution = a.launch(job)
    if claimed:
        execution = claim(a, execution)
    return execution if starting else a.move(execution, "STARTED")


# ------------------------------------------------------------- the write table


@dataclass(frozen=True)
class Case:
    """One runtime write, ready to send: to ``path`` with ``body``, under job
    execution ``execution_id``."""

    path: str
    body: dict[str, Any]
    execution_id: int


def execution_transition(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    body = {"expected_version": execution["version"], "status": "COMPLETED"}
    return Case(f"executions/{execution['id']}/transition", body, execution["id"])


def execution_exit_status(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    body = {"expected_version": execution["version"], "exit_code": "DONE"}
    return Case(f"executions/{execution['id']}/exit-status", body, execution["id"])


def claim_with(token: str) -> Callable[[Runtime, bool], Case]:
    def prepare(a: Runtime, claimed: bool) -> Case:
        execution = execution_of(a, claimed, starting=True)  # a claim needs STARTING
        body = {"expected_version": execution["version"], "owner_token": token}
        return Case(f"executions/{execution['id']}/claim", body, execution["id"])

    return prepare


def step_create(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    return Case(f"executions/{execution['id']}/steps", {"step_name": "late"}, execution["id"])


def flow_step_create(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    body = {"step_name": "late", "node_id": "late-node", "start_limit": 2}
    return Case(f"executions/{execution['id']}/steps", body, execution["id"])


def step_transition(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    step = a.step(execution, "load")
    body = {"expected_version": step["version"], "status": "STARTED"}
    return Case(f"steps/{step['id']}/transition", body, execution["id"])


def step_exit_status(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    step = a.started_step(execution)
    body = {"expected_version": step["version"], "exit_code": "LOADED"}
    return Case(f"steps/{step['id']}/exit-status", body, execution["id"])


def chunk_commit(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    step = a.started_step(execution)
    body = {"expected_version": step["version"], "counts": CHUNK, "checkpoint": CHECKPOINT}
    return Case(f"steps/{step['id']}/checkpoint", body, execution["id"])


def partition_plan(a: Runtime, claimed: bool) -> Case:
    execution = execution_of(a, claimed)
    parent = a.started_step(execution, "parent")
    body = {"entries": [{"key": "east"}, {"key": "west"}]}
    return Case(f"steps/{parent['id']}/partitions", body, execution["id"])


def planned(
    a: Runtime, claimed: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A STARTED parent step with a one-partition plan (committed) and a STARTED
    worker step: (execution, parent, partition, worker)."""
    execution = execution_of(a, claimed)
    parent = a.started_step(execution, "parent")
    plan = a.post(f"steps/{parent['id']}/partitions", {"entries": [{"key": "east"}]}, 201)
    worker = a.started_step(execution, "worker")
    return execution, parent, plan["partitions"][0], worker


def partition_assign(a: Runtime, claimed: bool) -> Case:
    execution, _, partition, worker = planned(a, claimed)
    body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
    return Case(f"partitions/{partition['id']}/assign", body, execution["id"])


def assigned_and_done(
    a: Runtime, claimed: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """As :func:`planned`, the partition assigned and its worker COMPLETED."""
    execution, parent, partition, worker = planned(a, claimed)
    partition = a.post(
        f"partitions/{partition['id']}/assign",
        {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]},
        200,
    )
    return execution, parent, partition, a.move_step(worker, "COMPLETED")


def partition_complete(a: Runtime, claimed: bool) -> Case:
    execution, _, partition, worker = assigned_and_done(a, claimed)
    body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
    return Case(f"partitions/{partition['id']}/complete", body, execution["id"])


def aggregate(a: Runtime, claimed: bool) -> Case:
    execution, parent, partition, worker = assigned_and_done(a, claimed)
    a.post(
        f"partitions/{partition['id']}/complete",
        {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]},
        200,
    )
    body = {"expected_version": parent["version"]}
    return Case(f"steps/{parent['id']}/aggregate", body, execution["id"])


def partition_restart(a: Runtime, claimed: bool) -> Case:
    """A FAILED first attempt left a plan; the second attempt (claimed or not)
    carries it into its own step of the same node."""
    instance, first = a.launch("restart_job")
    first = a.move(first, "STARTED")
    parent = a.started_step(first, "parent")
    a.post(f"steps/{parent['id']}/partitions", {"entries": [{"key": "a"}, {"key": "b"}]}, 201)
    a.move_step(parent, "FAILED")
    a.move(a.get(f"executions/{first['id']}"), "FAILED")
    second = a.post(f"instances/{instance['id']}/executions", {}, 201)
    if claimed:
        second = claim(a, second)
    second = a.move(second, "STARTED")
    target = a.started_step(second, "parent")
    body = {"source_step_execution_id": parent["id"]}
    return Case(f"steps/{target['id']}/partitions/restart", body, second["id"])


def flow_decision(a: Runtime, claimed: bool) -> Case:
    definition = a.post(
        "definitions", {"job_name": "flow_job", "revision": "v1", "manifest": FLOW}, 201
    )
    instance = a.post("instances", {"job_name": "flow_job"}, 201)
    execution = a.post(
        f"instances/{instance['id']}/executions", {"definition_digest": definition["digest"]}, 201
    )
    if claimed:
        execution = claim(a, execution)
    execution = a.move(execution, "STARTED")
    step = a.step(execution, "load")
    body = decision(step, definition["digest"])
    return Case(f"executions/{execution['id']}/flow-decisions", body, execution["id"])


@dataclass(frozen=True)
class Write:
    """A runtime write path: how to reach it, and what the claimant (or anyone,
    unclaimed) is answered."""

    name: str
    prepare: Callable[[Runtime, bool], Case]
    status: int


WRITES = [
    Write("execution transition", execution_transition, 200),
    Write("execution exit-status", execution_exit_status, 200),
    Write("claim with the claimant's token value", claim_with(TOKEN_A), 200),
    Write("step create", step_create, 201),
    Write("flow step create", flow_step_create, 201),
    Write("step transition", step_transition, 200),
    Write("step exit-status", step_exit_status, 200),
    Write("chunk commit", chunk_commit, 200),
    Write("partition plan create", partition_plan, 201),
    Write("partition restart carry", partition_restart, 201),
    Write("partition assign", partition_assign, 200),
    Write("partition complete", partition_complete, 200),
    Write("aggregate", aggregate, 200),
    Write("flow decision", flow_decision, 201),
]
# Every write, and a claim with another owner token (which an unclaimed
# execution accepts from anyone, and a claimed one refuses even its claimant).
ALL_WRITES = [*WRITES, Write("claim with another token value", claim_with(TOKEN_B), 200)]


def owned_refusal(response: Any, execution_id: int) -> dict[str, Any]:
    body = problem(response, 409, "execution_owned")
    assert body["id"] == execution_id
    assert body["other_user"] is True
    assert "claimed by another runtime user" in body["detail"]
    return body


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize("write", ALL_WRITES, ids=[w.name for w in ALL_WRITES])
def test_another_runtime_user_writes_nothing_to_a_claimed_execution(
    write: Write, keyword: str, alice: Runtime, token_b: str
) -> None:
    case = write.prepare(alice, True)
    before = database_rows()
    owned_refusal(runtime_for(token_b, keyword).post(case.path, case.body), case.execution_id)
    assert database_rows() == before


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize("write", WRITES, ids=[w.name for w in WRITES])
def test_the_claimants_same_write_is_accepted(
    write: Write, keyword: str, alice: Runtime, token_a: str, token_b: str
) -> None:
    case = write.prepare(alice, True)
    problem(runtime_for(token_b).post(case.path, case.body), 409, "execution_owned")
    runtime_for(token_a, keyword).post(case.path, case.body, write.status)


def test_even_the_claimant_may_not_claim_with_another_token(alice: Runtime, bob: Runtime) -> None:
    """The claimant's own claim with another owner token is the older refusal
    (another process owns it): ``execution_owned`` without ``other_user``."""
    case = claim_with(TOKEN_B)(alice, True)
    before = database_rows()
    body = problem(alice.post(case.path, case.body), 409, "execution_owned")
    assert "other_user" not in body
    assert body["detail"] == f"job execution {case.execution_id} is owned by another process"
    owned_refusal(bob.post(case.path, case.body), case.execution_id)
    assert database_rows() == before


@pytest.mark.parametrize("write", ALL_WRITES, ids=[w.name for w in ALL_WRITES])
def test_an_unclaimed_execution_takes_any_runtime_users_writes(
    write: Write, alice: Runtime, bob: Runtime
) -> None:
    case = write.prepare(alice, False)
    assert models.JobExecution.objects.get(pk=case.execution_id).owner_user_id is None
    bob.post(case.path, case.body, write.status)


def test_the_stranger_is_refused_before_any_rule(alice: Runtime, bob: Runtime) -> None:
    """The claimant is checked first: a stranger's stale, illegal or misplaced
    write is ``execution_owned`` too, never the rule it would break."""
    execution = execution_of(alice, True)
    step = alice.step(execution, "load")  # STARTING: takes no chunk
    before = database_rows()
    refused = [
        (f"executions/{execution['id']}/transition", {"expected_version": 99, "status": "FAILED"}),
        (f"executions/{execution['id']}/transition",
         {"expected_version": execution["version"], "status": "STARTING"}),
        (f"executions/{execution['id']}/claim", {"expected_version": 99, "owner_token": TOKEN_A}),
        (f"executions/{execution['id']}/steps", {"step_name": "load"}),  # a repeated name
        (f"steps/{step['id']}/checkpoint", {"expected_version": step["version"]}),
        (f"steps/{step['id']}/aggregate", {"expected_version": 7}),
    ]  # fmt: skip
    for path, body in refused:
        owned_refusal(bob.post(path, body), execution["id"])
    assert database_rows() == before


def test_the_claimant_is_the_user_not_the_token(alice: Runtime, bob: Runtime) -> None:
    """Another API token of the claimant's user writes as the claimant; the
    owner token value alone gives another user nothing."""
    execution = execution_of(alice, True)
    second = runtime_for(api_token(User.objects.get(username="runtime-a"), name="second"))
    step = second.step(execution, "load")
    second.move_step(step, "STARTED")
    owned_refusal(bob.post(f"executions/{execution['id']}/steps", {"step_name": "b"}),
                  execution["id"])  # fmt: skip


def test_the_rule_follows_the_execution_from_its_claim(alice: Runtime, bob: Runtime) -> None:
    """Before the claim B may write (its step is created); from the claim on,
    everything under the execution is A's, B's own step included."""
    _, execution = alice.launch()
    step = bob.step(execution, "b-step")
    claim(alice, execution)
    row = models.JobExecution.objects.get(pk=execution["id"])
    assert row.owner_user_id == User.objects.get(username="runtime-a").pk
    body = {"expected_version": step["version"], "status": "STARTED"}
    owned_refusal(bob.post(f"steps/{step['id']}/transition", body), execution["id"])
    started = alice.post(f"steps/{step['id']}/transition", body, 200)
    assert started["status"] == "STARTED"


# ----------------------------------------------------------------- observation


@pytest.fixture
def operator_rt(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("operator"))


def test_a_strangers_control_neither_matches_nor_stops(
    alice: Runtime, bob: Runtime, operator_rt: Runtime, fixed: FixedClock
) -> None:
    execution = execution_of(alice, True)
    operator_rt.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": execution["version"], "operation_id": "stop-1"},
        200,
    )
    fixed.advance(timedelta(seconds=5))
    path = f"executions/{execution['id']}/control"
    observed_before = models.JobExecution.objects.get(pk=execution["id"]).last_observed_at
    for token in (TOKEN_A, TOKEN_B):  # the owner token's value gives B nothing
        observed = bob.post(path, {"owner_token": token}, 200)
        assert (observed["owner_matches"], observed["stop_requested"]) == (False, True)
        assert observed["execution"]["status"] == "STARTED"
        assert observed["execution"]["version"] == execution["version"]
    row = models.JobExecution.objects.get(pk=execution["id"])
    assert (row.status, row.version) == ("STARTED", execution["version"])
    # Another user's observation is not the owner's activity (contract §2.5.3) and writes
    # nothing (contract §2.5.2): the evidence an operator recovers on stays as it was.
    assert row.last_activity_at == fixed.now() - timedelta(seconds=5)
    assert row.last_observed_at == observed_before
    owner = alice.post(path, {"owner_token": TOKEN_A}, 200)
    assert (owner["owner_matches"], owner["stop_requested"]) == (True, True)
    assert owner["execution"]["status"] == "STOPPING"
    assert owner["execution"]["version"] == execution["version"] + 1


def test_operators_are_bound_by_no_claim(
    alice: Runtime, operator_rt: Runtime, fixed: FixedClock
) -> None:
    """Stop, abandon and recover act for an operator on an execution another
    user claimed (the claimant's stop observation and STOPPED in between)."""
    execution = execution_of(alice, True)
    stopped = operator_rt.post(
        f"executions/{execution['id']}/stop",
        {"expected_version": execution["version"], "operation_id": "stop-1"},
        200,
    )
    assert stopped["execution"]["stop_requested"] is True
    stopping = alice.post(f"executions/{execution['id']}/control", {"owner_token": TOKEN_A}, 200)[
        "execution"
    ]
    done = alice.move(stopping, "STOPPED")
    abandoned = operator_rt.post(
        f"executions/{execution['id']}/abandon",
        {"expected_version": done["version"], "reason_code": "GIVE_UP", "operation_id": "ab-1"},
        200,
    )
    assert abandoned["execution"]["status"] == "ABANDONED"
    recovered, _ = recovered_by_operator(alice, operator_rt, fixed, job="other_job")
    assert recovered["status"] == "FAILED"


def recovered_by_operator(
    alice: Runtime, operator_rt: Runtime, fixed: FixedClock, *, job: str = "owned_job"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A's claimed STARTED execution, silent past its lease, recovered
    (MARK_FAILED) by the operator: (the execution, the decision)."""
    execution = execution_of(alice, True, job=job)
    alice.started_step(execution)
    fixed.advance(timedelta(minutes=2))  # the lease (60 s) ran out
    proposal = operator_rt.get(f"executions/{execution['id']}/recovery-proposal")
    assert proposal["eligible"], proposal
    result = operator_rt.post(
        f"executions/{execution['id']}/recover",
        {
            "expected_version": proposal["version"],
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": f"recover-{job}",
        },
        200,
    )
    return result["execution"], result["decision"]


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_a_fenced_owners_observation_is_refused_and_writes_nothing(
    keyword: str, alice: Runtime, token_a: str, operator_rt: Runtime, fixed: FixedClock
) -> None:
    recovered, decision_made = recovered_by_operator(alice, operator_rt, fixed)
    fixed.advance(timedelta(seconds=30))  # a write now would stamp a new instant
    before = database_rows()
    row = models.JobExecution.objects.get(pk=recovered["id"])
    owner = runtime_for(token_a, keyword)
    body = problem(
        owner.post(f"executions/{recovered['id']}/control", {"owner_token": TOKEN_A}),
        409,
        "invalid_state",
    )
    assert (body["id"], body["status"]) == (recovered["id"], 409)
    assert body["batch_status"] == "FAILED"
    assert f"recovery decision {decision_made['id']} resolved it" in body["detail"]
    assert "fenced" in body["detail"]
    assert database_rows() == before
    after = models.JobExecution.objects.get(pk=recovered["id"])
    assert (after.last_observed_at, after.last_activity_at, after.version) == (
        row.last_observed_at,
        row.last_activity_at,
        row.version,
    )
