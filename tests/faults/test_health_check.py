"""The connection health check that costs no round trip
(``oxide_batch/db/postgresql``): a live idle connection is usable without a
query; one whose server restarted is found unusable (and Django replaces it
before the request's first query). PostgreSQL pass only."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.backends.postgresql import base as django_base

from tests.faults.test_restart import Cluster, cluster  # noqa: F401 (the fixture)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]


def test_a_live_idle_connection_is_usable_without_a_query(monkeypatch: pytest.MonkeyPatch) -> None:
    connection.ensure_connection()
    assert connection.vendor == "postgresql"

    def no_query(self: Any) -> bool:
        raise AssertionError("the health check sent SELECT 1")

    monkeypatch.setattr(django_base.DatabaseWrapper, "is_usable", no_query)
    assert connection.is_usable()


def test_a_connection_the_server_closed_is_not_usable(cluster: Cluster) -> None:  # noqa: F811
    connection.ensure_connection()
    assert connection.is_usable()
    cluster.restart()
    assert not connection.is_usable()
    connection.close()
    connection.ensure_connection()
    assert connection.is_usable()


def test_a_connection_inside_a_transaction_gets_djangos_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[bool] = []
    original = django_base.DatabaseWrapper.is_usable

    def counted(self: Any) -> bool:
        calls.append(True)
        return bool(original(self))

    monkeypatch.setattr(django_base.DatabaseWrapper, "is_usable", counted)
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            assert connection.is_usable()
        finally:
            cursor.execute("ROLLBACK")
    assert calls == [True]
