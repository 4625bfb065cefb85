from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings

from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services.audit import Actor
from tests.fakes import FakeJobRepository

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def on_postgres() -> bool:
    return "postgresql" in settings.DATABASES["default"]["ENGINE"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if on_postgres():
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (run by scripts/test's PostgreSQL pass)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(EPOCH)


ADAPTERS = (pytest.param("django", marks=pytest.mark.django_db), pytest.param("memory"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``repo`` of a ``contract`` test is each adapter in turn (ids ``[django]``
    and ``[memory]``); of an ``adapter`` test in such a module, the Django one
    alone (``[django]``)."""
    if "repo" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("adapter") is not None:
        metafunc.parametrize("repo", ADAPTERS[:1], indirect=True)
    elif metafunc.definition.get_closest_marker("contract") is not None:
        metafunc.parametrize("repo", ADAPTERS, indirect=True)


@pytest.fixture
def repo(
    request: pytest.FixtureRequest, clock: FixedClock
) -> DjangoJobRepository | FakeJobRepository:
    """The repository on the test clock: the Django adapter, or (a contract
    test's ``[memory]`` run) the in-memory fake of ``tests/fakes/``."""
    if getattr(request, "param", "django") == "memory":
        return FakeJobRepository(clock)
    return DjangoJobRepository(clock)


@pytest.fixture
def django_repo(clock: FixedClock) -> DjangoJobRepository:
    """The Django adapter on the test clock, whatever a module's ``repo`` is."""
    return DjangoJobRepository(clock)


@pytest.fixture
def memory_repo(clock: FixedClock) -> FakeJobRepository:
    """The in-memory fake of the repository port (``tests/fakes/``), no database."""
    return FakeJobRepository(clock)


@pytest.fixture(autouse=True, scope="session")
def _cheap_password_hashing() -> Iterator[None]:
    """Every in-process password is hashed with one PBKDF2 iteration
    (``tests/passwords.py``, decision 500); a test may still set its own."""
    from django.test.utils import override_settings

    from tests.passwords import HASHERS

    with override_settings(PASSWORD_HASHERS=HASHERS):
        yield


@pytest.fixture(autouse=True, scope="session")
def _migration_data_after_flush() -> Iterator[None]:
    """Transactional tests flush every table, the rows the migrations wrote
    included (the role groups, the built-in legacy definition); Django then
    sends ``post_migrate`` (which re-creates the permissions), and this puts
    those rows back too — outside any test's transaction, so every later test
    sees a migrated database, whatever test ran before it (the order differs
    between a sequential run and each xdist worker). The schema-version row is
    put back per test by ``_schema_version_row``."""
    from django.apps import apps
    from django.db import connections
    from django.db.models.signals import post_migrate

    from oxide_batch.roles import ensure_roles

    legacy = importlib.import_module("oxide_batch.migrations.0004_legacy_definition")

    def restore(using: str = "default", **kwargs: object) -> None:
        ensure_roles()
        legacy.create_legacy(apps, SimpleNamespace(connection=connections[using]))

    app = apps.get_app_config("oxide_batch")
    uid = "tests.conftest.migration_data_after_flush"
    post_migrate.connect(restore, sender=app, dispatch_uid=uid)
    yield
    post_migrate.disconnect(sender=app, dispatch_uid=uid)


@pytest.fixture(autouse=True)
def _schema_version_row(request: pytest.FixtureRequest) -> None:
    """Transactional tests flush every table, the migrations' schema-version row
    included; put it back so the next test sees a migrated database."""
    if request.node.get_closest_marker("django_db") is None:
        # Asked for by fixture, not marker: set the database up first (live_server
        # implies a transactional database).
        wanted = set(request.fixturenames)
        if wanted & {"transactional_db", "live_server"}:
            request.getfixturevalue("transactional_db")
        elif "db" in wanted:
            request.getfixturevalue("db")
        else:
            return
    from oxide_batch.models import SchemaVersion
    from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION

    blocker = request.getfixturevalue("django_db_blocker")
    with blocker.unblock():
        SchemaVersion.objects.get_or_create(id=1, defaults={"version": SUPPORTED_SCHEMA_VERSION})


def give_accounts(*actors: Actor) -> None:
    """Real accounts behind a test's actors (``Actor("alice", 7)``): an operator's
    action goes into the admin's own history, whose ``LogEntry`` names a user.
    The ids are the actors' own; the user sequence is moved past them, so a user
    the test creates later gets a free id."""
    from django.contrib.auth import get_user_model
    from django.core.management.color import no_style
    from django.db import connection

    user_model: Any = get_user_model()
    for actor in actors:
        if actor.user_id is not None:
            user_model.objects.get_or_create(
                pk=actor.user_id, defaults={user_model.USERNAME_FIELD: actor.reference}
            )
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [user_model]):
            cursor.execute(statement)


def accounts_fixture(*actors: Actor) -> Callable[[pytest.FixtureRequest], None]:
    """A module's autouse fixture giving its actors accounts in each database test."""

    @pytest.fixture(autouse=True)
    def _accounts(request: pytest.FixtureRequest) -> None:
        if request.node.get_closest_marker("django_db"):
            give_accounts(*actors)

    return _accounts
