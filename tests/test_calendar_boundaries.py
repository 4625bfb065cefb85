"""What the product computes from the calendar is right on any day (issue 37
point 3): the dashboard's per-day chart and 24-hour failure window, the
retention age of a purge, a token's expiry and the watchdog's lease, each at a
midnight UTC, a month's end, a year's end and a leap day.

Each test moves the wall clock (``time-machine``) to just around the boundary —
the product reads ``timezone.now()`` or the system clock there, as it does in
production — and builds its rows at exact instants with the repository's
``FixedClock`` (:class:`Workload`). None depends on the day it runs.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from oxide_batch import models
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus, FailureCategory
from oxide_batch.management.commands import batch_watchdog
from oxide_batch.repository.tokens import issue_api_token
from oxide_batch.roles import RUNTIME, ensure_roles
from tests.api.support import token_client, url
from tests.helpers import key

pytestmark = pytest.mark.django_db
S = BatchStatus

#: Each boundary is the first instant of a new UTC day.
BOUNDARIES = [
    pytest.param(datetime(2027, 6, 16, tzinfo=UTC), id="midnight"),
    pytest.param(datetime(2027, 5, 1, tzinfo=UTC), id="month-end"),
    pytest.param(datetime(2028, 1, 1, tzinfo=UTC), id="year-end"),
    pytest.param(datetime(2028, 3, 1, tzinfo=UTC), id="leap-day"),  # after 2028-02-29
]
SECOND = timedelta(seconds=1)


RUNS = itertools.count()


def ran(job: str, at: datetime, end: BatchStatus = S.COMPLETED) -> int:
    """An execution (of an instance of its own) created, started and ended at
    ``at`` exactly; its id."""
    work = Workload(at)
    execution = work.move(work.launch(job, run=next(RUNS)), S.STARTED)
    category = FailureCategory.USER_COMPONENT if end is S.FAILED else None
    return work.move(execution, end, category=category).id


# -- the dashboard ---------------------------------------------------------------------


def day_table(html: str) -> dict[str, int]:
    """The per-day chart's table: ``{day: total}``."""
    rows = re.findall(r'<tr><th scope="row">(\d{4}-\d\d-\d\d)</th>(.*?)</tr>', html)
    return {day: int(re.findall(r"<td>(\d+)</td>", cells)[-1]) for day, cells in rows}


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_the_dashboard_counts_each_execution_on_its_utc_day(client, admin_user, boundary):
    before, after = boundary - SECOND, boundary + SECOND
    ran("day_job", before)
    ran("day_job", after)
    ran("day_job", after)
    first_day = boundary - timedelta(days=13)  # the chart's 14 days end today
    ran("day_job", first_day)
    ran("day_job", first_day - SECOND)  # the day before the window: not drawn
    with time_machine.travel(boundary + timedelta(minutes=5), tick=False):
        client.force_login(admin_user)  # a session of that day
        html = client.get(reverse("admin:oxide_batch_dashboard")).content.decode()
    days = day_table(html)
    assert days[before.date().isoformat()] == 1
    assert days[boundary.date().isoformat()] == 2
    assert days[first_day.date().isoformat()] == 1
    assert list(days) == [
        (first_day + timedelta(days=n)).date().isoformat() for n in range(14)
    ]  # consecutive calendar days across the month's or year's end


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_failed_in_the_last_24_hours_is_24_hours_whatever_the_date(client, admin_user, boundary):
    now = boundary + timedelta(minutes=30)
    inside = ran("window_job", now - timedelta(hours=24) + timedelta(minutes=1), S.FAILED)
    outside = ran("window_job", now - timedelta(hours=24) - timedelta(minutes=1), S.FAILED)
    with time_machine.travel(now, tick=False):
        client.force_login(admin_user)
        html = client.get(
            reverse("admin:oxide_batch_jobexecution_changelist") + "?triage=failed24h"
        ).content.decode()
    listed = {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', html)}
    assert inside in listed
    assert outside not in listed


# -- retention ---------------------------------------------------------------------


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_retention_age_counts_days_not_calendar_months(boundary):
    """``--older-than 30d`` is 30 × 24 hours before now, across February's
    short month and a year's end alike."""
    now = boundary + timedelta(seconds=30)
    cutoff = now - timedelta(days=30)
    old = ran("retained_job", cutoff - timedelta(minutes=1))
    young = ran("retained_job", cutoff + timedelta(minutes=1))
    out = io.StringIO()
    with time_machine.travel(now, tick=False):
        call_command(
            "purge_batch_metadata", "--older-than", "30d", "--dry-run", "--json", stdout=out
        )
    plan = json.loads(out.getvalue())["plan"]
    instances = dict(
        models.JobExecution.objects.filter(pk__in=[old, young]).values_list("pk", "job_instance")
    )
    candidates = {c["instance_id"] for c in plan["candidates"]}
    assert candidates == {instances[old]}
    assert datetime.fromisoformat(plan["cutoff"].replace("Z", "+00:00")) == cutoff


# -- a token's expiry ---------------------------------------------------------------


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_token_expires_at_its_instant_across_the_date_line(boundary):
    ensure_roles()
    user = get_user_model().objects.create_user("runner")
    user.groups.add(Group.objects.get(name=RUNTIME))
    issued = issue_api_token(
        user=user, name="nightly", now=boundary - timedelta(days=1), expires_in=timedelta(days=1)
    )
    assert issued.row.expires_at == boundary
    client = token_client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {issued.token}")
    with time_machine.travel(boundary - SECOND, tick=False):
        assert client.get(url("executions")).status_code == 200
    with time_machine.travel(boundary, tick=False):
        refused = client.get(url("executions"))
    assert refused.status_code == 401
    assert "expired" in refused.json()["detail"]


# -- the watchdog's lease ---------------------------------------------------------


@pytest.mark.parametrize("boundary", BOUNDARIES)
@override_settings(OXIDE_BATCH_LEASE_TTL=timedelta(seconds=10))
def test_a_lease_expires_ttl_after_its_last_activity_across_midnight(boundary, monkeypatch):
    monkeypatch.setattr(batch_watchdog, "database_uptime", lambda: timedelta(days=1))
    work = Workload(boundary - timedelta(seconds=5))
    with work.repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key("leased_job")).instance
        execution = uow.create_job_execution(instance.id)
        uow.claim_execution_owner(execution.id, execution.version, b"\x07" * 16)
        uow.commit()
    execution = work.move(execution, S.STARTED)  # its last activity: 5 s before midnight

    def watchdog_pass() -> Any:
        out = io.StringIO()
        call_command("batch_watchdog", "--once", "--json", stdout=out, stderr=io.StringIO())
        return json.loads(out.getvalue())

    with time_machine.travel(boundary + timedelta(seconds=4), tick=False):
        assert watchdog_pass()["recovered"] == 0  # the lease runs to 00:00:05
    with time_machine.travel(boundary + timedelta(seconds=6), tick=False):
        assert watchdog_pass()["recovered"] == 1
    assert models.JobExecution.objects.get(pk=execution.id).status == S.FAILED.value
