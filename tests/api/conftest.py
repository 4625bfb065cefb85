from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from oxide_batch.api.roles import OPERATOR, RUNTIME, VIEWER, ensure_roles
from tests.api.support import Runtime

ROLES = ("anonymous", "nobody", "viewer", "runtime", "operator", "superuser")
GROUP_OF = {"viewer": VIEWER, "runtime": RUNTIME, "operator": OPERATOR}


@pytest.fixture(autouse=True)
def _roles(db: None) -> None:
    # Transactional tests flush the database (groups included): re-create them.
    ensure_roles()


def make_user(role: str) -> User | None:
    if role == "anonymous":
        return None
    if role == "superuser":
        return User.objects.create_superuser(f"{role}-user", password=None)
    user = User.objects.create_user(f"{role}-user", password=None)
    if role in GROUP_OF:
        user.groups.add(Group.objects.get(name=GROUP_OF[role]))
    return user


def token_client(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def client_for() -> Callable[[str], APIClient]:
    made: dict[str, APIClient] = {}

    def build(role: str) -> APIClient:
        if role not in made:
            made[role] = token_client(make_user(role))
        return made[role]

    return build


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
