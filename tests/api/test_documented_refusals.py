"""Every refusal an operation answers is listed in its documented responses:
each refusal below is driven through the API, and the (status, code) pair it
answered must be one the served document lists for that operation — the
exit status of a fenced or finished row, and the refusals of the short forms
(a launch, a step created STARTED, a finishing chunk, a transition with its
exit code, a write carrying another owner token)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, problem, url
from tests.api.test_recovery_fencing import recover

TOKEN = "a1" * 16
OTHER = "b2" * 16
KEY = {"job_name": "import_job", "identifying_parameters": {"run": "2026-07-29"}}
Scenario = Callable[[Runtime, Runtime, FixedClock], tuple[str, Any]]


@pytest.fixture(scope="module")
def document(served_document: dict[str, Any]) -> dict[str, Any]:
    return served_document


def listed(document: dict[str, Any], path: str, status: int) -> set[str]:
    """The codes ``POST {path}`` lists under ``status``."""
    operation = document["paths"][url(path)]["post"]
    response = operation["responses"].get(str(status))
    if response is None:
        return set()
    return set(re.findall(r"`([a-z_]+)`", response["description"]))


def launched(rt: Runtime, token: str = TOKEN) -> dict[str, Any]:
    execution: dict[str, Any] = rt.post("launches", {**KEY, "owner_token": token}, 201)["execution"]
    return execution


def started_step(rt: Runtime, execution: dict[str, Any], name: str = "load") -> dict[str, Any]:
    body = {"step_name": name, "status": "STARTED", "owner_token": TOKEN}
    step: dict[str, Any] = rt.post(f"executions/{execution['id']}/steps", body, 201)
    return step


def fenced(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A launched execution with a STARTED step, recovered (MARK_FAILED) once
    its owner's lease expired: the old worker is fenced."""
    execution = launched(rt)
    step = started_step(rt, execution)
    fixed.advance(timedelta(days=1))
    recover(operator, execution)
    return rt.get(f"executions/{execution['id']}"), rt.get(f"steps/{step['id']}")


