"""The API tests' role clients (tests/api), the roles re-created first: this
directory has no autouse fixture doing it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from oxide_batch.repository import FixedClock
from oxide_batch.roles import ensure_roles
from tests.api.conftest import operator, rt, viewer
from tests.api.support import fixed_api_clock, role_clients

# The same fixtures as the API tests', over ``client_for`` below.
__all__ = ["operator", "rt", "viewer"]


@pytest.fixture
def client_for(db: None) -> Callable[[str], APIClient]:
    """A token client per role (``viewer``, ``runtime``, ``operator``, …), made once."""
    ensure_roles()  # transactional tests flush the groups
    return role_clients()


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The API's clock, fixed at EPOCH (recovery staleness, purge ages)."""
    return fixed_api_clock(monkeypatch)
