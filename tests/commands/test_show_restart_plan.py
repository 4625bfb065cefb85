"""``batch_show`` says what a restart will do (issue 40): ``--json`` carries
``restart_plan`` (the API's shape), the text prints one line per step."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from oxide_batch.domain import BatchStatus
from tests.commands.test_operator_commands import run, system_repo
from tests.helpers import launch, move
from tests.selectors.test_restart_plan import step

pytestmark = pytest.mark.django_db
S = BatchStatus
__all__ = ["system_repo"]


@pytest.fixture
def failed(system_repo, clock):
    execution = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    extract = step(system_repo, execution, "extract", S.COMPLETED, read=3)
    load = step(system_repo, execution, "load", S.FAILED, read=7)
    return move(system_repo, execution, S.FAILED, clock=clock), extract, load


def test_show_json_carries_the_restart_plan(failed):
    execution, extract, load = failed
    plan = run("batch_show", str(execution.id))["restart_plan"]
    assert (plan["execution_id"], plan["restartable"], plan["refusal"]) == (
        execution.id,
        True,
        None,
    )
    assert [(s["step_name"], s["action"], s["from_step_execution_id"]) for s in plan["steps"]] == [
        ("extract", "skip", extract.id),
        ("load", "resume", load.id),
    ]
    assert plan["steps"][1]["counts"]["read"] == 7


def test_show_prints_the_restart_plan(failed):
    execution, extract, _ = failed
    out = io.StringIO()
    call_command("batch_show", str(execution.id), stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "restart: would be accepted" in text
    assert (
        f"  extract: skip — completed in attempt 1: a restart skips it (step execution "
        f"{extract.id}, attempt 1, COMPLETED)"
    ) in text
    assert "  load: resume — failed in attempt 1: it resumes from the start (no checkpoint)" in text


def test_show_of_a_running_execution_says_a_restart_is_refused(system_repo, clock):
    running = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    plan = run("batch_show", str(running.id))["restart_plan"]
    assert (plan["restartable"], plan["refusal"]["code"]) == (False, "execution_already_active")
