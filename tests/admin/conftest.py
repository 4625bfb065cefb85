from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from oxide_batch.demo.workload import Workload
from oxide_batch.roles import OPERATOR, VIEWER, ensure_roles

User = get_user_model()


@pytest.fixture
def demo(db) -> datetime:
    """The demo workload, recorded as of now; the instant it was recorded at,
    from which a test derives any date it expects (never a literal: issue 37)."""
    now = datetime.now(UTC)
    call_command("demo_workload", "--at", now.isoformat(), stdout=io.StringIO())
    return now


def business_day(now: datetime, days_ago: int) -> str:
    """The ``business_date`` of the demo's nightly run ``days_ago`` days before ``now``."""
    return (now - timedelta(days=days_ago)).date().isoformat()


@pytest.fixture
def more_rows(db):
    """Add instances, executions and steps (a page's query count must not change)."""

    def add(count: int = 5) -> None:
        work = Workload(datetime.now(UTC) - timedelta(hours=2))
        for index in range(count):
            work.complete("extra_job", ["first", "second"], n=index)

    return add


def _member(username: str, group: str) -> Client:
    ensure_roles()
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(db) -> Client:
    return _member("vera", VIEWER)


@pytest.fixture
def operator_client(db) -> Client:
    return _member("otto", OPERATOR)
