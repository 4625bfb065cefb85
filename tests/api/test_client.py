"""The runtime client end to end against a live server (real HTTP, real threads)."""

from __future__ import annotations

import socket

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from oxide_batch.client import ApiError, InvalidRequest, OperatorClient, RuntimeClient
from oxide_batch.domain.errors import (
    CompletedInstance,
    DuplicatePartitionKey,
    ExecutionAlreadyActive,
    FlowStateCorrupt,
    IllegalTransition,
    InvalidState,
    JobExecutionNotFound,
    NameContainsControl,
    StaleVersion,
    Unavailable,
)
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.flow import FlowTarget
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.roles import OPERATOR, RUNTIME, VIEWER
from tests.helpers import api_token
from tests.live import api_base_url

User = get_user_model()

S = BatchStatus


def token_for(group: str) -> str:
    user = User.objects.create_user(f"{group}-client")
    user.groups.add(Group.objects.get(name=group))
    return api_token(user)


@pytest.fixture
def client(transactional_db: None, live_server) -> RuntimeClient:
    return RuntimeClient(api_base_url(live_server), token_for(RUNTIME), timeout=10)


def checkpoint(offset: int) -> StateEnvelope:
    return StateEnvelope("reader.offset", 1, {"offset": offset})


def test_launch_steps_chunks_transitions_completed(client: RuntimeClient) -> None:
    assert "step_partitions" in client.descriptor()["capabilities"]
    instance, execution = client.launch("nightly_import", {"business_date": "2026-07-29"})
    assert execution.status is S.STARTING
    assert execution.attempt == 1
    assert client.instance(instance.id) == instance
    execution = client.start(execution)
    assert execution.status is S.STARTED
    assert execution.started_at is not None
    step = client.create_step(execution, "load")
    step = client.transition_step(step, step.version, S.STARTED)
    for offset in (10, 20, 30):
        step = client.commit_chunk(
            step,
            step.version,
            ExecutionCounts(read=10, written=9, filtered=1, committed=1),
            checkpoint=checkpoint(offset),
        )
    assert step.counts == ExecutionCounts(read=30, written=27, filtered=3, committed=3)
    state = client.checkpoint(step)
    assert state.step == step
    assert state.checkpoint == checkpoint(30)
    assert state.context is None
    step = client.step_exit_status(step, step.version, "LOADED")
    step = client.transition_step(step, step.version, S.COMPLETED)
    execution = client.exit_status(execution, execution.version, "DONE")
    execution = client.transition(execution, execution.version, S.COMPLETED)
    assert execution.status is S.COMPLETED
    assert execution.exit_code == "DONE"
    assert execution.ended_at is not None
    assert client.execution(execution.id) == execution
    assert client.step(step.id) == step
    assert [e.id for e in client.executions(status="COMPLETED")] == [execution.id]

    # The typed errors of the repository, rebuilt from the problems.
    with pytest.raises(StaleVersion) as stale:
        client.commit_chunk(step, 1, {"read": 1})
    assert (stale.value.expected, stale.value.actual) == (1, step.version)
    with pytest.raises(CompletedInstance) as completed:
        client.create_execution(instance.id)
    assert completed.value.id == instance.id
    with pytest.raises(JobExecutionNotFound):
        client.execution(987654)
    with pytest.raises(NameContainsControl) as bad_name:
        client.create_step(execution, "bad\x07name")
    assert bad_name.value.kind == "step name"


def test_restart_partitions_and_flow(client: RuntimeClient) -> None:
    instance, execution = client.launch("regions")
    with pytest.raises(ExecutionAlreadyActive) as active:
        client.create_execution(instance.id)
    assert active.value.status is S.STARTING
    execution = client.start(execution)
    parent = client.create_step(execution, "regions")
    parent = client.transition_step(parent, parent.version, S.STARTED)
    plan = client.plan_partitions(
        parent, ["west", ("east", {"schema": "r", "schema_version": 1, "payload": {}})]
    )
    assert [p.key for p in plan] == ["east", "west"]
    assert plan[0].context is not None
    with pytest.raises(DuplicatePartitionKey):
        client.plan_partitions(
            client.transition_step(client.create_step(execution, "p2"), 0, S.STARTED), ["a", "a"]
        )
    workers = {}
    for partition in plan:
        worker = client.transition_step(
            client.create_step(execution, f"w-{partition.key}"), 0, S.STARTED
        )
        assigned = client.assign_partition(partition, partition.version, worker)
        status = S.COMPLETED if partition.key == "east" else S.FAILED
        failure = FailureSummary(FailureCategory.USER_COMPONENT, 5) if status is S.FAILED else None
        worker = client.transition_step(worker, worker.version, status, failure=failure)
        workers[partition.key] = client.complete_partition(assigned, assigned.version, worker)
    assert workers["east"].status is S.COMPLETED
    assert workers["west"].status is S.FAILED
    parent = client.aggregate(parent, parent.version)
    assert parent.status is S.FAILED
    assert client.aggregate(parent, parent.version - 1) == parent
    with pytest.raises(IllegalTransition):
        client.transition(execution, execution.version, S.ABANDONED)
    execution = client.transition(
        execution,
        execution.version,
        S.FAILED,
        failure=FailureSummary(FailureCategory.USER_COMPONENT, 5),
    )
    again = client.start(client.create_execution(instance.id))
    assert again.attempt == 2
    target = client.transition_step(client.create_step(again, "regions"), 0, S.STARTED)
    carried = client.restart_partitions(target, parent)
    assert {p.key: p.status for p in carried} == {"east": S.COMPLETED, "west": S.STARTING}
    assert client.partitions(target) == carried
    assert client.latest_flow_step(instance.id, "regions") == target
    assert client.latest_flow_step(instance.id, "nothing") is None
    assert client.flow_decisions(again) == []
    assert (
        client.find_reusable_flow_decision(instance.id, "regions", "a" * 64, "b" * 64, "STEP_EXIT")
        is None
    )
    with pytest.raises(FlowStateCorrupt):
        client.append_flow_decision(
            again,
            source_node_id="regions",
            kind="STEP_EXIT",
            observed_outcome="COMPLETED",
            target=FlowTarget(terminal="COMPLETE"),  # type: ignore[arg-type]
            plan_fingerprint="a" * 64,
            input_digest="b" * 64,
            source_step=target,
        )


