"""``/healthz`` and ``/readyz`` (issue 9, point 1): unauthenticated, cheap, never 500."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client, override_settings

from oxide_batch import models
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    return Client()


def problem(response, code: str) -> dict[str, Any]:
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"]
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (503, code)
    assert body["type"].endswith(code)
    assert body["request_id"] == response["X-Request-ID"]
    return body


def test_healthz_is_ok_without_touching_the_database(client, database_down):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["X-Request-ID"]
    assert database_down.connection is None  # never even connected


def test_readyz_is_ok_with_the_database_up_and_the_schema_current(client, schema_row):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "schema_version": SUPPORTED_SCHEMA_VERSION}
    assert response["Cache-Control"].startswith("max-age=0")


def test_readyz_is_503_unavailable_with_the_database_down(client, database_down):
    started = time.monotonic()
    response = client.get("/readyz")
    problem(response, "unavailable")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("version", "code"),
    [
        (SUPPORTED_SCHEMA_VERSION - 1, "migration_required"),
        (SUPPORTED_SCHEMA_VERSION + 1, "newer_schema"),
        (None, "schema_uninitialized"),
    ],
)
def test_readyz_is_503_when_the_schema_is_not_the_supported_one(client, schema_row, version, code):
    if version is None:
        models.SchemaVersion.objects.filter(id=1).delete()
    else:
        models.SchemaVersion.objects.filter(id=1).update(version=version)
    body = problem(client.get("/readyz"), code)
    assert body["supported_schema_version"] == SUPPORTED_SCHEMA_VERSION


def test_readyz_never_answers_500(client, schema_row, monkeypatch):
    def broken(using="default"):
        raise RuntimeError("unexpected")

    monkeypatch.setattr("oxide_batch.observability.views.read_schema_version", broken)
    problem(client.get("/readyz"), "unavailable")


def test_probes_need_no_authentication_and_only_answer_reads(client, schema_row):
    assert client.head("/healthz").status_code == 200
    assert client.head("/readyz").status_code == 200
    assert client.post("/healthz").status_code == 405


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(OXIDE_BATCH_METRICS_DB_TIMEOUT="300ms")
def test_readyz_gives_up_after_the_short_statement_timeout(client, schema_row):
    """A migration holding the schema table: the probe is 503 within the timeout,
    not after the connection's 30 s statement timeout."""
    if not on_postgres():
        pytest.skip("PostgreSQL only")
    from tests.concurrency.support import admin_connection

    with admin_connection() as other, other.transaction():
        other.execute("SET LOCAL lock_timeout = '5s'")
        other.execute("LOCK TABLE ob_schema_version IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        response = client.get("/readyz")
        elapsed = time.monotonic() - started
    problem(response, "unavailable")
    assert elapsed < 3
