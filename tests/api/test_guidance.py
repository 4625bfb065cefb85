"""Errors that say what to do (contract §4.6): a second launch names the active
attempt's activity, owner, lease and the way out (and the Python client's
exception carries the same); an illegal transition lists where the row may go;
an unknown status lists the valid ones; a missing permission names itself and
the groups that grant it; a chunk on a step that is not STARTED says what comes
first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from oxide_batch.client import RuntimeClient
from oxide_batch.domain.errors import ExecutionAlreadyActive
from oxide_batch.repository import FixedClock
from oxide_batch.roles import (
    OPERATOR,
    OPERATOR_PERMISSIONS,
    RUN_BATCH,
    RUNTIME,
    VIEW_BATCH,
    VIEW_BATCH_PAYLOAD,
    VIEWER,
)
from tests.api.support import FAILURE, Runtime, field_error, problem, url
from tests.api.test_permissions import ENDPOINTS, HOLDERS
from tests.helpers import api_token
from tests.live import api_base_url

User = get_user_model()

OWNER_TOKEN = "d4" * 16
STATUSES = "STARTING, STARTED, STOPPING, STOPPED, FAILED, COMPLETED, ABANDONED, UNKNOWN"

# ------------------------------------------------------- execution_already_active


def claimed_and_started(rt: Runtime, execution: dict[str, Any]) -> dict[str, Any]:
    rt.post(
        f"executions/{execution['id']}/claim",
        {"expected_version": execution["version"], "owner_token": OWNER_TOKEN},
        200,
    )
    return rt.move(execution, "STARTED")


@dataclass(frozen=True)
class Active:
    """A state of the attempt that blocks a second launch, reached from a new
    STARTING attempt made at EPOCH; what the refusal must say about it."""

    name: str
    reach: Callable[[Runtime, dict[str, Any], FixedClock], dict[str, Any]]
    status: str
    owner_recorded: bool
    lease_expires_at: str | None
    next_step: tuple[str, ...]  # fragments, ``{id}`` the active attempt's id


def unclaimed(rt: Runtime, execution: dict[str, Any], clock: FixedClock) -> dict[str, Any]:
    clock.advance(timedelta(minutes=3))
    return execution


def lease_running(rt: Runtime, execution: dict[str, Any], clock: FixedClock) -> dict[str, Any]:
    started = claimed_and_started(rt, execution)
    clock.advance(timedelta(seconds=20))
    return started


def lease_expired(rt: Runtime, execution: dict[str, Any], clock: FixedClock) -> dict[str, Any]:
    started = claimed_and_started(rt, execution)
    clock.advance(timedelta(minutes=2))
    return started


def unknown_commit(rt: Runtime, execution: dict[str, Any], clock: FixedClock) -> dict[str, Any]:
    unknown = rt.move(
        claimed_and_started(rt, execution),
        "UNKNOWN",
        failure={"category": "UNKNOWN_COMMIT", "failure_id": 41},
    )
    clock.advance(timedelta(minutes=2))
    return unknown


ACTIVE = [
    Active(
        "unclaimed",
        unclaimed,
        "STARTING",
        False,
        None,
        (
            "no owner is recorded, so no watchdog acts on it",
            "inactive until 2026-01-01T00:15:00.000Z",
            "manage.py batch_recover {id} --force",
        ),
    ),
    Active(
        "claimed, lease running",
        lease_running,
        "STARTED",
        True,
        "2026-01-01T00:01:00.000Z",
        (
            "wait for it to finish",
            "the watchdog (manage.py batch_watchdog) fails it once the lease expires",
            "manage.py batch_recover {id} --force",
            "manage.py batch_show {id}",
        ),
    ),
    Active(
        "claimed, lease expired",
        lease_expired,
        "STARTED",
        True,
        "2026-01-01T00:01:00.000Z",
        (
            "its owner's lease has expired",
            "the watchdog (manage.py batch_watchdog) fails it on its next pass",
            "manage.py batch_recover {id}",
        ),
    ),
    Active(
        "unknown commit",
        unknown_commit,
        "UNKNOWN",
        True,
        None,  # a lease is held by an active owner, and UNKNOWN is not active
        (
            "no watchdog acts on it",
            "manage.py batch_recover {id} --reason UNKNOWN_EFFECT",
            "manage.py batch_show {id}",
        ),
    ),
]


@pytest.mark.parametrize("active", ACTIVE, ids=[a.name for a in ACTIVE])
def test_a_second_launch_says_what_is_active_and_what_to_do(
    active: Active, rt: Runtime, fixed: FixedClock
) -> None:
    instance, execution = rt.launch()
    blocking = active.reach(rt, execution, fixed)
    body = problem(rt.post(f"instances/{instance['id']}/executions", {}), 409,
                   "execution_already_active")  # fmt: skip
    assert (body["instance_id"], body["execution_id"]) == (instance["id"], execution["id"])
    assert body["batch_status"] == active.status
    assert body["last_activity_at"] == "2026-01-01T00:00:00.000Z"
    assert body["last_activity_at"] == rt.get(f"executions/{execution['id']}")["last_activity_at"]
    assert body["owner_recorded"] is active.owner_recorded
    if active.lease_expires_at is None:
        assert "lease_expires_at" not in body
    else:
        assert body["lease_expires_at"] == active.lease_expires_at
        assert blocking["lease"]["expires_at"] == active.lease_expires_at
    for fragment in active.next_step:
        assert fragment.format(id=execution["id"]) in body["next_step"], body["next_step"]
    # The message says it all too, for a reader of logs.
    assert "last active at 2026-01-01T00:00:00.000Z" in body["detail"]
    assert body["detail"].endswith(body["next_step"])
    if active.lease_expires_at is not None:
        assert f"lease expires at {active.lease_expires_at}" in body["detail"]


def test_the_python_client_raises_the_same_refusal(
    transactional_db: None, live_server: Any
) -> None:
    user = User.objects.create_user("guided-runtime")
    user.groups.add(Group.objects.get(name=RUNTIME))
    token = api_token(user)
    client = RuntimeClient(api_base_url(live_server), token, timeout=10)
    instance, execution = client.launch("guided_job")
    execution = client.claim(execution, execution.version, bytes.fromhex(OWNER_TOKEN))
    client.start(execution)
    with pytest.raises(ExecutionAlreadyActive) as raised:
        client.create_execution(instance.id)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = problem(
        api.post(url(f"instances/{instance.id}/executions"), {}, format="json"),
        409,
        "execution_already_active",
    )
    refusal = raised.value
    assert refusal.details() == {
        "instance_id": body["instance_id"],
        "execution_id": body["execution_id"],
        "status": body["batch_status"],
        "last_activity_at": body["last_activity_at"],
        "owner_recorded": True,
        "lease_expires_at": body["lease_expires_at"],
        "next_step": body["next_step"],
    }
    assert refusal.lease_expires_at is not None
    assert "manage.py batch_watchdog" in (refusal.next_step or "")
    assert str(refusal) == body["detail"]


# ------------------------------------------------------------ illegal_transition


@dataclass(frozen=True)
class Refused:
    """A transition the lifecycle refuses: the row is a job execution or a step,
    in ``path`` of statuses; ``target`` is refused; ``allowed`` what is offered."""

    kind: str
    path: tuple[str, ...]
    target: str
    allowed: list[str]


REFUSED = [
    Refused("execution", (), "COMPLETED", ["STARTED", "STOPPING", "FAILED", "UNKNOWN"]),
    Refused("execution", ("STARTED",), "STARTED",
            ["STOPPING", "STOPPED", "FAILED", "COMPLETED", "UNKNOWN"]),
    Refused("execution", ("STARTED", "STOPPING"), "COMPLETED", ["STOPPED", "FAILED", "UNKNOWN"]),
    Refused("execution", ("STARTED", "COMPLETED"), "FAILED", []),
    # Through the runtime API ABANDONED and leaving UNKNOWN are the operator's.
    Refused("execution", ("STARTED", "FAILED"), "ABANDONED", []),
    Refused("execution", ("STARTED", "UNKNOWN"), "FAILED", []),
    Refused("step", (), "COMPLETED", ["STARTED", "STOPPING", "FAILED", "UNKNOWN"]),
    Refused("step", ("STARTED", "FAILED"), "COMPLETED", ["ABANDONED"]),
    Refused("step", ("STARTED", "UNKNOWN"), "COMPLETED", ["FAILED", "ABANDONED"]),
    Refused("step", ("STARTED", "STOPPING", "STOPPED"), "STOPPING", ["ABANDONED"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "refused", REFUSED, ids=[f"{r.kind} {'>'.join(r.path) or 'new'}>{r.target}" for r in REFUSED]
)
def test_an_illegal_transition_lists_the_allowed_targets(refused: Refused, rt: Runtime) -> None:
    _, execution = rt.launch()
    row = execution
    move: Callable[[dict[str, Any], str], dict[str, Any]] = rt.move
    if refused.kind == "step":
        row, move = rt.step(rt.move(execution, "STARTED")), rt.move_step
    for status in refused.path:
        row = move(row, status)
    path = f"{'steps' if refused.kind == 'step' else 'executions'}/{row['id']}/transition"
    body = {"expected_version": row["version"], "status": refused.target}
    if refused.target == "FAILED":
        body["failure"] = FAILURE
    found = problem(rt.post(path, body), 409, "illegal_transition")
    current = refused.path[-1] if refused.path else "STARTING"
    assert (found["from_status"], found["to_status"]) == (current, refused.target)
    assert found["allowed"] == refused.allowed
    if refused.allowed:
        assert found["detail"].endswith(
            f"from {current} it may move to {', '.join(refused.allowed)}"
        )
    else:
        assert found["detail"].endswith(f"{current} allows no further transition")


# ------------------------------------------------------------- valid values


@pytest.mark.parametrize(
    ("target", "body", "field", "valid"),
    [
        ("execution", {"status": "DONE"}, "status", STATUSES),
        ("step", {"status": "started"}, "status", STATUSES),
        (
            "step",
            {"status": "FAILED", "failure": {"category": "OOPS", "failure_id": 1}},
            "failure.category",
            "USER_COMPONENT",
        ),
    ],
)
def test_an_unknown_value_lists_the_valid_ones(
    target: str, body: dict[str, Any], field: str, valid: str, rt: Runtime
) -> None:
    execution = rt.started()
    row = execution if target == "execution" else rt.started_step(execution)
    path = f"{target}s/{row['id']}/transition"
    entry = field_error(rt.post(path, {"expected_version": row["version"], **body}), field,
                        "invalid_choice")  # fmt: skip
    assert "is not a valid choice; valid values: " in entry["message"]
    assert valid in entry["message"]


# ------------------------------------------------------------ the permission


GROUPS = {
    VIEW_BATCH: ["batch-viewer", "batch-runtime", "batch-operator"],
    RUN_BATCH: ["batch-runtime"],
    VIEW_BATCH_PAYLOAD: ["batch-runtime", "batch-operator"],
    **{action: ["batch-operator"] for action in OPERATOR_PERMISSIONS},
}
GROUP_OF = {"viewer": VIEWER, "runtime": RUNTIME, "operator": OPERATOR}
MISSING = [
    (role, method, path, permission)
    for role in ("nobody", "viewer", "runtime", "operator")
    for method, path, permission in ENDPOINTS
    if permission in GROUPS and role not in HOLDERS[permission]
]


@pytest.mark.parametrize(
    ("role", "method", "path", "permission"),
    MISSING,
    ids=[f"{role} {method} {path}" for role, method, path, _ in MISSING],
)
def test_a_missing_permission_names_itself_and_the_groups(
    role: str, method: str, path: str, permission: str, client_for: Callable[[str], APIClient]
) -> None:
    client = client_for(role)
    if method == "GET":
        response = client.get(url(path))
    else:
        response = getattr(client, method.lower())(url(path), {}, format="json")
    body = problem(response, 403, "permission_denied")
    assert body["permission"] == f"oxide_batch.{permission}"
    assert body["groups"] == GROUPS[permission]
    assert f"the permission oxide_batch.{permission}" in body["detail"]
    assert " or ".join(GROUPS[permission]) in body["detail"]


def test_the_runtime_and_the_viewer_are_told_which_group_they_lack(
    client_for: Callable[[str], APIClient],
) -> None:
    """The two the brief names: a runtime recovering, a viewer launching."""
    recover = problem(client_for("runtime").post(url("executions/5/recover"), {}, format="json"),
                      403, "permission_denied")  # fmt: skip
    assert (recover["permission"], recover["groups"]) == (
        "oxide_batch.recover_execution",
        ["batch-operator"],
    )
    launch = problem(client_for("viewer").post(url("instances"), {}, format="json"), 403,
                     "permission_denied")  # fmt: skip
    assert (launch["permission"], launch["groups"]) == ("oxide_batch.run_batch", ["batch-runtime"])


# ------------------------------------------------------------ a chunk too early


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ((), "move the step to STARTED first"),
        (("STARTED", "STOPPING"), "the step is stopping: end it STOPPED"),
        (("STARTED", "COMPLETED"), "the step ended COMPLETED and takes no more chunks"),
    ],
)
def test_a_chunk_on_a_step_that_is_not_started_says_what_comes_first(
    path: tuple[str, ...], hint: str, rt: Runtime
) -> None:
    step = rt.step(rt.started())
    for status in path:
        step = rt.move_step(step, status)
    body = problem(
        rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": step["version"]}),
        409,
        "invalid_state",
    )
    assert hint in body["detail"]
    assert hint in body["hint"]
    assert body["batch_status"] == (path[-1] if path else "STARTING")
    assert rt.get(f"steps/{step['id']}") == step  # nothing written
