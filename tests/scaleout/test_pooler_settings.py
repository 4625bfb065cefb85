"""What ``OXIDE_BATCH_PG_POOLER=transaction`` changes in ``DATABASES`` (project/settings.py):
no prepared statements, no server-side cursors, no ``options`` startup parameter;
server-side binding stays. No database needed."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.security.test_deploy_check import load_settings

URL = "postgres://oxide@db.example:5432/oxide_batch"


def test_direct_connections_prepare_and_send_the_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    database = load_settings(monkeypatch, DATABASE_URL=URL).DATABASES["default"]
    assert database["OPTIONS"]["prepare_threshold"] == 5
    assert database["OPTIONS"]["options"] == "-c statement_timeout=30000 -c lock_timeout=5000"
    assert database["OPTIONS"]["server_side_binding"] is True
    assert database["DISABLE_SERVER_SIDE_CURSORS"] is False


def test_a_transaction_pooler_gets_no_session_state(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_settings(monkeypatch, DATABASE_URL=URL, OXIDE_BATCH_PG_POOLER="transaction")
    database = loaded.DATABASES["default"]
    assert "prepare_threshold" not in database["OPTIONS"]  # Django's default: never
    assert "options" not in database["OPTIONS"]  # PgBouncer 1.18 refuses it
    assert database["OPTIONS"]["server_side_binding"] is True
    assert database["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert database["CONN_MAX_AGE"] == 600  # persistent connections to the pooler


def test_a_session_pooler_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    direct = load_settings(monkeypatch, DATABASE_URL=URL).DATABASES["default"]
    session = load_settings(monkeypatch, DATABASE_URL=URL, OXIDE_BATCH_PG_POOLER="session")
    assert session.DATABASES["default"] == direct


def test_preparing_may_still_be_forced_behind_a_pooler_that_carries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = load_settings(
        monkeypatch,
        DATABASE_URL=URL,
        OXIDE_BATCH_PG_POOLER="transaction",
        OXIDE_BATCH_PG_PREPARE="true",  # PgBouncer 1.22+ with max_prepared_statements
    )
    assert loaded.DATABASES["default"]["OPTIONS"]["prepare_threshold"] == 5


def test_an_unknown_pooler_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImproperlyConfigured, match="OXIDE_BATCH_PG_POOLER"):
        load_settings(monkeypatch, DATABASE_URL=URL, OXIDE_BATCH_PG_POOLER="statement")
