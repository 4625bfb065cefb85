"""Without ``OXIDE_BATCH_REPLICA_DATABASE`` the replica's router and middleware
change nothing: the console's pages run the same queries as without them, set
no cookie and show no notice (both databases, no replica)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.conf import REPLICA_MIDDLEWARE, REPLICA_ROUTER, replica_wiring_check
from oxide_batch.db.middleware import PIN_COOKIE
from oxide_batch.db.replica import PageReads, page_reads
from oxide_batch.db.router import ReplicaRouter
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.roles import OPERATOR, ensure_roles
from tests.helpers import key, launch, run_python
from tests.replica.conftest import install_wiring

pytestmark = pytest.mark.django_db

PAGES = ("admin:oxide_batch_jobexecution_changelist", "admin:oxide_batch_dashboard")


def signed_in() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username="otto"))
    return client


def queries_of(url: str) -> list[str]:
    client = signed_in()  # a new client loads the current MIDDLEWARE
    client.get(url)  # the session and the user, cached after the first page
    with CaptureQueriesContext(connection) as captured:
        page = client.get(url)
    assert page.status_code == 200
    assert b"ob-replica-notice" not in page.content
    # The statements without their literals (the session key, the time).
    return [re.sub(r"'[^']*'", "?", q["sql"]) for q in captured.captured_queries]


@pytest.fixture
def otto() -> None:
    ensure_roles()
    user = get_user_model().objects.create_user("otto", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATOR))


def wiring(environment: dict[str, str]) -> list[str]:
    """The service's router list and last middleware, as its settings make them."""
    program = (
        "import project.settings as s; "
        "print(s.DATABASE_ROUTERS == [] or s.DATABASE_ROUTERS); print(s.MIDDLEWARE[-1])"
    )
    done = run_python(["-c", program], environment)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.standalone
@pytest.mark.parametrize(
    "environment",
    [
        {
            "DATABASE_URL": "postgres://u@db-1/batch",
            "DATABASE_REPLICA_URL": "postgres://u@db-2/batch",
        },
        {"OXIDE_BATCH_REPLICA_DATABASE": "replica"},
    ],
    ids=["replica-url", "replica-alias"],
)
def test_the_service_installs_the_router_and_the_middleware_with_a_replica(
    environment: dict[str, str],
) -> None:
    assert wiring(environment) == [f"['{REPLICA_ROUTER}']", REPLICA_MIDDLEWARE]


@pytest.mark.standalone
def test_the_service_without_a_replica_installs_neither(settings: Any) -> None:
    """No request passes through the middleware, no query asks the router."""
    assert wiring({}) == ["True", "axes.middleware.AxesMiddleware"]  # django-axes: last
    assert REPLICA_MIDDLEWARE not in settings.MIDDLEWARE
    assert settings.DATABASE_ROUTERS == []
    assert replica_wiring_check() == []


@pytest.fixture
def installed(settings: Any) -> None:
    """A host that lists the router and the middleware but names no replica."""
    install_wiring(settings)


@pytest.mark.parametrize("name", PAGES)
def test_no_replica_costs_no_query(otto: None, installed: None, settings: Any, name: str) -> None:
    launch(DjangoJobRepository(), key())
    url = reverse(name)
    with_them = queries_of(url)
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != REPLICA_MIDDLEWARE]
    settings.DATABASE_ROUTERS = []
    assert queries_of(url) == with_them


def test_no_replica_no_pin_and_no_opinion(otto: None, installed: None) -> None:
    execution = launch(DjangoJobRepository(), key())
    done = signed_in().post(
        reverse("admin:oxide_batch_jobexecution_changelist"),
        {"action": "stop_action", "_selected_action": [execution.id]},
    )
    assert done.status_code == 302
    assert PIN_COOKIE not in done.cookies
    router = ReplicaRouter()
    with page_reads(PageReads()):
        assert router.db_for_read(models.JobExecution) is None
    assert router.db_for_write(models.JobExecution) is None
    assert router.allow_migrate("default", "oxide_batch") is None
