"""The console's login throttle in a host project (decision 202): with the
settings the README names (``axes`` installed, its backend first and its
middleware), the host's admin login refuses an account after the failure
limit — even with the right password — while a runtime's valid API token from
the same address is still accepted."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from tests.host.conftest import Api, token_for

LOGIN = "/backoffice/login/"


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def attempt(username: str, password: str) -> Any:
    return Client().post(LOGIN, {"username": username, "password": password, "next": "/"})


@pytest.mark.django_db
def test_the_host_login_is_throttled_and_api_tokens_are_not() -> None:
    runtime = Api(token_for("host-runtime", "batch-runtime"))
    get_user_model().objects.create_user("olga", password="right-horse", is_staff=True)
    assert attempt("olga", "right-horse").status_code == 302
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt("olga", "wrong")
    refused = attempt("olga", "right-horse")
    assert refused.status_code == 429
    assert "Sign-in refused: too many failed logins" in refused.content.decode()
    assert runtime.get("instances").status_code == 200
