"""Fixtures of the fault-injection tests: a proxy per test, the in-process
Django connection routed through it, and a direct connection that bypasses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.faults.proxy import FaultProxy
from tests.live import database_url, gunicorn


@pytest.fixture
def proxy(transactional_db: None) -> Iterator[FaultProxy]:
    """A proxy in front of the PostgreSQL test server, stopped after the test."""
    settings = connection.settings_dict
    with FaultProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"])) as running:
        yield running


@pytest.fixture
def direct(proxy: FaultProxy) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection straight to the server: the re-read that tells
    what really committed, and the admin that terminates sessions."""
    host, port = proxy.upstream
    settings = connection.settings_dict
    with psycopg.connect(
        host=host, port=port, user=settings["USER"], dbname=settings["NAME"], autocommit=True
    ) as admin:
        yield admin


@pytest.fixture
def proxied(proxy: FaultProxy) -> Iterator[FaultProxy]:
    """Route the in-process connections (every thread's) through ``proxy``, with
    preparing off so statement text stays on the wire; restore afterwards."""
    settings = connection.settings_dict  # shared by every thread's wrapper
    options = settings.setdefault("OPTIONS", {})
    saved = settings["HOST"], settings["PORT"], options.get("prepare_threshold")
    connection.close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", str(proxy.port)
    options["prepare_threshold"] = None
    try:
        yield proxy
    finally:
        connection.close()
        settings["HOST"], settings["PORT"], options["prepare_threshold"] = saved


@pytest.fixture
def served(proxy: FaultProxy) -> Iterator[str]:
    """gunicorn (one worker, two threads) on the test database through ``proxy``,
    preparing off; the test talks to it directly."""
    with gunicorn(
        database=database_url(port=proxy.port),
        workers=1,
        threads=2,
        environment={"OXIDE_BATCH_PG_PREPARE": "false"},
    ) as url:
        yield url
