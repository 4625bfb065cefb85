"""The confirmation page (issue 14 points 5 and 6): it lists every selected row
and submits only those the action applies to; it says why a row is not
eligible and offers no confirm button when none is; its texts name only the
outcomes that can happen; and its input is a Django form — invalid input
re-renders the page with the error beside the field (200) and applies nothing,
to no row."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from oxide_batch import models
from tests.admin.test_actions import _confirm, _hidden, _said, _url

pytestmark = pytest.mark.django_db


def _state() -> dict[str, Any]:
    """What an applied action would change: every execution's status and version,
    every hold, and the audit tables."""
    return {
        "executions": list(
            models.JobExecution.objects.order_by("pk").values_list("pk", "status", "version")
        ),
        "holds": list(
            models.JobInstance.objects.order_by("pk").values_list("pk", "hold_placed_at")
        ),
        "requests": models.OperatorRequest.objects.count(),
        "decisions": models.RecoveryDecision.objects.count(),
        "retention": models.RetentionRecord.objects.count(),
    }


def _get(status: str, job: str | None = None) -> models.JobExecution:
    rows = models.JobExecution.objects.filter(status=status)
    found = (rows.filter(job_name=job) if job else rows).order_by("pk").first()
    assert found is not None
    return found


# ---------------------------------------------------------- what the page offers


def test_rows_the_action_does_not_apply_to_are_listed_but_never_submitted(operator_client, demo):
    failed = _get("FAILED", "billing_export")
    running = _get("STARTED", "customer_sync")
    done = _get("COMPLETED", "billing_export")
    url = _url("jobexecution", "abandon", failed.pk, running.pk, done.pk)
    page, form = _confirm(operator_client, url, reason_code="NOT_NEEDED")
    text = page.content.decode()
    assert "3 rows selected, 1 to abandon" in text
    assert (
        "not applicable: the execution is STARTED — only a FAILED or STOPPED execution can "
        "be abandoned; request a stop first" in text
    )
    assert "not applicable: the execution is COMPLETED" in text
    assert f'name="version_{failed.pk}"' in text
    for skipped in (running, done):
        assert f'name="version_{skipped.pk}"' not in text
        assert f'name="operation_{skipped.pk}"' not in text
    assert form["ids"] == str(failed.pk)
    operator_client.post(url, form, follow=True)
    failed.refresh_from_db()
    assert failed.status == "ABANDONED"
    # The others were never submitted: untouched and not audited.
    assert not models.OperatorRequest.objects.filter(
        job_execution_id__in=[running.pk, done.pk]
    ).exists()


@pytest.mark.parametrize(
    ("status", "job", "why"),
    [
        # An active execution not stale yet is offered the override instead
        # (tests/admin/test_override.py).
        (
            "FAILED",
            "billing_export",
            "not eligible: the execution is FAILED — recovery applies only to an active",
        ),
        ("COMPLETED", "billing_export", "not eligible: the execution is COMPLETED"),
    ],
)
def test_an_ineligible_recovery_says_why_and_offers_no_confirm_button(
    operator_client, demo, status, job, why
):
    execution = _get(status, job)
    text = operator_client.get(_url("jobexecution", "recover", execution.pk)).content.decode()
    assert why in text
    assert "recovery_not_allowed" not in text
    assert "execution_not_stale" not in text
    assert 'id="confirm"' not in text
    assert "Yes, recover" not in text
    assert 'name="reason_code"' not in text
    assert "Nothing to confirm: the action applies to none of the selected rows" in text
    before = _state()
    # Posting anyway (nothing to act on) changes nothing and says so.
    response = operator_client.post(
        _url("jobexecution", "recover", execution.pk), {"ids": "", "selected": str(execution.pk)}
    )
    assert response.status_code == 200
    assert "No selected row can be confirmed." in response.content.decode()
    assert _state() == before


def test_the_stop_page_names_only_the_outcomes_a_stop_can_have(operator_client, demo):
    running = _get("STARTED", "customer_sync")
    text = operator_client.get(_url("jobexecution", "stop", running.pk)).content.decode()
    assert "recovery_evidence_stale" not in text
    assert "stale_version" in text
    assert "evidence" not in text
    assert 'name="digest_' not in text


def test_hold_pages_show_no_version(operator_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    text = operator_client.get(_url("jobinstance", "hold", instance.pk)).content.decode()
    assert "observed version" not in text
    assert "stale_version" not in text
    assert 'name="version_' not in text
    # Release without a hold: not offered.
    text = operator_client.get(_url("jobinstance", "release", instance.pk)).content.decode()
    assert "not applicable: the instance has no hold" in text
    assert 'id="confirm"' not in text


def test_the_unknown_effect_hint_only_for_a_row_with_the_marker(operator_client, demo):
    stale = _get("STARTED", "customer_sync")  # stale, no unknown-commit marker
    text = operator_client.get(_url("jobexecution", "recover", stale.pk)).content.decode()
    assert "unknown commit no" in text
    assert "UNKNOWN_EFFECT" not in text
    assert 'value="UNKNOWN_COMMIT"' not in text  # not offered without the marker
    unknown = _get("UNKNOWN")
    text = operator_client.get(_url("jobexecution", "recover", unknown.pk)).content.decode()
    assert "needs the reason code <code>UNKNOWN_EFFECT</code>" in text
    assert '<option value="UNKNOWN_COMMIT">' in text
    # A hint, not a value: the reason code is left for the operator to give.
    assert 'value="UNKNOWN_EFFECT"' not in text


def test_the_evidence_shows_badges_the_step_by_name_and_times_both_ways(operator_client, demo):
    stale = _get("STARTED", "customer_sync")
    text = operator_client.get(_url("jobexecution", "recover", stale.pk)).content.decode()
    assert '<span class="ob-badge ob-run" title="status STARTED">STARTED</span>' in text
    step = models.StepExecution.objects.filter(job_execution_id=stale.pk).order_by("-pk").first()
    assert re.search(
        rf"latest step: {step.step_name} \(<a [^>]+>#{step.pk}</a>\) <span class=\"ob-badge", text
    )
    # Relative and absolute UTC (display.when), durations in words.
    assert re.search(
        r"last activity <time [^>]+>[^<]+ ago</time> "
        r"<small class=\"ob-abs\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
        text,
    )
    assert re.search(r"inactive for \d+h \d\dm \d\ds \(threshold 15m 00s\)", text)


# ---------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("not upper", "Use only A-Z 0-9 _"),
        ("BAD-CODE", "Use only A-Z 0-9 _"),
        ("X" * 65, "Ensure this value has at most 64 characters"),
        ("", "Give a reason code (for example NOT_NEEDED or SUPERSEDED)."),
    ],
)
def test_an_invalid_reason_code_re_renders_with_the_error_and_applies_nothing(
    operator_client, demo, reason, error
):
    stopped = _get("STOPPED")
    url = _url("jobexecution", "abandon", stopped.pk)
    _, form = _confirm(operator_client, url, reason_code=reason)
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    # The error sits in the reason code's own form row, beside the field.
    row = re.search(r'<div class="form-row errors">(.*?)</div>', text, re.S)
    assert row is not None
    assert error in row.group(1)
    assert 'id="id_reason_code"' in row.group(1)
    assert "Nothing was applied" in text
    # The page is the same confirmation: same operation id, so a corrected submit
    # is still one request.
    assert _hidden(text)[f"operation_{stopped.pk}"] == form[f"operation_{stopped.pk}"]
    assert _state() == before
    assert _said(response) == []


def test_one_invalid_row_applies_no_row(operator_client, demo):
    stopped = _get("STOPPED")
    failed = _get("FAILED", "billing_export")
    url = _url("jobexecution", "abandon", stopped.pk, failed.pk)
    _, form = _confirm(operator_client, url, reason_code="NOT_NEEDED")
    form[f"version_{failed.pk}"] = "not-a-number"
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    assert "version: Enter a whole number." in text
    assert _state() == before  # the valid row was not applied either
    # Corrected, the same page applies both.
    form[f"version_{failed.pk}"] = str(failed.version)
    operator_client.post(url, form)
    assert set(
        models.JobExecution.objects.filter(pk__in=[stopped.pk, failed.pk]).values_list(
            "status", flat=True
        )
    ) == {"ABANDONED"}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        (
            "digest",
            "f" * 63,
            "digest: not the evidence digest this page gave (64 lowercase hex characters)",
        ),
        ("digest", "f" * 64, "digest: not the version and evidence digest this page gave"),
        ("seal", "0" * 40, "digest: not the version and evidence digest this page gave"),
        ("operation", "has spaces", "operation: Use only"),
        ("operation", "", "operation: This field is required."),
        ("version", "-1", "version: Ensure this value is greater than or equal to 0."),
        (
            "version",
            str(2**63),
            "version: Ensure this value is less than or equal to 9223372036854775807.",
        ),
    ],
)
def test_a_tampered_hidden_field_is_an_error_beside_its_row(
    operator_client, demo, field, value, error
):
    unknown = _get("UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url, disposition="ABANDON", reason_code="STALE_WORKER")
    form[f"{field}_{unknown.pk}"] = value
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    assert error in text
    if field in {"digest", "seal", "version"}:
        # Not mistaken for evidence that changed: the form was altered.
        assert "This form was altered: reload the page." in text
        assert "evidence changed" not in text
    assert _state() == before


def test_mark_failed_of_an_unknown_commit_needs_unknown_effect_before_any_row_applies(
    operator_client, demo
):
    unknown = _get("UNKNOWN")
    stale = _get("STARTED", "customer_sync")
    url = _url("jobexecution", "recover", unknown.pk, stale.pk)
    _, form = _confirm(
        operator_client,
        url,
        disposition="MARK_FAILED",
        failure_category="STALE_RECOVERED",
        reason_code="STALE_WORKER",
    )
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    assert (
        f"#{unknown.pk} carries the unknown-commit marker: marking it FAILED needs the reason "
        "code UNKNOWN_EFFECT" in text
    )
    assert (
        f"#{unknown.pk} carries the unknown-commit marker: it is marked FAILED only as "
        "UNKNOWN_COMMIT" in text
    )
    assert _state() == before  # the stale row without the marker was not applied alone
    form["disposition"] = "ABANDON"
    del form["failure_category"]  # ABANDON records none (the script disables it)
    done = operator_client.post(url, form, follow=True)
    assert all(": applied — " in said for said in _said(done))
    assert set(
        models.JobExecution.objects.filter(pk__in=[unknown.pk, stale.pk]).values_list(
            "status", flat=True
        )
    ) == {"ABANDONED"}


def test_an_unknown_disposition_or_category_is_a_field_error(operator_client, demo):
    unknown = _get("UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(
        operator_client,
        url,
        disposition="EXPLODE",
        failure_category="NOPE",
        reason_code="UNKNOWN_EFFECT",
    )
    before = _state()
    response = operator_client.post(url, form)
    assert response.status_code == 200
    assert response.content.decode().count("Select a valid choice.") == 2
    assert _state() == before


def test_a_stale_recovery_says_what_changed(operator_client, demo):
    stale = _get("STARTED", "customer_sync")
    url = _url("jobexecution", "recover", stale.pk)
    _, form = _confirm(
        operator_client,
        url,
        disposition="MARK_FAILED",
        failure_category="STALE_RECOVERED",
        reason_code="STALE_WORKER",
    )
    # The runtime asks for control (an observation): the evidence moves, the version not.
    models.JobExecution.objects.filter(pk=stale.pk).update(
        stop_requested_at=stale.created_at, stop_requested_by="someone"
    )
    done = operator_client.post(url, form, follow=True)
    (said,) = _said(done)
    assert said.startswith(
        f"execution #{stale.pk}: refused: recovery_evidence_stale — the evidence changed since "
        f"the page loaded: it is now version {stale.version}, status STARTED, last activity "
    )
    assert said.endswith(
        ", stop requested by someone; nothing was done to it — the page below shows the new "
        "proposal: decide again"
    )


def test_the_changelist_hands_every_selected_row_to_the_page(operator_client, demo):
    ids = list(models.JobExecution.objects.order_by("pk").values_list("pk", flat=True))
    response = operator_client.post(
        reverse("admin:oxide_batch_jobexecution_changelist"),
        {"action": "stop_action", "_selected_action": ids},
        follow=True,
    )
    text = response.content.decode()
    assert f"{len(ids)} rows selected, " in text
    running = models.JobExecution.objects.filter(
        status__in=["STARTING", "STARTED"], stop_requested_at=None
    )
    assert f"{running.count()} to stop" in text


@pytest.mark.parametrize("ids", ["", "0", "abc", str(2**63), "-4", "1,,x", "\u00b2", "\u0663"])
def test_ids_that_cannot_be_rows_are_dropped_not_a_500(operator_client, demo, ids):
    url = reverse("admin:oxide_batch_jobexecution_act", args=["recover"]) + f"?ids={ids}"
    page = operator_client.get(url)
    assert page.status_code == 200
    before = _state()
    assert operator_client.post(url, {"ids": ids, "reason_code": "X"}).status_code == 200
    assert _state() == before
