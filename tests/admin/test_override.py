"""The operator's override in the console (contract §2.5.5, issue 24): the recover
page lets an operator recover an active execution before it is stale — only
with the override box ticked and a note, which the decision records — and
nothing else (a finished row is never recovered, a missing or bad note applies
nothing). The case file shows the owner's lease and why a recovery is or is not
allowed; the decision pages show an override and its note."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.admin.eligibility import decision_reason
from oxide_batch.admin.forms import seal
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition, StepExecution
from oxide_batch.domain.errors import InvalidState, StaleVersion
from oxide_batch.repository import DjangoJobRepository, FixedClock, SystemClock
from tests.admin.test_actions import _confirm, _hidden, _said, _url
from tests.helpers import key, launch

pytestmark = pytest.mark.django_db
S = BatchStatus
OWNER = bytes(range(16))
NOTE = "Pod batch-7 was deleted by the node drain at 03:12; nothing runs it"


@pytest.fixture
def lease_ttl(settings) -> timedelta:
    """A lease long enough that the test never outlives it by accident."""
    settings.OXIDE_BATCH_LEASE_TTL = timedelta(minutes=10)
    return timedelta(minutes=10)


def owned(*, ago: timedelta = timedelta(0), job: str = "owned_job") -> StepExecution:
    """An execution its worker claimed and STARTED, with a STARTED step, last
    written ``ago`` ago; returns the step (the worker's view of it)."""
    repo = DjangoJobRepository(FixedClock(SystemClock().now() - ago))
    execution = launch(repo, key(job=job))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, execution.version, OWNER)
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.STARTED)
        )
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.STARTED))
        uow.commit()
    return step


def _state() -> dict[str, Any]:
    return {
        "executions": list(
            models.JobExecution.objects.order_by("pk").values_list("pk", "status", "version")
        ),
        "requests": models.OperatorRequest.objects.count(),
        "decisions": models.RecoveryDecision.objects.count(),
    }


def _row(html: str, field: str) -> str:
    """The form row of ``field`` (its errors are inside it)."""
    match = re.search(
        rf'<div class="form-row[^"]*">((?:(?!<div class="form-row).)*id="id_{field}".*?)'
        r'<div class="help"',
        html,
        re.S,
    )
    assert match is not None, field
    return match.group(1)


def _recover(**extra: str) -> dict[str, str]:
    return {
        "disposition": "MARK_FAILED",
        "failure_category": "STALE_RECOVERED",
        "reason_code": "STALE_WORKER",
        **extra,
    }


# ------------------------------------------------------------------ the page


def test_a_row_not_stale_yet_is_offered_the_override_and_nothing_else(
    operator_client, db, lease_ttl
):
    step = owned()
    execution = step.job_execution_id
    page, form = _confirm(operator_client, _url("jobexecution", "recover", execution))
    text = page.content.decode()
    # The row says why not (the lease, until when) and that the override may.
    assert "not eligible: lease held until <time" in text
    assert "If its worker is gone, tick the override below" in text
    assert "1 row selected, 0 to recover, 1 more only with the override" in text
    # Its inputs are posted apart from the rows to act on.
    assert form["ids"] == ""
    assert form["overridable"] == str(execution)
    assert {f"operation_{execution}", f"version_{execution}", f"digest_{execution}"} <= set(form)
    # The override: an explicit checkbox and a note, each with its label.
    assert '<input type="checkbox" name="override"' in text
    assert "The worker is gone: recover before it is stale" in text
    assert '<label for="id_override_note">Override note:</label>' in text
    assert 'id="confirm"' in text


