"""A real streaming replica of the test cluster as the console's read replica.

Each module gets one hot standby (``tests/replication.py``), taken after the
test database was created, so it holds it; the tests are transactional, so
their committed rows reach it by streaming replication. The alias ``replica``
is in ``DATABASES`` (a mirror of ``default`` for Django's test machinery: it
is never flushed or created) while the module runs, and
``OXIDE_BATCH_REPLICA_DATABASE`` names it for each test that asks for
``replica``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from oxide_batch.conf import REPLICA_MIDDLEWARE, REPLICA_ROUTER
from oxide_batch.db.replica import forget_failures
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.roles import OPERATOR, ensure_roles
from tests.replication import Server, streaming_replica

ALIAS = "replica"
# Both aliases: a test reads the replica through Django (pytest-django refuses
# an alias a test did not name).
ON_BOTH = pytest.mark.django_db(transaction=True, databases=["default", ALIAS])
T = TypeVar("T")


def install_wiring(settings: Any) -> None:
    """The replica's router and middleware, as the service installs them when
    a replica is named (project/settings.py) and a host lists them."""
    settings.DATABASE_ROUTERS = [REPLICA_ROUTER]
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, REPLICA_MIDDLEWARE]


@pytest.fixture(scope="module")
def replica_server(django_db_setup: None) -> Iterator[Server]:
    with streaming_replica() as server:
        yield server


@pytest.fixture(scope="module")
def replica_alias(replica_server: Server) -> Iterator[dict[str, Any]]:
    entry = replica_server.settings_dict()
    entry["TEST"] = {**entry.get("TEST", {}), "MIRROR": "default"}
    # connections.settings is settings.DATABASES: the alias is known at once.
    django_settings.DATABASES[ALIAS] = entry
    try:
        yield entry
    finally:
        connections[ALIAS].close()
        del connections[ALIAS]
        del django_settings.DATABASES[ALIAS]


@pytest.fixture
def replica(
    replica_server: Server, replica_alias: dict[str, Any], settings: Any
) -> Iterator[Server]:
    """The replica, named by the setting, caught up; replay resumed afterwards."""
    settings.OXIDE_BATCH_REPLICA_DATABASE = ALIAS
    install_wiring(settings)
    settings.OXIDE_BATCH_REPLICA_LAG_NOTICE = "1s"
    forget_failures()
    caught_up(replica_server)
    try:
        yield replica_server
    finally:
        resume(replica_server)
        forget_failures()
        connections[ALIAS].close()


# -- the replica's replay


def primary_lsn() -> str:
    """Where the primary's WAL ends, its buffers included: the test cluster
    commits asynchronously, so a commit may not be written (nor streamed) yet."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_insert_lsn()::text")
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def caught_up(server: Server) -> None:
    """Wait until the replica has replayed everything the primary wrote so far."""
    server.wait_for(f"SELECT pg_last_wal_replay_lsn() >= '{primary_lsn()}'::pg_lsn", True)


def pause(server: Server) -> None:
    """Stop replaying (the replica keeps receiving): it shows what it had."""
    with server.connect("postgres") as admin:
        admin.execute("SELECT pg_wal_replay_pause()")
    server.wait_for("SELECT pg_get_wal_replay_pause_state()", "paused")


def resume(server: Server) -> None:
    with server.connect("postgres") as admin:
        admin.execute("SELECT pg_wal_replay_resume()")


def received_not_replayed(server: Server) -> None:
    """Wait until the replica has received a write it does not replay (paused)."""
    server.wait_for(f"SELECT pg_last_wal_receive_lsn() >= '{primary_lsn()}'::pg_lsn", True)


def unreplayed(server: Server, write: Callable[[], T]) -> T:
    """``write`` on the primary while the replica does not replay it: caught up
    first, then paused, back once the replica has received the write. The
    replica still shows what it had before (``resume`` replays it)."""
    caught_up(server)
    pause(server)
    done = write()
    received_not_replayed(server)
    return done


# -- the console


@pytest.fixture
def operator() -> Client:
    """A staff user in the operator group, signed in (committed: transactional tests)."""
    ensure_roles()
    user = get_user_model().objects.create_user("otto", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATOR))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def repo() -> DjangoJobRepository:
    return DjangoJobRepository()


def change_url(model: str, pk: int) -> str:
    return reverse(f"admin:oxide_batch_{model}_change", args=[pk])


def list_url(model: str = "jobexecution") -> str:
    return reverse(f"admin:oxide_batch_{model}_changelist")


def act_url(model: str, action: str, pk: int) -> str:
    return reverse(f"admin:oxide_batch_{model}_act", args=[action]) + f"?ids={pk}"
