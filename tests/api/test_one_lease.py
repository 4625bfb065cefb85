"""One lease, one answer (issue 38 point 6, contract §2.5.3, decision 212): the
TTL a claim was granted is recorded with the claim, so the API, the commands,
the console and the watchdog agree on an execution's lease whatever each
process's own ``OXIDE_BATCH_LEASE_TTL`` says. Here the API grants 10 s; then
every reader runs with the default 60 s."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from oxide_batch import models
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from oxide_batch.services.watchdog import ActionKind
from tests.api.support import Runtime
from tests.conftest import EPOCH

pytestmark = pytest.mark.django_db
GRANTED = timedelta(seconds=10)
ELSEWHERE = timedelta(seconds=60)


@pytest.fixture
def granted(rt: Runtime, fixed: FixedClock, settings: Any) -> dict[str, Any]:
    """An execution launched and claimed through the API while the API's
    process grants 10 s; afterwards "another process" reads with 60 s."""
    settings.OXIDE_BATCH_LEASE_TTL = GRANTED
    body = {
        "job_name": "import_job",
        "identifying_parameters": {"run": "lease"},
        "owner_token": "c3" * 16,
    }
    execution: dict[str, Any] = rt.post("launches", body, 201)["execution"]
    assert execution["lease"]["ttl_seconds"] == 10
    settings.OXIDE_BATCH_LEASE_TTL = ELSEWHERE
    return execution


def test_the_api_keeps_answering_the_granted_lease(granted, viewer: Runtime) -> None:
    shown = viewer.get(f"executions/{granted['id']}")["lease"]
    assert shown == granted["lease"]
    assert models.JobExecution.objects.get(pk=granted["id"]).lease_ttl == GRANTED


def test_batch_show_reports_the_granted_lease(granted) -> None:
    out = io.StringIO()
    call_command("batch_show", str(granted["id"]), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["execution"]["lease_ttl_seconds"] == 10
    assert shown["execution"]["lease_expires_at"] == granted["lease"]["expires_at"]
    assert shown["proposal"]["lease_ttl_seconds"] == 10
    assert shown["proposal"]["lease_expires_at"] == granted["lease"]["expires_at"]


def test_the_watchdog_uses_the_granted_lease(granted) -> None:
    def watchdog_pass(after: timedelta):
        repo = DjangoJobRepository(FixedClock(EPOCH + after))
        service = bootstrap.operator_service(repo)  # the process's 60 s
        return bootstrap.watchdog(service, actor=Actor("watchdog@test")).run_pass()

    assert watchdog_pass(timedelta(seconds=9)).actions == ()
    (action,) = watchdog_pass(timedelta(seconds=11)).actions
    assert (action.job_execution_id, action.kind) == (granted["id"], ActionKind.RECOVERED)
    assert action.lease_expired_at == EPOCH + GRANTED


def test_the_console_lists_it_as_needing_attention_by_the_granted_lease(
    granted, admin_client, monkeypatch
) -> None:
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: EPOCH + timedelta(seconds=11))
    page = admin_client.get(
        reverse("admin:oxide_batch_jobexecution_changelist"), {"triage": "unresolved"}
    )
    assert page.status_code == 200
    assert f"/jobexecution/{granted['id']}/change/" in page.content.decode()
