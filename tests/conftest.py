from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.conf import settings

from oxide_batch.repository import DjangoJobRepository, FixedClock

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


@pytest.fixture
def repo(clock: FixedClock) -> DjangoJobRepository:
    return DjangoJobRepository(clock)


@pytest.fixture(autouse=True, scope="session")
def _roles_after_flush() -> Iterator[None]:
    """Transactional tests flush every table, the role groups included; Django
    then sends ``post_migrate`` (which re-creates the permissions), and this
    puts the groups back with them — outside any test's transaction, so every
    later test sees them, whatever test ran before it (the order differs
    between a sequential run and each xdist worker)."""
    from django.apps import apps
    from django.db.models.signals import post_migrate

    from oxide_batch.api.roles import ensure_roles

    def restore(**kwargs: object) -> None:
        ensure_roles()

    uid = "tests.conftest.roles_after_flush"
    post_migrate.connect(restore, sender=apps.get_app_config("oxide_batch"), dispatch_uid=uid)
    yield
    post_migrate.disconnect(dispatch_uid=uid, sender=apps.get_app_config("oxide_batch"))


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
