"""The confirmation says what will happen, and an audited choice is a choice
(issue 25 points 3 and 4): each row says the status it ends in and, for a
recovery, which unfinished steps end FAILED; the button names the action and
the rows; nothing the operator decides is pre-filled, a page submitted as it
came applies nothing and says what is missing; MARK_FAILED offers only the
categories an operator's recovery can record."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.repository import DjangoJobRepository, FixedClock, SystemClock
from tests.admin.test_actions import _confirm, _said, _url
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


def stale_with_steps(count: int, *, job: str = "stale_job") -> tuple[int, list[int]]:
    """An execution without owner, STARTED with ``count`` STARTED steps and
    one COMPLETED step, last written an hour ago (stale): its id and the ids
    of the unfinished steps."""
    repo = DjangoJobRepository(FixedClock(SystemClock().now() - timedelta(hours=1)))
    execution = launch(repo, key(job=job))
    steps = []
    with repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.STARTED)
        )
        done = uow.create_step_execution(execution.id, "done")
        done = uow.transition_step_execution(done.id, 0, LifecycleTransition(S.STARTED))
        uow.transition_step_execution(done.id, done.version, LifecycleTransition(S.COMPLETED))
        for n in range(count):
            step = uow.create_step_execution(execution.id, f"part{n:02d}")
            uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
            steps.append(step.id)
        uow.commit()
    return execution.id, steps


def _written() -> dict[str, int]:
    """Every row an applied action writes."""
    return {
        "requests": models.OperatorRequest.objects.count(),
        "decisions": models.RecoveryDecision.objects.count(),
        "retention": models.RetentionRecord.objects.count(),
        "history": LogEntry.objects.count(),
        "holds": models.JobInstance.objects.exclude(hold_placed_at=None).count(),
        "versions": sum(models.JobExecution.objects.values_list("version", flat=True)),
    }


def _button(text: str) -> str:
    match = re.search(r'<input type="submit" class="default" id="confirm" value="([^"]*)"', text)
    assert match is not None
    return match.group(1)


def _labels(text: str) -> dict[str, str]:
    match = re.search(r'id="confirm" value="[^"]*" data-labels="([^"]*)"', text)
    assert match is not None
    return dict(json.loads(match.group(1).replace("&quot;", '"')))


# ------------------------------------------------------------- what will happen


def test_a_recovery_names_the_steps_that_end_failed_and_the_status_of_each_choice(
    operator_client, db
):
    execution, steps = stale_with_steps(2)
    url = _url("jobexecution", "recover", execution)
    text = operator_client.get(url).content.decode()
    assert f"With MARK_FAILED: #{execution} ends <strong>FAILED</strong>" in text
    assert f"With ABANDON: #{execution} ends <strong>ABANDONED</strong>" in text
    assert "Either way its 2 unfinished steps end <strong>FAILED</strong> now" in text
    assert "STALE_RECOVERED with ABANDON" in text
    for n, step in enumerate(steps):
        assert re.search(rf"part{n:02d} \(<a [^>]+>#{step}</a>\) <span class=\"ob-badge", text)
    assert "done (" not in text  # the finished step is not touched
    # What the page said is what the decision resolves.
    _, form = _confirm(operator_client, url, disposition="ABANDON", reason_code="NOT_NEEDED")
    operator_client.post(url, form)
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution)
    assert list(decision.resolved_step_ids) == steps
    assert set(
        models.StepExecution.objects.filter(pk__in=steps).values_list("status", "failure_category")
    ) == {("FAILED", "STALE_RECOVERED")}


def test_many_unfinished_steps_are_named_up_to_ten_and_counted(operator_client, db):
    execution, steps = stale_with_steps(12)
    text = operator_client.get(_url("jobexecution", "recover", execution)).content.decode()
    assert "Either way its 12 unfinished steps end" in text
    assert f">#{steps[9]}</a>" in text
    assert f">#{steps[10]}</a>" not in text
    assert " and 2 more</li>" in text


def test_a_row_without_unfinished_steps_says_only_the_execution_changes(operator_client, repo):
    unknown = move(repo, move(repo, launch(repo, key(job="no_steps")), S.STARTED), S.UNKNOWN)
    text = operator_client.get(_url("jobexecution", "recover", unknown.id)).content.decode()
    assert "No unfinished step: only the execution changes." in text
    # With the marker the steps of an ABANDON carry UNKNOWN_COMMIT (said in the help).
    assert "ABANDON records none: its steps carry STALE_RECOVERED (UNKNOWN_COMMIT" in text


def test_the_other_actions_say_what_changes_and_what_does_not(operator_client, demo):
    stopped = models.JobExecution.objects.get(job_name="report_build", status="STOPPED")
    text = operator_client.get(_url("jobexecution", "abandon", stopped.pk)).content.decode()
    assert (
        f"#{stopped.pk} ends <strong>ABANDONED</strong> (now STOPPED); its steps stay as they "
        "are and its instance never runs again." in text
    )
    assert _button(text) == f"Abandon #{stopped.pk}"
    running = models.JobExecution.objects.get(job_name="customer_sync", status="STARTED")
    text = operator_client.get(_url("jobexecution", "stop", running.pk)).content.decode()
    assert f"Nothing is marked: #{running.pk} stays STARTED at version {running.version}." in text
    assert _button(text) == f"Request stop of #{running.pk}"
    instance = models.JobInstance.objects.get(job_name="billing_export")
    text = operator_client.get(_url("jobinstance", "hold", instance.pk)).content.decode()
    assert f"Instance #{instance.pk} is held: it is never purged while the hold lasts" in text
    assert _button(text) == f"Place a hold on instance #{instance.pk}"


def test_the_button_names_the_rows(operator_client, demo):
    failed = list(
        models.JobExecution.objects.filter(status__in=["FAILED", "STOPPED"])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    assert len(failed) >= 2
    two = _url("jobexecution", "abandon", *failed[:2])
    assert _button(operator_client.get(two).content.decode()) == (
        f"Abandon #{failed[0]} and #{failed[1]}"
    )
    execution_ids = []
    for n in range(4):
        execution_ids.append(stale_with_steps(1, job=f"many_{n}")[0])
    text = operator_client.get(_url("jobexecution", "recover", *execution_ids)).content.decode()
    assert _button(text) == "Apply the chosen disposition to 4 executions"
    assert _labels(text)["MARK_FAILED"] == "Mark 4 executions FAILED"


def test_the_recover_button_follows_the_disposition(operator_client, db):
    execution, _ = stale_with_steps(1)
    url = _url("jobexecution", "recover", execution)
    page, form = _confirm(operator_client, url)
    text = page.content.decode()
    # Without the script: an action still, naming the rows; with it, the choice.
    assert _button(text) == f"Apply the chosen disposition to #{execution}"
    assert _labels(text) == {
        "MARK_FAILED": f"Mark #{execution} FAILED",
        "ABANDON": f"Abandon #{execution}",
        "": f"Apply the chosen disposition to #{execution}",
    }
    assert 'src="/static/oxide_batch/confirm.js"' in text
    # Shown again (the reason is missing), the page follows the posted choice.
    again = operator_client.post(url, {**form, "disposition": "ABANDON"}).content.decode()
    assert _button(again) == f"Abandon #{execution}"
    assert '<li data-disposition="MARK_FAILED" hidden>' in again
    assert '<li data-disposition="ABANDON">' in again


# ----------------------------------------------------------- a choice is a choice


@pytest.mark.parametrize(
    ("model", "action", "pick"),
    [
        ("jobexecution", "recover", lambda: stale_with_steps(1)[0]),
        (
            "jobexecution",
            "abandon",
            lambda: models.JobExecution.objects.filter(status="STOPPED").earliest("pk").pk,
        ),
        ("jobinstance", "hold", lambda: models.JobInstance.objects.earliest("pk").pk),
    ],
)
def test_a_page_submitted_as_it_came_applies_nothing_and_says_what_is_missing(
    operator_client, demo, model, action, pick
):
    pk = pick()
    url = _url(model, action, pk)
    page, form = _confirm(operator_client, url)
    text = page.content.decode()
    assert "checked" not in text
    assert 'name="reason_code" value=' not in text  # no reason pre-filled
    before = _written()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    assert _written() == before
    said = response.content.decode()
    missing = "a disposition, a reason code" if action == "recover" else "a reason code"
    assert f"Nothing was applied — still to choose: {missing}." in said
    if action == "recover":
        assert "Choose what the recovery does: MARK_FAILED or ABANDON." in said
    assert _said(response) == []


def test_the_hold_page_suggests_hold_reasons_and_prefills_none(operator_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    text = operator_client.get(_url("jobinstance", "hold", instance.pk)).content.decode()
    assert "STALE_WORKER" not in text
    assert "for example LEGAL_HOLD or INCIDENT_REVIEW" in text
    assert re.search(r'<input type="text" name="reason_code"(?![^>]*value=)[^>]*>', text)


def test_mark_failed_offers_the_operator_categories_and_unknown_commit_only_with_the_marker(
    operator_client, demo
):
    execution, _ = stale_with_steps(1)
    text = operator_client.get(_url("jobexecution", "recover", execution)).content.decode()
    assert _options(text, "disposition") == ["", "MARK_FAILED", "ABANDON"]
    offered = _options(text, "failure_category")
    assert offered == [
        "",
        "STALE_RECOVERED",
        "TRANSIENT_INFRASTRUCTURE",
        "PERMANENT_INFRASTRUCTURE",
        "USER_COMPONENT",
    ]
    assert text.count('<option value="" selected>— choose one —</option>') == 2
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    text = operator_client.get(_url("jobexecution", "recover", unknown.pk)).content.decode()
    assert _options(text, "failure_category")[:2] == ["", "UNKNOWN_COMMIT"]


def _options(text: str, name: str) -> list[str]:
    select = re.search(rf'<select name="{name}".*?</select>', text, re.S)
    assert select is not None
    return re.findall(r'<option value="([A-Z_]*)"', select.group(0))


def _post_recover(client: Any, execution: int, **chosen: str) -> Any:
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(client, url, **chosen)
    return client.post(url, form)


@pytest.mark.parametrize(
    ("chosen", "error"),
    [
        (
            {"disposition": "MARK_FAILED"},
            "Choose the failure category the execution is marked FAILED with.",
        ),
        (
            {"disposition": "MARK_FAILED", "failure_category": "UNKNOWN_COMMIT"},
            "UNKNOWN_COMMIT says a commit&#x27;s outcome is unknown, and #{pk} carries no "
            "unknown-commit marker: choose another category (STALE_RECOVERED when the worker "
            "is simply gone).",
        ),
        (
            {"disposition": "MARK_FAILED", "failure_category": "INVARIANT"},
            "INVARIANT is not a category an operator&#x27;s recovery records",
        ),
        (
            {"disposition": "ABANDON", "failure_category": "STALE_RECOVERED"},
            "ABANDON records no failure category (the execution keeps its own): clear the "
            "category, or choose MARK_FAILED.",
        ),
    ],
)
def test_a_category_that_does_not_fit_is_a_form_error_and_applies_nothing(
    operator_client, db, chosen, error
):
    execution, _ = stale_with_steps(1)
    before = _written()
    response = _post_recover(operator_client, execution, reason_code="STALE_WORKER", **chosen)
    assert response.status_code == 200
    text = response.content.decode()
    row = re.search(r'<div class="form-row errors">(.*?)<div class="help"', text, re.S)
    assert row is not None
    assert 'id="id_failure_category"' in row.group(1)
    assert error.format(pk=execution) in row.group(1)
    assert _written() == before


def test_a_chosen_operator_category_is_what_the_execution_and_its_steps_record(operator_client, db):
    execution, steps = stale_with_steps(1)
    response = _post_recover(
        operator_client,
        execution,
        disposition="MARK_FAILED",
        failure_category="TRANSIENT_INFRASTRUCTURE",
        reason_code="NODE_LOST",
    )
    assert response.status_code == 302
    row = models.JobExecution.objects.get(pk=execution)
    assert (row.status, row.failure_category) == ("FAILED", "TRANSIENT_INFRASTRUCTURE")
    step = models.StepExecution.objects.get(pk=steps[0])
    assert (step.status, step.failure_category) == ("FAILED", "TRANSIENT_INFRASTRUCTURE")


def test_the_token_revocation_button_names_the_action(admin_client):
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from oxide_batch.repository.tokens import issue_api_token

    runner = get_user_model().objects.create_user("runner")
    now = SystemClock().now()
    tokens = [issue_api_token(user=runner, name=name, now=now) for name in ("a", "b")]
    page = admin_client.post(
        reverse("admin:oxide_batch_apitoken_changelist"),
        {"action": "revoke_selected", "_selected_action": [t.row.pk for t in tokens]},
    ).content.decode()
    assert '<input type="submit" class="default" value="Revoke 2 tokens">' in page
