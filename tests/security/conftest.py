from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from oxide_batch.api import deps
from oxide_batch.api.roles import ensure_roles
from oxide_batch.repository import FixedClock
from tests.api.conftest import make_user, token_client
from tests.api.support import Runtime
from tests.conftest import EPOCH


@pytest.fixture
def client_for(db: None) -> Callable[[str], APIClient]:
    """A token client per role (``viewer``, ``runtime``, ``operator``, …), made once."""
    ensure_roles()  # transactional tests flush the groups
    made: dict[str, APIClient] = {}

    def build(role: str) -> APIClient:
        if role not in made:
            made[role] = token_client(make_user(role))
        return made[role]

    return build


@pytest.fixture
def rt(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("runtime"))


@pytest.fixture
def operator(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("operator"))


@pytest.fixture
def viewer(client_for: Callable[[str], APIClient]) -> Runtime:
    return Runtime(client_for("viewer"))


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The API's clock, fixed at EPOCH (recovery staleness, purge ages)."""
    clock = FixedClock(EPOCH)
    monkeypatch.setattr(deps, "clock", clock)
    return clock
