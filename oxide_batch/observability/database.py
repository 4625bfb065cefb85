"""Short, bounded database access for probes and gauges."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db import connections, transaction

from oxide_batch.conf import batch_settings


def probe_timeout() -> timedelta:
    return batch_settings.METRICS_DB_TIMEOUT


@contextmanager
def bounded_cursor(using: str = "default") -> Iterator[Any]:
    """A cursor whose statements are cut off after ``OXIDE_BATCH_METRICS_DB_TIMEOUT``.

    On PostgreSQL: a transaction with ``SET LOCAL statement_timeout`` (it ends with
    the transaction, so the connection keeps its own setting). On SQLite: plain
    autocommit reads (an explicit transaction there would be ``BEGIN IMMEDIATE``
    and take the write lock). Connecting is bounded by the connection's own
    ``connect_timeout`` (5 s by default).
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    milliseconds = max(1, int(probe_timeout().total_seconds() * 1000))
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(milliseconds)])
        yield cursor
