"""Small helpers of the fault-injection tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar
from urllib import error as urlerror
from urllib import request as urlrequest

import psycopg
from django.db import connection, connections, models

T = TypeVar("T")


def stored(direct: psycopg.Connection[Any], model: type[models.Model], pk: int) -> tuple[str, int]:
    """``(status, version)`` of a row as committed, read past the proxy."""
    row = direct.execute(
        f"SELECT status, version FROM {model._meta.db_table} WHERE id = %s", (pk,)
    ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def post(url: str, token: str, body: Any) -> tuple[int, dict[str, str], Any]:
    """One raw POST: status, headers and the decoded body, whatever the status."""
    call = urlrequest.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    try:
        with urlrequest.urlopen(call, timeout=30) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urlerror.HTTPError as answer:
        return answer.code, dict(answer.headers), json.loads(answer.read())


def in_background(work: Callable[[], T]) -> Future[T]:
    """``work()`` in a thread of its own (its own database connection)."""

    def run() -> T:
        try:
            return work()
        finally:
            connections.close_all()

    pool = ThreadPoolExecutor(1)
    future = pool.submit(run)
    pool.shutdown(wait=False)
    return future


def isolate(level: str) -> None:
    """The isolation of the transaction just begun (before its first read)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        cursor.execute("SHOW transaction_isolation")
        assert cursor.fetchone()[0] == level.lower()
