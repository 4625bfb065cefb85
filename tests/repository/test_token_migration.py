"""Migration 0016: DRF's plaintext tokens become hashed API tokens. A runtime's
old key keeps working, unchanged; no plaintext is left; a new database has
nothing to do; a key too short to keep stops the migration, changing nothing."""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from oxide_batch import models
from oxide_batch.api.authentication import ATTRIBUTE, authenticate_token
from oxide_batch.domain import tokens as token_rules
from oxide_batch.roles import RUN_BATCH, RUNTIME, VIEW_BATCH, VIEW_BATCH_PAYLOAD
from tests.conftest import on_postgres

User = get_user_model()

pytestmark = pytest.mark.django_db
migration = importlib.import_module("oxide_batch.migrations.0016_hash_drf_tokens")
BEFORE = ("oxide_batch", "0015_api_token")
LEGACY = migration.LEGACY_TABLE
DRF_KEY = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # DRF's docs' example: 40 hex
OTHER_KEY = "0123456789abcdef0123456789abcdef01234567"
CREATED = datetime(2025, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def create_legacy_table() -> None:
    """``authtoken_token`` as ``rest_framework.authtoken`` made it (in the test's
    transaction: both databases roll the DDL back)."""
    created = "timestamp with time zone" if on_postgres() else "datetime"
    with connection.cursor() as cursor:
        cursor.execute(
            f'CREATE TABLE "{LEGACY}" ("key" varchar(40) NOT NULL PRIMARY KEY, '
            f'"created" {created} NOT NULL, '
            '"user_id" integer NOT NULL UNIQUE REFERENCES "auth_user" ("id"))'
        )


def insert_legacy(key: str, user: AbstractUser) -> None:
    # SQLite holds what Django wrote there: naive UTC.
    created = CREATED if on_postgres() else CREATED.replace(tzinfo=None)
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{LEGACY}" ("key", "created", "user_id") VALUES (%s, %s, %s)',
            [key, created, user.pk],
        )


def legacy_rows() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT * FROM "{LEGACY}"')
        return list(cursor.fetchall())


def run_forward() -> None:
    """The migration's forward step with the models as they were after 0015 (it
    reads nothing of its schema editor but the connection)."""
    apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    migration.forward(apps, SimpleNamespace(connection=connection))


def stored_values() -> list[str]:
    return [
        str(value)
        for row in models.ApiToken.objects.values_list()
        for value in row  # every column
    ]


def test_an_old_key_keeps_working_and_no_plaintext_stays() -> None:
    runner = User.objects.create_user("runner")
    runner.groups.add(Group.objects.get(name=RUNTIME))
    other = User.objects.create_user("other")
    create_legacy_table()
    insert_legacy(DRF_KEY, runner)
    insert_legacy(OTHER_KEY, other)

    run_forward()

    assert legacy_rows() == []
    rows = models.ApiToken.objects.order_by("key_prefix")
    assert [(row.key_prefix, row.user_id) for row in rows] == [
        (OTHER_KEY[:12], other.pk),
        (DRF_KEY[:12], runner.pk),
    ]
    for row in rows:
        assert (row.name, row.created_at, row.expires_at, row.revoked_at) == (
            "migrated-drf-token",
            CREATED,
            None,
            None,
        )
    assert not any(key in value for key in (DRF_KEY, OTHER_KEY) for value in stored_values())
    # The runtime's key, as it holds it, with its permissions.
    user, token = authenticate_token(DRF_KEY)
    assert (user, token.key_prefix) == (runner, DRF_KEY[:12])
    assert getattr(user, ATTRIBUTE) == {VIEW_BATCH, RUN_BATCH, VIEW_BATCH_PAYLOAD}


def test_the_migration_repeats_the_domain_rules() -> None:
    """Self-contained migration, same rules as ``oxide_batch.domain.tokens``."""
    assert migration.PREFIX_LENGTH == token_rules.PREFIX_LENGTH
    user = User.objects.create_user("runner")
    create_legacy_table()
    insert_legacy(DRF_KEY, user)
    run_forward()
    row = models.ApiToken.objects.get()
    assert (row.key_prefix, row.digest) == (
        token_rules.key_prefix(DRF_KEY),
        token_rules.token_digest(DRF_KEY),
    )


def test_a_new_database_has_nothing_to_migrate() -> None:
    assert LEGACY not in connection.introspection.table_names()
    run_forward()
    assert not models.ApiToken.objects.exists()


def test_a_key_too_short_to_keep_stops_the_migration_changing_nothing() -> None:
    user = User.objects.create_user("runner")
    short = User.objects.create_user("short")
    create_legacy_table()
    insert_legacy(DRF_KEY, user)
    insert_legacy("abc", short)
    with pytest.raises(RuntimeError, match=rf"user ids {short.pk} are shorter than 32"):
        run_forward()
    assert len(legacy_rows()) == 2
    assert not models.ApiToken.objects.exists()


@pytest.mark.postgres
def test_migrate_hashes_the_tokens_of_a_database_that_had_drf_tokens() -> None:
    """The real ``migrate`` path (in the test's transaction: PostgreSQL's DDL
    rolls back with it)."""
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("oxide_batch")
    runner = User.objects.create_user("runner")
    MigrationExecutor(connection).migrate([BEFORE])
    create_legacy_table()
    insert_legacy(DRF_KEY, runner)
    connection.check_constraints()  # deferred checks first: PostgreSQL will not ALTER
    MigrationExecutor(connection).migrate([("oxide_batch", "0016_hash_drf_tokens")])
    # Each migration commits on its own in a real ``migrate``; in one test
    # transaction the rows 0016 wrote leave deferred checks that a later
    # migration's ALTER TABLE of the same table would trip over.
    connection.check_constraints()
    MigrationExecutor(connection).migrate(latest)
    assert legacy_rows() == []
    assert authenticate_token(DRF_KEY)[0] == runner


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(on_postgres(), reason="SQLite only (the PostgreSQL pass has its own)")
def test_migrate_hashes_the_tokens_of_an_sqlite_file_that_had_drf_tokens(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["SQLITE_PATH"] = path = str(tmp_path / "db.sqlite3")

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = manage("migrate", "oxide_batch", BEFORE[1], "-v", "0")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(path) as db:
        db.execute(
            f'CREATE TABLE "{LEGACY}" ("key" varchar(40) NOT NULL PRIMARY KEY, '
            '"created" datetime NOT NULL, "user_id" integer NOT NULL UNIQUE '
            'REFERENCES "auth_user" ("id") DEFERRABLE INITIALLY DEFERRED)'
        )
        db.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, "
            "email, is_staff, is_active, date_joined) "
            "VALUES ('!', 0, 'runner', '', '', '', 0, 1, '2025-01-01 00:00:00')"
        )
        db.execute(
            f'INSERT INTO "{LEGACY}" VALUES (?, ?, '
            "(SELECT id FROM auth_user WHERE username = 'runner'))",
            [DRF_KEY, "2025-03-04 05:06:07.123000"],
        )
    done = manage("migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(path) as db:
        assert db.execute(f'SELECT COUNT(*) FROM "{LEGACY}"').fetchone() == (0,)
        dumped = "\n".join(line for line in db.iterdump())
    assert DRF_KEY not in dumped
    check = (
        "from oxide_batch.api.authentication import authenticate_token; "
        f"print(authenticate_token({DRF_KEY!r})[0].get_username())"
    )
    done = manage("shell", "-v", "0", "-c", check)
    assert (done.returncode, done.stdout.strip()) == (0, "runner"), done.stderr