def test_the_override_with_a_note_recovers_and_fences_the_old_owner(operator_client, db, lease_ttl):
    step = owned()
    execution = step.job_execution_id
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(operator_client, url, **_recover(override="on", override_note=NOTE))
    done = operator_client.post(url, form, follow=True)
    (said,) = _said(done)
    assert said.startswith(f"execution #{execution}: applied — ")
    assert "(an operator override, with its note)" in said
    row = models.JobExecution.objects.get(pk=execution)
    assert (row.status, row.failure_category) == ("FAILED", "STALE_RECOVERED")
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution)
    assert (decision.eligibility, decision.override_note) == ("operator_override", NOTE)
    assert decision.operator_reference == "otto"
    assert decision.resolved_step_ids == [step.id]
    # The old owner's next writes are refused: its chunk commit (with the version
    # it holds, then re-read) and its heartbeat; nothing is written.
    repo = DjangoJobRepository()
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1))
    with repo.begin() as uow:
        current = uow.get_step_execution(step.id)
    with repo.begin() as uow, pytest.raises(InvalidState) as refused:
        uow.commit_chunk(step.id, current.version, ExecutionCounts(read=1))
    assert f"recovery decision {decision.pk} resolved it" in refused.value.message
    with repo.begin() as uow, pytest.raises(InvalidState):
        uow.observe_execution_control(execution, OWNER)
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).counts.read == 0
    # A double submit replays: one decision.
    again = operator_client.post(url, form, follow=True)
    assert any(": replayed — " in message for message in _said(again))
    assert models.RecoveryDecision.objects.filter(job_execution_id=execution).count() == 1


@pytest.mark.parametrize(
    ("note", "error"),
    [
        ("", "The override needs a note: say why you know the worker is gone."),
        (" drained", "The note has surrounding whitespace"),
        ("drained\u0007", "The note contains a control character"),
        ("é" * 501, "The note exceeds 1000 bytes"),  # 501 characters, 1002 bytes
    ],
)
def test_the_override_without_a_valid_note_is_an_error_beside_it_and_applies_nothing(
    operator_client, db, lease_ttl, note, error
):
    execution = owned().job_execution_id
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(operator_client, url, **_recover(override="on", override_note=note))
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    assert error in _row(text, "override_note")
    assert "Nothing was applied" in text
    assert _state() == before
    assert _said(response) == []
    # The same page again: the same operation id, so a corrected submit is one request.
    assert _hidden(text)[f"operation_{execution}"] == form[f"operation_{execution}"]


def test_without_the_override_a_row_not_stale_yet_is_not_recovered(operator_client, db, lease_ttl):
    execution = owned().job_execution_id
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(operator_client, url, **_recover())
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    assert f"#{execution} is not stale yet: tick the override" in _row(
        response.content.decode(), "override"
    )
    assert _state() == before
    # A note alone is no override either.
    response = operator_client.post(url, {**form, "override_note": NOTE})
    assert "A note goes with the override only" in _row(response.content.decode(), "override")
    assert _state() == before


def test_beside_eligible_rows_a_row_not_stale_yet_stays_untouched_without_the_override(
    operator_client, demo, lease_ttl
):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    live = owned().job_execution_id
    url = _url("jobexecution", "recover", unknown.pk, live)
    _, form = _confirm(operator_client, url, disposition="ABANDON", reason_code="STALE_WORKER")
    done = operator_client.post(url, form, follow=True)
    said = _said(done)
    assert any(m.startswith(f"execution #{unknown.pk}: applied — ") for m in said)
    assert (
        f"execution #{live}: not recovered — it is not stale yet and the override was not "
        "ticked; nothing was done to it" in said
    )
    assert models.JobExecution.objects.get(pk=live).status == "STARTED"
    assert not models.OperatorRequest.objects.filter(job_execution_id=live).exists()
    decision = models.RecoveryDecision.objects.get(job_execution_id=unknown.pk)
    assert (decision.eligibility, decision.override_note) == ("unknown_status", None)


