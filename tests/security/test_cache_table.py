"""The throttle's cache table comes with ``migrate`` (migration 0010): created
forwards, dropped backwards, left alone when it exists, and the table the
settings name. pytest-django's test databases also run Django's
createcachetable, so the migration is exercised explicitly: here on
PostgreSQL (inside the test's transaction: DDL rolls back), and on SQLite in
tests/security/test_deploy_check.py (a fresh install, in a subprocess)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.standalone

migration = importlib.import_module("oxide_batch.migrations.0010_throttle_cache_table")
BEFORE = ("oxide_batch", "0009_api_groups")


def tables() -> list[str]:
    return list(connection.introspection.table_names())


def test_the_migration_creates_the_table_the_settings_name() -> None:
    throttle: Any = settings.CACHES["throttle"]
    assert throttle["LOCATION"] == migration.TABLE
    assert throttle["BACKEND"].endswith(".DatabaseCache")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_migration_drops_and_creates_the_table() -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("oxide_batch")
    MigrationExecutor(connection).migrate([BEFORE])
    assert migration.TABLE not in tables()
    MigrationExecutor(connection).migrate(latest)
    assert migration.TABLE in tables()
    # Over an existing table (one createcachetable made, say): a no-op.
    migration.forward(None, connection.schema_editor())
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {migration.TABLE}")
        assert cursor.fetchone() == (0,)