def test_ownership_and_control(client: RuntimeClient) -> None:
    _, execution = client.launch("owned")
    token = bytes(range(16))
    execution = client.claim(execution, execution.version, token)
    assert execution.owner_recorded is True
    control = client.observe_control(execution, token)
    assert control.owner_matches
    assert not control.stop_requested
    assert control.execution.last_observed_at is not None


def test_auth_and_transport_failures(client: RuntimeClient, live_server) -> None:
    with pytest.raises(ApiError) as denied:
        RuntimeClient(api_base_url(live_server), "nope").descriptor()
    assert (denied.value.status, denied.value.code) == (401, "authentication_failed")
    viewer = RuntimeClient(api_base_url(live_server), token_for(VIEWER))
    with pytest.raises(ApiError) as forbidden:
        viewer.launch("job")
    assert (forbidden.value.status, forbidden.value.code) == (403, "permission_denied")
    with pytest.raises(InvalidRequest) as invalid:
        client._post("instances", {"job_name": 5, "identifying_parameters": 3})
    assert set(invalid.value.errors) == {"job_name", "identifying_parameters"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(Unavailable):
        RuntimeClient(f"http://127.0.0.1:{port}", "t", timeout=2, retry_budget=0).descriptor()


def test_the_operator_client_stops_and_abandons(client: RuntimeClient, live_server) -> None:
    operator = OperatorClient(api_base_url(live_server), token_for(OPERATOR), timeout=10)
    _, execution = client.launch("stoppable")
    execution = client.start(execution)
    stopped = operator.stop(execution, execution.version, operation_id="stop-1")
    assert (stopped.outcome, stopped.changed) == ("APPLIED", True)
    assert stopped.execution is not None
    assert stopped.execution.stop_requested is True
    assert stopped.record["action"] == "STOP"
    with pytest.raises(StaleVersion):
        operator.stop(execution, 0, operation_id="stop-2")
    with pytest.raises(InvalidState) as refused:
        operator.abandon(execution, execution.version, reason_code="X", operation_id="ab-1")
    assert refused.value.status is S.STARTED
    failed = client.transition(
        execution,
        execution.version,
        S.FAILED,
        failure=FailureSummary(FailureCategory.USER_COMPONENT, 5),
    )
    abandoned = operator.abandon(
        failed, failed.version, reason_code="BAD_INPUT", operation_id="ab-2"
    )
    assert abandoned.execution is not None
    assert abandoned.execution.status is S.ABANDONED
    assert operator.execution(execution.id).status is S.ABANDONED
    # A runtime's token is no operator's.
    as_runtime = OperatorClient(api_base_url(live_server), client.token, timeout=10)
    with pytest.raises(ApiError) as forbidden:
        as_runtime.stop(execution, 0, operation_id="stop-3")
    assert (forbidden.value.status, forbidden.value.code) == (403, "permission_denied")
    assert (
        operator.proposal(execution).reason_code,
        operator.proposal(execution).eligible,
    ) == ("recovery_not_allowed", False)


def test_the_client_registers_an_upgrade_edge_once(client: RuntimeClient) -> None:
    """``register_upgrade`` (issue 27: it had no test): new → True, the same edge
    again → False, other content for the same pair → the typed conflict."""
    from oxide_batch.domain.errors import DefinitionUpgradeConflict

    v1 = client.register_definition(
        "upgrade_job", "v1", {"format": 1, "job": "upgrade_job", "steps": ["load"]}
    )
    v2 = client.register_definition(
        "upgrade_job", "v2", {"format": 1, "job": "upgrade_job", "steps": ["load", "post"]}
    )
    args = ("upgrade_job", "v1-to-v2", v1.digest, v2.digest, {"load": "load"})
    assert client.register_upgrade(*args) is True
    assert client.register_upgrade(*args) is False
    with pytest.raises(DefinitionUpgradeConflict):
        client.register_upgrade("upgrade_job", "other", v1.digest, v2.digest, {"load": "load"})
