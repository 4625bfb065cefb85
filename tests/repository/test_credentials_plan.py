"""The authentication read — every request's first statement — is planned well
on PostgreSQL whatever the connection has prepared (issue 28, point 3).

Two things made PostgreSQL spend ~0.3 ms on it per request: the codenames
and the app label were bound parameters (the prepared statement's generic
plan built the parameter array on every row it filtered), and the small auth
and token tables were never analyzed (autovacuum waits for 50 changes), so
the plan scanned the permissions once per content type of the app. The
codenames are literals now, and ``migrate`` analyzes those tables.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection

from oxide_batch.repository import statements
from oxide_batch.roles import APP_LABEL, PERMISSIONS
from tests.helpers import api_token

pytestmark = pytest.mark.django_db

TABLES = (
    "ob_api_token",
    "auth_user",
    "auth_permission",
    "django_content_type",
    "auth_user_user_permissions",
    "auth_user_groups",
    "auth_group_permissions",
)


def read() -> statements.CredentialsRead:
    return statements.credentials(connection, APP_LABEL, tuple(PERMISSIONS))


def test_the_read_binds_the_prefix_only():
    statement = read()
    assert statement.parameters == ()
    assert statement.sql.count("%s") == 1
    for codename in PERMISSIONS:
        assert f"'{codename}'" in statement.sql


def test_only_code_constants_are_written_into_the_statement():
    with pytest.raises(ValueError, match="not a code constant"):
        statements.credentials(connection, "x' OR '1'='1", ("view_batch",))


@pytest.mark.postgres
def test_migrate_leaves_statistics_for_the_reads_tables():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s)", [list(TABLES)]
        )
        found = dict(cursor.fetchall())
    assert set(found) == set(TABLES)
    assert all(tuples >= 0 for tuples in found.values()), found  # -1: never analyzed


@pytest.mark.postgres
def test_the_generic_plan_reads_the_permissions_once(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("planned")
    user.groups.add(Group.objects.get(name="batch-runtime"))
    prefix = api_token(user)[:12]
    assert re.fullmatch(r"[A-Za-z0-9_]+", prefix)
    connection.ensure_connection()
    libpq = connection.connection.pgconn  # the simple protocol: PREPARE declares $1 itself

    def run(sql: str) -> list[str]:
        result = libpq.exec_(sql.encode())
        assert result.error_message == b"", result.error_message
        return [result.get_value(row, 0).decode() for row in range(result.ntuples)]

    run("SET LOCAL plan_cache_mode = force_generic_plan")
    run("PREPARE credentials_plan(text) AS " + read().sql.replace("%s", "$1"))
    try:
        plan = "\n".join(
            run(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE credentials_plan('{prefix}')")
        )
    finally:
        run("DEALLOCATE credentials_plan")
    scans = [line for line in plan.splitlines() if "on auth_permission" in line]
    assert scans, plan
    assert all(re.search(r"loops=1\)", line) for line in scans), plan
