"""HISTORY and "Recent actions" show the operator's actions (issue 25 point 7,
decision 135), whichever way they were taken, with the audit rows linked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from oxide_batch import models
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service, retention_service
from oxide_batch.templatetags.oxide_history import audit_links
from tests.helpers import recover_as_proposed

pytestmark = pytest.mark.django_db
S = BatchStatus


def stuck() -> models.JobExecution:
    """A STARTED execution silent for an hour."""
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    execution = work.move(work.launch("nightly_import", business_date="2026-11-30"), S.STARTED)
    return models.JobExecution.objects.get(pk=execution.id)


@pytest.fixture
def olga() -> tuple[Client, Actor]:
    user = get_user_model().objects.create_superuser("olga", password="pw")
    client = Client()
    client.force_login(user)
    return client, Actor.for_user(user)


def test_an_executions_history_lists_the_recovery_with_its_decision_linked(olga):
    client, actor = olga
    execution = stuck()
    service = operator_service(DjangoJobRepository(), stale_after=timedelta(minutes=15))
    result = recover_as_proposed(
        service, execution.pk, actor=actor, operation_id="rec-1", reason_code="WORKER_LOST"
    )
    page = client.get(reverse("admin:oxide_batch_jobexecution_history", args=[execution.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "doesn’t have a change history" not in html
    assert "Recovered: STARTED → FAILED, reason WORKER_LOST" in html
    decision = reverse("admin:oxide_batch_recoverydecision_change", args=[result.decision.id])
    assert f'<a href="{decision}">recovery decision #{result.decision.id}</a>' in html
    request = reverse("admin:oxide_batch_operatorrequest_change", args=[result.record.id])
    assert f'<a href="{request}">operator request #{result.record.id}</a>' in html
    assert "<td>olga</td>" in html
    # The index's "Recent actions" (Django's own, from the same entries).
    index = client.get(reverse("admin:index")).content.decode()
    assert f"job execution #{execution.pk}" in index


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_the_history_says_its_times_are_utc(olga, settings, zone):
    """Every time in the console is UTC and says so; the HISTORY's too, whatever
    the project's TIME_ZONE (issue 39)."""
    settings.TIME_ZONE = zone
    client, actor = olga
    execution = stuck()
    service = operator_service(DjangoJobRepository(), stale_after=timedelta(minutes=15))
    recover_as_proposed(service, execution.pk, actor=actor, operation_id="rec-utc")
    page = client.get(reverse("admin:oxide_batch_jobexecution_history", args=[execution.pk]))
    entry = LogEntry.objects.get(object_id=str(execution.pk))
    at = entry.action_time.astimezone(UTC)
    assert f">{at:%Y-%m-%d %H:%M:%S} UTC</time>" in page.content.decode()


def test_an_instances_history_lists_its_holds(olga):
    client, actor = olga
    execution = stuck()
    retention = retention_service(DjangoJobRepository())
    placed = retention.place_hold(
        execution.job_instance_id, actor=actor, reason_code="LEGAL_HOLD", operation_id="h-1"
    )
    page = client.get(
        reverse("admin:oxide_batch_jobinstance_history", args=[execution.job_instance_id])
    )
    html = page.content.decode()
    assert "Hold placed, reason LEGAL_HOLD" in html
    assert reverse("admin:oxide_batch_retentionrecord_change", args=[placed.record.id]) in html


def test_an_untouched_execution_says_what_its_history_would_hold(olga):
    client, _ = olga
    execution = stuck()
    html = client.get(
        reverse("admin:oxide_batch_jobexecution_history", args=[execution.pk])
    ).content
    assert b"No operator action has been applied to it yet" in html


def test_the_message_is_escaped_and_only_audit_rows_become_links():
    linked = audit_links("Stop <b>requested</b>; operator request #4 (op<1>)")
    assert "&lt;b&gt;requested&lt;/b&gt;" in linked
    assert "(op&lt;1&gt;)" in linked
    assert linked.count("<a ") == 1


def test_the_watchdogs_decision_is_on_the_timeline_and_in_the_audit_list(olga):
    """The watchdog has no account, so no ``LogEntry``: its decision is an event
    of the execution's timeline and a row of the recovery decisions."""
    client, _ = olga
    execution = stuck()
    service = operator_service(DjangoJobRepository(), stale_after=timedelta(minutes=15))
    result = recover_as_proposed(
        service,
        execution.pk,
        actor=Actor("watchdog@host-1"),
        operation_id="watchdog:1:0123456789abcdef",
        reason_code="LEASE_EXPIRED",
    )
    page = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution.pk]))
    timeline = page.content.decode().split('class="ob-timeline"', 1)[1]
    assert f"recovery decision #{result.decision.id}" in timeline
    assert "by watchdog@host-1" in timeline
    decisions = client.get(reverse("admin:oxide_batch_recoverydecision_changelist"))
    assert "watchdog@host-1" in decisions.content.decode()
    history = client.get(reverse("admin:oxide_batch_jobexecution_history", args=[execution.pk]))
    assert b"No operator action has been applied to it yet" in history.content