def test_an_override_never_recovers_a_completed_row(operator_client, demo, lease_ttl):
    done = models.JobExecution.objects.filter(status="COMPLETED").order_by("pk")[0]
    live = owned().job_execution_id
    url = _url("jobexecution", "recover", done.pk, live)
    page, form = _confirm(operator_client, url, **_recover(override="on", override_note=NOTE))
    text = page.content.decode()
    # The finished row gets no input, and is not among the override's rows.
    assert form["overridable"] == str(live)
    assert f'name="version_{done.pk}"' not in text
    assert "not eligible: the execution is COMPLETED" in text
    operator_client.post(url, form, follow=True)
    assert models.JobExecution.objects.get(pk=done.pk).status == "COMPLETED"
    assert models.JobExecution.objects.get(pk=live).status == "FAILED"
    # A post made up to put the finished row under the override is an altered
    # form (its digest carries no seal of this page): nothing applied.
    forged = {
        **_recover(override="on", override_note=NOTE),
        "ids": "",
        "overridable": str(done.pk),
        f"operation_{done.pk}": "forged-override-1",
        f"version_{done.pk}": str(done.version),
        f"digest_{done.pk}": "0" * 64,
    }
    altered = operator_client.post(_url("jobexecution", "recover", done.pk), forged)
    assert altered.status_code == 200
    assert "This form was altered: reload the page." in altered.content.decode()
    assert not models.OperatorRequest.objects.filter(job_execution_id=done.pk).exists()
    # Sealed with the server's key, it reaches the service, which refuses it
    # (recovery_not_allowed comes before the staleness check).
    forged[f"seal_{done.pk}"] = seal(done.pk, done.version, "0" * 64)
    refused = operator_client.post(_url("jobexecution", "recover", done.pk), forged, follow=True)
    (said,) = _said(refused)
    assert said.startswith(f"execution #{done.pk}: refused: recovery_not_allowed — ")
    assert models.JobExecution.objects.get(pk=done.pk).status == "COMPLETED"
    assert not models.RecoveryDecision.objects.filter(job_execution_id=done.pk).exists()


def test_a_completed_row_alone_offers_no_override(operator_client, demo):
    done = models.JobExecution.objects.filter(status="COMPLETED").order_by("pk")[0]
    text = operator_client.get(_url("jobexecution", "recover", done.pk)).content.decode()
    assert 'name="override' not in text
    assert 'name="overridable"' not in text
    assert 'id="confirm"' not in text


def test_rows_not_stale_yet_cost_no_query_per_row(operator_client, db, lease_ttl):
    ids = [owned(job=f"owned_{n}").job_execution_id for n in range(20)]

    def count(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(url).status_code == 200
        return len(captured.captured_queries)

    one, many = _url("jobexecution", "recover", ids[0]), _url("jobexecution", "recover", *ids)
    operator_client.get(one)
    assert count(many) == count(one)
    assert "20 more only with the override" in operator_client.get(many).content.decode()


# ------------------------------------------------------------- the case file


def _case(client, execution_id: int) -> str:
    response = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution_id]))
    assert response.status_code == 200
    html: str = response.content.decode()
    return html.split('<section class="ob-case"', 1)[1].split("</section>", 1)[0]


def test_the_case_file_shows_an_owned_executions_lease_and_the_override(
    operator_client, db, lease_ttl
):
    execution = owned(ago=timedelta(minutes=2)).job_execution_id
    case = _case(operator_client, execution)
    lease = re.search(r"<dt>Lease</dt><dd>(.*?)</dd>", case, re.S)
    assert lease is not None
    # Absolute UTC, then relative (to the minute here: a 60 s lease reads in seconds).
    assert re.match(
        r'held until <time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time> '
        r'<small class="ob-rel">\(in (7|8) min\)</small>',
        lease.group(1),
    )
    assert "the owner's lease runs 10 min after its latest activity" in lease.group(1)
    recovery = case.split("<dt>Recovery</dt>", 1)[1]
    assert "<strong>not eligible: lease held until <time" in recovery
    assert "its owner was last active 2 min ago (lease 10 min)" in recovery
    assert "recover it now with the override" in recovery
    assert f"Recover #{execution} with an override…</a>" in recovery


def test_the_case_file_says_an_expired_lease_makes_it_eligible(operator_client, db, lease_ttl):
    execution = owned(ago=timedelta(minutes=25)).job_execution_id
    case = _case(operator_client, execution)
    expired = r'<time [^>]+>[^<]+ UTC</time> <small class="ob-rel">\(15 min ago\)</small>'
    assert re.search(rf"<dt>Lease</dt><dd>expired at {expired}", case)
    assert re.search(
        rf"eligible for recovery</strong> — the owner's lease expired at {expired}: "
        r"inactive 25 min, over the 10 min lease",
        case,
    )
    assert "with an override" not in case


