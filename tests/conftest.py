from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace

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

    from oxide_batch.api.roles import ensure_roles

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