def exit_status_of_a_fenced_execution(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution, _ = fenced(rt, operator, fixed)
    body = {"expected_version": execution["version"], "exit_code": "LATE", "owner_token": TOKEN}
    return "executions/{execution_id}/exit-status", rt.post(
        f"executions/{execution['id']}/exit-status", body
    )


def exit_status_of_a_fenced_step(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    _, step = fenced(rt, operator, fixed)
    body = {"expected_version": step["version"], "exit_code": "LATE", "owner_token": TOKEN}
    return "steps/{step_id}/exit-status", rt.post(f"steps/{step['id']}/exit-status", body)


def exit_status_on_a_stale_version(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    body = {"expected_version": execution["version"] - 1, "exit_code": "LATE"}
    return "executions/{execution_id}/exit-status", rt.post(
        f"executions/{execution['id']}/exit-status", body
    )


def exit_status_with_another_token(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    body = {"expected_version": execution["version"], "exit_code": "X", "owner_token": OTHER}
    return "executions/{execution_id}/exit-status", rt.post(
        f"executions/{execution['id']}/exit-status", body
    )


def exit_status_at_an_id_that_is_not_a_number(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    body = {"expected_version": 1, "exit_code": "X"}
    return "executions/{execution_id}/exit-status", rt.post("executions/x1/exit-status", body)


def a_second_launch(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    launched(rt)
    return "launches", rt.post("launches", {**KEY, "owner_token": OTHER})


def a_launch_of_a_completed_instance(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    body = {"expected_version": execution["version"], "status": "COMPLETED"}
    rt.post(f"executions/{execution['id']}/transition", body, 200)
    return "launches", rt.post("launches", {**KEY, "owner_token": OTHER})


def a_launch_of_an_unknown_definition(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    body = {**KEY, "owner_token": TOKEN, "definition_digest": "ab" * 32}
    return "launches", rt.post("launches", body)


def a_launch_without_a_token(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    return "launches", rt.post("launches", KEY)


def a_started_step_under_a_finished_execution(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    execution = launched(rt)
    body = {"expected_version": execution["version"], "status": "COMPLETED"}
    rt.post(f"executions/{execution['id']}/transition", body, 200)
    step = {"step_name": "load", "status": "STARTED"}
    return "executions/{execution_id}/steps", rt.post(f"executions/{execution['id']}/steps", step)


def a_started_step_under_a_fenced_execution(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    execution, _ = fenced(rt, operator, fixed)
    step = {"step_name": "next", "status": "STARTED", "owner_token": TOKEN}
    return "executions/{execution_id}/steps", rt.post(f"executions/{execution['id']}/steps", step)


def a_started_step_twice(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    started_step(rt, execution)
    step = {"step_name": "load", "status": "STARTED", "owner_token": TOKEN}
    return "executions/{execution_id}/steps", rt.post(f"executions/{execution['id']}/steps", step)


def a_started_step_with_another_token(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    step = {"step_name": "load", "status": "STARTED", "owner_token": OTHER}
    return "executions/{execution_id}/steps", rt.post(f"executions/{execution['id']}/steps", step)


def a_step_created_stopped(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    step = {"step_name": "load", "status": "STOPPED"}
    return "executions/{execution_id}/steps", rt.post(f"executions/{execution['id']}/steps", step)


def a_finishing_chunk_on_a_stale_version(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    step = started_step(rt, launched(rt))
    body = {"expected_version": step["version"] + 1, "finish": "COMPLETED", "owner_token": TOKEN}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_finishing_chunk_on_a_finished_step(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    step = started_step(rt, launched(rt))
    body = {"expected_version": step["version"], "finish": "COMPLETED", "owner_token": TOKEN}
    done = rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    body["expected_version"] = done["version"]
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_finishing_chunk_on_a_starting_step(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    execution = launched(rt)
    step = rt.post(f"executions/{execution['id']}/steps", {"step_name": "load"}, 201)
    body = {"expected_version": step["version"], "finish": "COMPLETED"}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_finishing_chunk_of_a_fenced_step(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    _, step = fenced(rt, operator, fixed)
    body = {"expected_version": step["version"], "finish": "COMPLETED", "owner_token": TOKEN}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_finishing_chunk_with_another_token(rt: Runtime, operator: Runtime, fixed: FixedClock) -> Any:
    step = started_step(rt, launched(rt))
    body = {"expected_version": step["version"], "finish": "COMPLETED", "owner_token": OTHER}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_finishing_chunk_with_a_bad_exit_code(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    step = started_step(rt, launched(rt))
    body = {"expected_version": step["version"], "finish": "COMPLETED", "exit_code": " x"}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_chunk_skipping_an_ineligible_category(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    step = started_step(rt, launched(rt))
    skip = {"phase": "process", "item": "7", "failure": {"category": "UNKNOWN_COMMIT"}}
    body = {"expected_version": step["version"], "owner_token": TOKEN, "skips": [skip]}
    return "steps/{step_id}/checkpoint", rt.post(f"steps/{step['id']}/checkpoint", body)


def a_transition_with_an_exit_code_out_of_a_finished_state(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    execution = launched(rt)
    body = {"expected_version": execution["version"], "status": "COMPLETED", "exit_code": "DONE"}
    done = rt.post(f"executions/{execution['id']}/transition", body, 200)
    body = {"expected_version": done["version"], "status": "STARTED", "exit_code": "AGAIN"}
    return "executions/{execution_id}/transition", rt.post(
        f"executions/{execution['id']}/transition", body
    )


def a_transition_with_an_exit_code_of_a_fenced_execution(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    execution, _ = fenced(rt, operator, fixed)
    body = {
        "expected_version": execution["version"],
        "status": "COMPLETED",
        "exit_code": "DONE",
        "owner_token": TOKEN,
    }
    return "executions/{execution_id}/transition", rt.post(
        f"executions/{execution['id']}/transition", body
    )


def a_step_transition_with_an_exit_code_on_a_stale_version(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> Any:
    step = started_step(rt, launched(rt))
    body = {"expected_version": step["version"] + 3, "status": "COMPLETED", "exit_code": "DONE"}
    return "steps/{step_id}/transition", rt.post(f"steps/{step['id']}/transition", body)


REFUSALS: list[tuple[Scenario, int, str]] = [
    (exit_status_of_a_fenced_execution, 409, "invalid_state"),
    (exit_status_of_a_fenced_step, 409, "invalid_state"),
    (exit_status_on_a_stale_version, 409, "stale_version"),
    (exit_status_with_another_token, 409, "execution_owned"),
    (exit_status_at_an_id_that_is_not_a_number, 404, "not_found"),
    (a_second_launch, 409, "execution_already_active"),
    (a_launch_of_a_completed_instance, 409, "completed_instance"),
    (a_launch_of_an_unknown_definition, 404, "definition_not_found"),
    (a_launch_without_a_token, 400, "invalid_request"),
    (a_started_step_under_a_finished_execution, 409, "invalid_state"),
    (a_started_step_under_a_fenced_execution, 409, "invalid_state"),
    (a_started_step_twice, 409, "step_execution_exists"),
    (a_started_step_with_another_token, 409, "execution_owned"),
    (a_step_created_stopped, 400, "invalid_request"),
    (a_finishing_chunk_on_a_stale_version, 409, "version_ahead"),
    (a_finishing_chunk_on_a_finished_step, 409, "invalid_state"),
    (a_finishing_chunk_on_a_starting_step, 409, "invalid_state"),
    (a_finishing_chunk_of_a_fenced_step, 409, "invalid_state"),
    (a_finishing_chunk_with_another_token, 409, "execution_owned"),
    (a_finishing_chunk_with_a_bad_exit_code, 400, "invalid_request"),
    (a_chunk_skipping_an_ineligible_category, 400, "skip_not_eligible"),
    (a_transition_with_an_exit_code_out_of_a_finished_state, 409, "illegal_transition"),
    (a_transition_with_an_exit_code_of_a_fenced_execution, 409, "illegal_transition"),
    (a_step_transition_with_an_exit_code_on_a_stale_version, 409, "version_ahead"),
]


@pytest.mark.parametrize(
    ("scenario", "status", "code"), REFUSALS, ids=[s.__name__ for s, _, _ in REFUSALS]
)
def test_the_refusal_is_listed_for_its_operation(
    scenario: Scenario,
    status: int,
    code: str,
    rt: Runtime,
    operator: Runtime,
    fixed: FixedClock,
    document: dict[str, Any],
) -> None:
    path, response = scenario(rt, operator, fixed)
    problem(response, status, code)
    assert code in listed(document, path, status), (path, status, code)


def test_an_unlisted_refusal_would_be_found(document: dict[str, Any]) -> None:
    assert "invalid_state" in listed(document, "executions/{execution_id}/exit-status", 409)
    assert "illegal_transition" not in listed(
        document, "executions/{execution_id}/exit-status", 409
    )
    assert listed(document, "launches", 418) == set()