def test_the_case_file_shows_the_inactivity_rule_for_an_unowned_execution(operator_client, demo):
    live = models.JobExecution.objects.get(job_name="nightly_import", status="STARTED")
    case = _case(operator_client, live.pk)
    assert (
        "<dt>Lease</dt><dd>none — no owner recorded, so the inactivity rule applies: eligible "
        "after 15 min without activity</dd>" in case
    )
    assert re.search(r"not eligible: inactive for only \d+ (s|min) of the 15 min threshold", case)
    assert re.search(
        r"no owner recorded; stale after <time [^>]+>[^<]+ UTC</time> "
        r'<small class="ob-rel">\(in \d+ min\)</small>',
        case,
    )
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    case = _case(operator_client, stale.pk)
    assert re.search(
        r"eligible for recovery</strong> — no owner recorded: inactive \d+ h( \d\d min)?, "
        r"over the 15 min threshold \(last activity <time",
        case,
    )


# --------------------------------------------------------------- decisions


def test_decision_pages_show_the_override_and_its_note(operator_client, db, lease_ttl):
    execution = owned().job_execution_id
    url = _url("jobexecution", "recover", execution)
    _, form = _confirm(operator_client, url, **_recover(override="on", override_note=NOTE))
    operator_client.post(url, form)
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution)
    shown = f'<span class="ob-badge ob-warn">OVERRIDE</span> operator override before it was stale — note: <q class="ob-note">{NOTE}</q>'  # noqa: E501
    page = operator_client.get(
        reverse("admin:oxide_batch_recoverydecision_change", args=[decision.pk])
    ).content.decode()
    # Its page: why (the override), then the note whole in its own field.
    assert (
        '<div class="readonly"><span class="ob-badge ob-warn">OVERRIDE</span> operator '
        "override before it was stale</div>" in page
    )
    assert f'<div class="readonly">{NOTE}</div>' in page
    listed = operator_client.get(
        reverse("admin:oxide_batch_recoverydecision_changelist")
    ).content.decode()
    assert shown in listed
    request = models.OperatorRequest.objects.get(job_execution_id=execution, action="RECOVER")
    audit = operator_client.get(
        reverse("admin:oxide_batch_operatorrequest_change", args=[request.pk])
    ).content.decode()
    assert f">#{decision.pk}</a> — allowed because: {shown}" in audit
    # The execution's case file: resolved by it, and why.
    case = _case(operator_client, execution)
    assert f">decision #{decision.pk}</a> — STARTED → " in case
    assert f"by otto; allowed because: {shown}" in case
    assert "by otto (an operator override)" in case  # on the timeline


def test_a_decision_without_an_override_says_why_it_was_allowed(operator_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url, disposition="ABANDON", reason_code="STALE_WORKER")
    operator_client.post(url, form)
    decision = models.RecoveryDecision.objects.get(job_execution_id=unknown.pk)
    page = operator_client.get(
        reverse("admin:oxide_batch_recoverydecision_change", args=[decision.pk])
    ).content.decode()
    assert "its outcome was unknown (UNKNOWN)" in page
    assert "OVERRIDE" not in page
    assert "— (no override)" in page
    # The demo's decision was recorded without its reason (before schema 5).
    old = models.RecoveryDecision.objects.get(eligibility__isnull=True)
    page = operator_client.get(
        reverse("admin:oxide_batch_recoverydecision_change", args=[old.pk])
    ).content.decode()
    assert "not recorded for this decision (it predates the record)" in page


def test_a_long_note_is_cut_in_the_decision_list_only():
    note = "drained " * 120  # 960 bytes
    listed = str(decision_reason("operator_override", note.strip()))
    assert listed.endswith("…</q>")
    assert len(listed) < 400
    whole = str(decision_reason("operator_override", note.strip(), note=None))
    assert note.strip() in whole
    assert "note:" not in str(decision_reason("operator_override", note.strip(), note=0))
