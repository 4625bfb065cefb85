"""``manage.py check`` in the host project: nothing the app needs is missing;
on SQLite with Django's default transactions, the one warning that says so."""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection

pytestmark = pytest.mark.django_db


def test_the_host_passes_the_apps_checks() -> None:
    found = [m for m in checks.run_checks() if m.id and m.id.startswith("oxide_batch.")]
    assert [m for m in found if m.is_serious()] == []
    expected = ["oxide_batch.W202"] if connection.vendor == "sqlite" else []
    assert [m.id for m in found] == expected
