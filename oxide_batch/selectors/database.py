"""What the database server itself tells."""

from __future__ import annotations

from datetime import timedelta

from django.db import connections

from oxide_batch.domain.errors import Unavailable


def database_uptime(using: str = "default") -> timedelta | None:
    """How long the database server has been running as a primary that takes
    writes (PostgreSQL's ``now() - pg_postmaster_start_time()``); ``None`` where
    the database cannot tell (SQLite). ``Unavailable`` when the server is a
    standby in recovery (read-only: nothing can be recovered there)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - pg_postmaster_start_time(), pg_is_in_recovery()")
        row = cursor.fetchone()
    if row is None or row[1]:
        raise Unavailable()
    uptime: timedelta = row[0]
    return uptime
