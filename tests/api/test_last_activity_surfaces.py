"""One definition of a step's last activity on every surface (contract §2.5.3,
decision 213): its last runtime write. A watchdog's recovery moves the step's
``updated_at`` and version, never its ``last_activity_at`` — the API's list
and detail, the console's step page and ``batch_show`` all say the last chunk."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from tests.api.support import Runtime
from tests.services.test_watchdog import TTL, owned_running

pytestmark = pytest.mark.django_db


def api_instant(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def recovered(repo: DjangoJobRepository, clock: FixedClock) -> dict[str, Any]:
    """An owned execution whose one step committed a chunk, recovered by the
    watchdog a minute after its lease expired; its step's id and the two instants."""
    execution = owned_running(repo, clock, "recovered")
    with repo.begin() as uow:
        (chunked,) = uow.step_executions(execution.id)
    clock.advance(TTL + timedelta(minutes=1))
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
    report = bootstrap.watchdog(service, actor=Actor("watchdog@test-host")).run_pass()
    assert len(report.actions) == 1
    with repo.begin() as uow:
        (step,) = uow.step_executions(execution.id)
    assert step.status is BatchStatus.FAILED
    return {
        "execution_id": execution.id,
        "step": step,
        "chunk": chunked.last_activity_at,
        "recovered": clock.now(),
    }


def test_the_api_list_and_detail_say_the_last_chunk(recovered, viewer: Runtime) -> None:
    step = recovered["step"]
    listed = viewer.get(f"executions/{recovered['execution_id']}/steps")["results"]
    detail = viewer.get(f"steps/{step.id}")
    for shown in (listed[0], detail):
        assert shown["last_activity_at"] == api_instant(recovered["chunk"])
        assert shown["updated_at"] == api_instant(recovered["recovered"])
    execution = viewer.get(f"executions/{recovered['execution_id']}")
    assert execution["last_activity_at"] == api_instant(recovered["chunk"])


def test_the_console_step_page_says_the_last_chunk(recovered, admin_client) -> None:
    page = admin_client.get(
        reverse("admin:oxide_batch_stepexecution_change", args=[recovered["step"].id])
    )
    assert page.status_code == 200
    text = page.content.decode()
    # The field's row, up to the next field's (Django admin: ``field-<name>``).
    row = text.split("field-last_activity", 1)[1].split("field-", 1)[0]
    assert f'datetime="{recovered["chunk"].isoformat()}"' in row
    assert recovered["recovered"].strftime("%Y-%m-%d %H:%M:%S UTC") not in row


def test_batch_show_says_the_last_chunk(recovered) -> None:
    out = io.StringIO()
    call_command("batch_show", str(recovered["execution_id"]), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["execution"]["last_activity_at"] == api_instant(recovered["chunk"])
    assert shown["proposal"]["last_activity_at"] == api_instant(recovered["chunk"])
