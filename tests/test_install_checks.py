"""The system checks that tell a project what the app needs from it
(oxide_batch/checks.py, README "Add oxide_batch to your Django project")."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from oxide_batch import checks


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_the_service_needs_nothing_more() -> None:
    assert checks.installation_check() == []


@pytest.mark.parametrize("missing", [name for name, _ in checks.REQUIRED_APPS])
def test_each_missing_app_is_an_error_naming_it(monkeypatch, missing: str) -> None:
    from django.apps import apps

    installed = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name != missing and installed(name))
    errors = [m for m in checks.installation_check() if m.id == "oxide_batch.E201"]
    assert len(errors) == 1
    assert errors[0].msg.startswith(f"{missing} is not in INSTALLED_APPS")
    assert errors[0].hint == f"add {missing!r} to INSTALLED_APPS"


def test_no_csrf_middleware_is_a_warning() -> None:
    without = [m for m in settings.MIDDLEWARE if "csrf" not in m]
    with override_settings(MIDDLEWARE=without):
        assert "oxide_batch.W201" in ids(checks.installation_check())
    assert "oxide_batch.W201" not in ids(checks.installation_check())


def test_sqlite_without_immediate_transactions_is_a_warning(monkeypatch) -> None:
    monkeypatch.setattr(connection, "vendor", "sqlite")
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"transaction_mode": "IMMEDIATE"})
    assert "oxide_batch.W202" not in ids(checks.installation_check())
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {})
    (warning,) = [m for m in checks.installation_check() if m.id == "oxide_batch.W202"]
    assert "transaction_mode" in str(warning.hint)


def test_another_database_is_an_error(monkeypatch) -> None:
    monkeypatch.setattr(connection, "vendor", "mysql")
    (error,) = [m for m in checks.installation_check() if m.id == "oxide_batch.E202"]
    assert error.msg.endswith("supports PostgreSQL and SQLite, not mysql")
