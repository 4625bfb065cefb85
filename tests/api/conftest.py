from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from oxide_batch.repository import FixedClock
from oxide_batch.roles import ensure_roles
from tests.api.hostile.world import World, build_world
from tests.api.support import (
    GROUP_OF,
    ROLES,
    Runtime,
    fixed_api_clock,
    make_user,
    role_clients,
    token_client,
    url,
)

# Other test modules import the builders from here too.
__all__ = ["GROUP_OF", "ROLES", "make_user", "token_client"]


@pytest.fixture(autouse=True)
def _roles(db: None) -> None:
    # Transactional tests flush the database (groups included): re-create them.
    ensure_roles()


@pytest.fixture(scope="module")
def served_document() -> dict[str, Any]:
    """The OpenAPI document as ``GET schema/`` serves it (JSON, the default)."""
    response = APIClient().get(url("schema/"))
    assert response.status_code == 200
    found: dict[str, Any] = response.json()
    return found


@pytest.fixture
def client_for() -> Callable[[str], APIClient]:
    return role_clients()


@pytest.fixture
def rt(client_for: Callable[[str], APIClient]) -> Runtime:
    """A runtime (``batch-runtime`` group, token auth)."""
    return Runtime(client_for("runtime"))


@pytest.fixture
def viewer(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("viewer"))


@pytest.fixture
def operator(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("operator"))


@pytest.fixture
def world(db: None, monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    """Real rows for a valid request of every operation (the hostile-input and
    mass-assignment tests), made by a superuser on a fixed clock."""
    return build_world(monkeypatch, settings)


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The API's clock, fixed at EPOCH (recovery staleness, purge ages)."""
    return fixed_api_clock(monkeypatch)
