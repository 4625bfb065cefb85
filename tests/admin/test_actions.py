"""Audited operator actions through the confirmation page."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from oxide_batch import models

pytestmark = pytest.mark.django_db


def _url(model: str, action: str, *ids: int) -> str:
    return (
        reverse(f"admin:oxide_batch_{model}_act", args=[action]) + "?ids=" + ",".join(map(str, ids))
    )


def _hidden(text: str) -> dict[str, str]:
    return dict(re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', text))


def _confirm(client: Client, url: str, **extra: str):
    page = client.get(url)
    assert page.status_code == 200
    form = {k: v for k, v in _hidden(page.content.decode()).items() if k != "csrfmiddlewaretoken"}
    return page, {**form, **extra}


def _said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_recover_confirmation_shows_version_and_proposal_then_applies(operator_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    page, form = _confirm(operator_client, url)
    text = page.content.decode()
    assert f'name="version_{unknown.pk}" value="{unknown.version}"' in text
    assert "eligible" in text
    assert "unknown commit yes" in text
    # Durations in words, not a Python timedelta ("0:15:00", "5:02:13.286000").
    assert "(threshold 15m 00s)" in text
    assert ":15:00" not in text
    assert len(form[f"digest_{unknown.pk}"]) == 64
    # Nothing the operator decides is pre-filled (issue 25 point 4).
    assert 'value="UNKNOWN_EFFECT"' not in text
    assert "checked" not in text
    chosen = {
        "disposition": "MARK_FAILED",
        "failure_category": "UNKNOWN_COMMIT",
        "reason_code": "UNKNOWN_EFFECT",
    }
    done = operator_client.post(url, {**form, **chosen}, follow=True)
    unknown.refresh_from_db()
    assert unknown.status == "FAILED"
    decision_row = models.RecoveryDecision.objects.get(job_execution_id=unknown.pk)
    # The result says the new status, what it was, and links the decision.
    (said,) = _said(done)
    assert said.startswith(f"execution #{unknown.pk}: applied — ")
    assert ">FAILED</a> (was UNKNOWN)" in said
    assert f">decision #{decision_row.pk}</a>" in said
    resolved = len(decision_row.resolved_step_ids)
    assert f"{resolved} unfinished step{'' if resolved == 1 else 's'} resolved to FAILED" in said
    assert unknown.failure_category == "UNKNOWN_COMMIT"
    record = models.OperatorRequest.objects.get(job_execution_id=unknown.pk, action="RECOVER")
    assert record.actor == "otto"
    assert record.outcome == "APPLIED"
    decision = models.RecoveryDecision.objects.get(job_execution_id=unknown.pk)
    assert decision.operator_reference == "otto"
    # A double submit of the same confirmation replays instead of acting twice.
    again = operator_client.post(url, {**form, **chosen}, follow=True)
    assert any("replayed" in m for m in _said(again))
    assert models.RecoveryDecision.objects.filter(job_execution_id=unknown.pk).count() == 1


def test_an_applied_recovery_computes_its_proposal_once(operator_client, demo, monkeypatch):
    """Issue 27: the POST does not read the proposals again before acting — the
    service computes the one it acts on, under its lock; they are read again
    only to show the page once more (a refused form)."""
    from oxide_batch.services import operator as operator_module

    computed: list[int] = []
    real = operator_module.OperatorService._propose

    def counting(self, evidence, now):  # type: ignore[no-untyped-def]
        computed.append(evidence.job_execution_id)
        return real(self, evidence, now)

    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url)
    monkeypatch.setattr(operator_module.OperatorService, "_propose", counting)
    refused = operator_client.post(url, {**form, "disposition": "MARK_FAILED"})
    assert refused.status_code == 200  # no reason given: the page again, read again
    assert not models.RecoveryDecision.objects.filter(job_execution_id=unknown.pk).exists()
    assert computed == [unknown.pk]
    computed.clear()
    chosen = {
        "disposition": "MARK_FAILED",
        "failure_category": "UNKNOWN_COMMIT",
        "reason_code": "UNKNOWN_EFFECT",
    }
    operator_client.post(url, {**form, **chosen})
    unknown.refresh_from_db()
    assert unknown.status == "FAILED"
    assert computed == [unknown.pk]  # the service's, under the lock: once


def test_a_row_changed_since_the_page_loaded_is_stale(operator_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url)
    models.JobExecution.objects.filter(pk=unknown.pk).update(version=unknown.version + 1)
    done = operator_client.post(
        url,
        {
            **form,
            "disposition": "MARK_FAILED",
            "failure_category": "UNKNOWN_COMMIT",
            "reason_code": "UNKNOWN_EFFECT",
        },
    )
    # The page is shown again from a fresh read, the refusal stating its values.
    assert done.status_code == 200
    (said,) = _said(done)
    # What changed: the version the row has now, its status, beside what the page showed.
    assert said.startswith(
        f"execution #{unknown.pk}: refused: stale_version — the row changed since the page "
        f"loaded: it is now version {unknown.version + 1}, status UNKNOWN, last activity "
    )
    assert said.endswith(
        f"(the page showed version {unknown.version}); nothing was done to it — the page "
        "below shows it as it is now: decide again"
    )
    assert f'name="version_{unknown.pk}" value="{unknown.version + 1}"' in done.content.decode()
    unknown.refresh_from_db()
    assert unknown.status == "UNKNOWN"


def test_stop_and_abandon(operator_client, demo):
    crashed = models.JobExecution.objects.get(job_name="customer_sync", status="STARTED")
    url = _url("jobexecution", "stop", crashed.pk)
    _, form = _confirm(operator_client, url)
    done = operator_client.post(url, form, follow=True)
    (said,) = _said(done)
    assert said.startswith(f"execution #{crashed.pk}: applied — ")
    assert "STARTED</a>, stop requested: the runtime stops at its next control" in said
    crashed.refresh_from_db()
    assert crashed.stop_requested_by == "otto"
    stopped = models.JobExecution.objects.get(job_name="report_build", status="STOPPED")
    url = _url("jobexecution", "abandon", stopped.pk)
    _, form = _confirm(operator_client, url, reason_code="NOT_NEEDED")
    done = operator_client.post(url, form, follow=True)
    (said,) = _said(done)
    assert said.startswith(f"execution #{stopped.pk}: applied — ")
    assert ">ABANDONED</a> (was STOPPED)" in said
    stopped.refresh_from_db()
    assert stopped.status == "ABANDONED"


def test_an_action_refused_by_a_rule_reports_its_code(operator_client, demo):
    """The page does not offer abandon for a running execution; a post made up
    for it anyway is refused by the service, which says so in words."""
    running = models.JobExecution.objects.get(job_name="customer_sync", status="STARTED")
    url = _url("jobexecution", "abandon", running.pk)
    page, _ = _confirm(operator_client, url)
    assert f'name="version_{running.pk}"' not in page.content.decode()
    forged = {
        "ids": str(running.pk),
        f"version_{running.pk}": str(running.version),
        f"operation_{running.pk}": "forged-1",
        "reason_code": "NOT_NEEDED",
    }
    done = operator_client.post(url, forged, follow=True)
    (said,) = _said(done)
    assert said.startswith(f"execution #{running.pk}: refused: invalid_state — ")
    assert "STARTED" in said


def test_place_and_release_a_hold(operator_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    url = _url("jobinstance", "hold", instance.pk)
    _, form = _confirm(operator_client, url, reason_code="LEGAL_HOLD")
    done = operator_client.post(url, form, follow=True)
    assert _said(done) == [f"instance #{instance.pk}: applied — held (LEGAL_HOLD) by otto"]
    instance.refresh_from_db()
    assert instance.hold_actor == "otto"
    assert b"HOLD" in done.content
    url = _url("jobinstance", "release", instance.pk)
    _, form = _confirm(operator_client, url, reason_code="LEGAL_HOLD")
    done = operator_client.post(url, form, follow=True)
    assert _said(done) == [f"instance #{instance.pk}: applied — no hold"]
    instance.refresh_from_db()
    assert instance.hold_placed_at is None
    assert models.RetentionRecord.objects.filter(job_instance_id=instance.pk).count() == 2


def test_the_changelist_action_leads_to_the_confirmation(operator_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    response = operator_client.post(
        reverse("admin:oxide_batch_jobexecution_changelist"),
        {"action": "recover_action", "_selected_action": [unknown.pk]},
    )
    assert response.status_code == 302
    assert response.url == _url("jobexecution", "recover", unknown.pk)


def test_a_viewer_cannot_see_or_run_the_actions(viewer_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    changelist = viewer_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    assert changelist.status_code == 200
    assert b"recover_action" not in changelist.content
    url = _url("jobexecution", "recover", unknown.pk)
    assert viewer_client.get(url).status_code == 403
    assert viewer_client.post(url, {"ids": str(unknown.pk)}).status_code == 403
    hold = _url("jobinstance", "hold", unknown.job_instance_id)
    assert viewer_client.get(hold).status_code == 403
    unknown.refresh_from_db()
    assert unknown.status == "UNKNOWN"


def test_csrf_is_enforced(demo, operator_client):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url)
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = operator_client.cookies
    assert strict.post(url, {**form, "reason_code": "STALE_WORKER"}).status_code == 403
    unknown.refresh_from_db()
    assert unknown.status == "UNKNOWN"


def test_each_console_action_needs_its_own_permission(viewer_client, demo):
    """contract §4.1: an operator granted only ``stop_execution`` is offered the stop
    action and may confirm it; recover, abandon and holds are neither offered
    nor reachable (403)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    User = get_user_model()

    from oxide_batch.roles import APP_LABEL, STOP_EXECUTION, VIEW_BATCH

    user = User.objects.create_user("stopper", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label=APP_LABEL, codename__in=[VIEW_BATCH, STOP_EXECUTION]
        )
    )
    client = Client()
    client.force_login(user)
    started = models.JobExecution.objects.filter(status="STARTED").first()
    changelist = client.get(reverse("admin:oxide_batch_jobexecution_changelist")).content
    assert b"stop_action" in changelist
    assert b"recover_action" not in changelist
    assert b"abandon_action" not in changelist
    assert client.get(_url("jobexecution", "stop", started.pk)).status_code == 200
    for action in ("recover", "abandon"):
        assert client.get(_url("jobexecution", action, started.pk)).status_code == 403
    assert client.get(_url("jobinstance", "hold", started.job_instance_id)).status_code == 403
    dashboard = client.get(reverse("admin:oxide_batch_dashboard")).content.decode()
    assert "/act/recover/" not in dashboard
