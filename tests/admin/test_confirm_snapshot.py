"""One value per fact on the confirmation (issue 25 point 5): its last
activity is contract §2.5.3's (``evidence.activity_at``, what the case file shows),
read at the proposal's own instant; a refused second tab shows the page again
from one fresh read and the refusal states that read's values."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from oxide_batch import models
from tests.admin.test_actions import _confirm, _said, _url
from tests.admin.test_confirm_outcome import stale_with_steps

pytestmark = pytest.mark.django_db

CHOSEN = {
    "disposition": "MARK_FAILED",
    "failure_category": "STALE_RECOVERED",
    "reason_code": "STALE_WORKER",
}


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def test_last_activity_is_the_later_of_the_execution_and_its_steps(operator_client, db):
    execution, steps = stale_with_steps(1)
    step_write = models.StepExecution.objects.get(pk=steps[0]).last_activity_at
    # The execution's own runtime write is older than its step's.
    models.JobExecution.objects.filter(pk=execution).update(
        last_activity_at=step_write - timedelta(hours=2)
    )
    text = operator_client.get(_url("jobexecution", "recover", execution)).content.decode()
    line = re.search(r"<li>last activity (.*?); newest step write", text)
    assert line is not None
    assert f'<small class="ob-abs">{_utc(step_write)}</small>' in line.group(1)
    assert "1\xa0hour ago" in line.group(1)
    assert _utc(step_write - timedelta(hours=2)) not in text


def test_a_refused_second_tab_states_the_values_the_page_then_shows(operator_client, db):
    execution, steps = stale_with_steps(1)
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(operator_client, url, **CHOSEN)
    # The worker writes after all (its step moves 20 minutes ago): the evidence changed.
    moved = timezone.now() - timedelta(minutes=20)
    models.StepExecution.objects.filter(pk=steps[0]).update(last_activity_at=moved)
    response = operator_client.post(url, form)
    assert response.status_code == 200
    (said,) = _said(response)
    stated = re.search(r"last activity (\S+ \S+ UTC) \(inactive for ([^)]+)\)", said)
    assert stated is not None, said
    assert stated.group(1) == _utc(moved)
    text = response.content.decode()
    # The page shows the same instant and the same inactivity, from the same read.
    assert f'<small class="ob-abs">{stated.group(1)}</small>' in text
    assert f"<li>inactive for {stated.group(2)} (threshold" in text
    # ... and a fresh form to decide again: new seals, nothing chosen.
    assert "checked" not in text
    assert not models.RecoveryDecision.objects.filter(job_execution_id=execution).exists()


def test_a_second_tab_after_a_recovery_sees_what_the_first_wrote(operator_client, db):
    execution, _ = stale_with_steps(1)
    url = _url("jobexecution", "recover", execution)
    _, first = _confirm(operator_client, url, **CHOSEN)
    _, second = _confirm(operator_client, url, **CHOSEN)
    done = operator_client.post(url, first, follow=True)
    (applied,) = _said(done)
    assert ">FAILED</a> (was STARTED)" in applied
    version = models.JobExecution.objects.get(pk=execution).version
    response = operator_client.post(url, second)
    assert response.status_code == 200
    (said,) = _said(response)
    assert said.startswith(
        f"execution #{execution}: refused: stale_version — the row changed since the page "
        f"loaded: it is now version {version}, status FAILED ("
    )
    text = response.content.decode()
    assert "not eligible: the execution is FAILED" in text
    assert 'id="confirm"' not in text
    assert models.RecoveryDecision.objects.filter(job_execution_id=execution).count() == 1
