"""The case file says what a restart will do and what a restart skipped
(issue 40): a FAILED or STOPPED execution shows its restart plan (step →
action → why, linked to the earlier step); a restart attempt lists the steps
it did not run because an earlier attempt completed them, linked to that row;
both within a constant number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch.domain import BatchStatus
from tests.admin.test_case_file import _case, _page
from tests.helpers import key, launch, move
from tests.selectors.test_restart_plan import restart, step

pytestmark = pytest.mark.django_db
S = BatchStatus


def change(model: str, pk: int) -> str:
    return reverse(f"admin:oxide_batch_{model}_change", args=[pk])


def failed_run(repo, clock, run: str = "plan", steps: int = 0):
    execution = move(repo, launch(repo, key(run=run)), S.STARTED, clock=clock)
    extract = step(repo, execution, "extract", S.COMPLETED, read=3)
    load = step(repo, execution, "load", S.FAILED, read=7)
    for index in range(steps):
        step(repo, execution, f"more-{index}", S.FAILED)
    return move(repo, execution, S.FAILED, clock=clock), extract, load


def test_a_failed_execution_shows_its_restart_plan_linked_to_the_earlier_steps(
    admin_client, repo, clock
):
    failed, extract, load = failed_run(repo, clock)
    case = _case(_page(admin_client, failed.id))
    assert "<dt>Restart plan</dt>" in case
    assert "A restart would be accepted." in case
    plan = case.split("<dt>Restart plan</dt>", 1)[1]
    assert plan.index("extract") < plan.index("load")
    assert "<strong>skip</strong>" in plan
    assert "completed in attempt 1: a restart skips it" in plan
    assert "<strong>resume</strong>" in plan
    assert "7 read and 0 written carried" in plan
    assert f'<a href="{change("stepexecution", extract.id)}">step #{extract.id}</a>' in plan
    assert f'<a href="{change("stepexecution", load.id)}">step #{load.id}</a>' in plan
    assert f'<a href="{change("jobexecution", failed.id)}">attempt 1</a>' in plan


def test_a_failure_before_any_step_says_the_restart_runs_every_step(admin_client, repo, clock):
    started = move(repo, launch(repo, key(run="no-step")), S.STARTED, clock=clock)
    failed = move(repo, started, S.FAILED, clock=clock)
    plan = _case(_page(admin_client, failed.id)).split("<dt>Restart plan</dt>", 1)[1]
    assert "recorded no step" in plan
    assert "runs every step afresh" in plan
    assert "would:" not in plan.split("</dd>", 1)[0]


def test_a_running_execution_has_no_restart_plan(admin_client, repo, clock):
    running = move(repo, launch(repo, key(run="running")), S.STARTED, clock=clock)
    assert "Restart plan" not in _case(_page(admin_client, running.id))


def test_a_restart_attempt_lists_the_steps_it_skipped(admin_client, repo, clock):
    failed, extract, _ = failed_run(repo, clock)
    attempt = restart(repo, failed)
    step(repo, attempt, "load", S.COMPLETED)
    case = _case(_page(admin_client, attempt.id))
    skipped = case.split("<dt>Skipped</dt>", 1)[1].split("</dd>", 1)[0]
    assert "an earlier attempt completed (or abandoned) them" in skipped
    assert "extract" in skipped
    assert "load" not in skipped
    assert f'<a href="{change("stepexecution", extract.id)}">step #{extract.id}</a>' in skipped
    assert f'<a href="{change("jobexecution", failed.id)}">attempt 1</a>' in skipped
    # A failed first attempt skipped nothing and has no such fact.
    assert "<dt>Skipped</dt>" not in _case(_page(admin_client, failed.id))


def statements(client, execution_id: int) -> int:
    url = change("jobexecution", execution_id)
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_plan_and_the_skipped_steps_read_a_constant_number_of_queries(
    admin_client, repo, clock
):
    small, _, _ = failed_run(repo, clock, run="small")
    large, _, _ = failed_run(repo, clock, run="large", steps=8)
    first = statements(admin_client, large.id)
    assert statements(admin_client, small.id) == first
    small_again = move(repo, restart(repo, small), S.FAILED, clock=clock)
    large_again = move(repo, restart(repo, large), S.FAILED, clock=clock)
    assert statements(admin_client, small_again.id) == statements(admin_client, large_again.id)
    # A restart attempt's page reads the skipped steps (one query) beside the plan.
    assert statements(admin_client, large_again.id) == first + 1
