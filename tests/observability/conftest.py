"""Fixtures for the observability tests: captured log lines, fresh metrics, a
database that cannot be reached, and an API client with a superuser token."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.observability import metrics
from oxide_batch.observability.events import EVENT_LOGGER, JsonFormatter
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION
from tests.helpers import api_token

User = get_user_model()


class Capture(logging.Handler):
    """Keeps every formatted line it handles."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class Events:
    """The JSON lines of ``oxide_batch.events`` and of every other logger."""

    def __init__(self, events: Capture, everything: Capture) -> None:
        self._events = events
        self._everything = everything

    @property
    def lines(self) -> list[str]:
        """Every captured line, events and any other log record alike."""
        return self._events.lines + self._everything.lines

    @property
    def all(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._events.lines]

    def names(self, *, level: str | None = None) -> list[str]:
        return [e["event"] for e in self.all if level is None or e["severity"] == level]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [event for event in self.all if event["event"] == name]

    def clear(self) -> None:
        self._events.lines.clear()
        self._everything.lines.clear()


@pytest.fixture
def events() -> Iterator[Events]:
    """Capture the events at DEBUG (and every other log line, for leak checks)."""
    event_logger = logging.getLogger(EVENT_LOGGER)
    root = logging.getLogger()
    event_capture, root_capture = Capture(), Capture()
    saved = event_logger.level, root.level
    event_logger.addHandler(event_capture)
    root.addHandler(root_capture)
    event_logger.setLevel(logging.DEBUG)
    root.setLevel(logging.DEBUG)
    try:
        yield Events(event_capture, root_capture)
    finally:
        event_logger.removeHandler(event_capture)
        root.removeHandler(root_capture)
        event_logger.setLevel(saved[0])
        root.setLevel(saved[1])


@pytest.fixture
def fresh_metrics() -> Iterator[None]:
    """Start from empty counters and empty gauges."""
    metrics.reset()
    yield
    metrics.reset()
    metrics.GAUGES.now = None


@pytest.fixture
def schema_row(db: None) -> None:
    """Transactional tests flush every table, the schema version row included."""
    models.SchemaVersion.objects.update_or_create(
        id=1, defaults={"version": SUPPORTED_SCHEMA_VERSION}
    )


@pytest.fixture
def database_down() -> Iterator[Any]:
    """Serve ``default`` from a connection that cannot be opened: PostgreSQL on a
    port nobody listens on (as tests/concurrency/test_faults.py does), SQLite in
    a directory that does not exist. The real connection is put back afterwards."""
    real = connections["default"]
    settings = copy.deepcopy(real.settings_dict)
    if real.vendor == "postgresql":
        settings["HOST"], settings["PORT"] = "127.0.0.1", "1"
        settings.setdefault("OPTIONS", {})["connect_timeout"] = 2
    else:
        settings["NAME"] = "/nonexistent-oxide-batch-dir/unreachable.sqlite3"
    broken = type(real)(settings, "default")
    connections["default"] = broken
    try:
        yield broken
    finally:
        broken.close()
        connections["default"] = real


@pytest.fixture
def superuser_client(db: None) -> APIClient:
    user = User.objects.create_superuser("observability-admin", password=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    return client
