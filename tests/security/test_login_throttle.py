"""Console logins are throttled (django-axes, decision 202): after the failure
limit an account — from any address — and an address — for any account — are
refused with a clear 429 page, even with the right password; each failure and
each refusal is an event line and a count. API tokens never pass through the
login, so a valid token is never refused for others' failures from its address."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from oxide_batch.observability import metrics
from oxide_batch.roles import ensure_roles
from tests.api.support import make_user, token_client, url

LOGIN = "admin:login"
LIMIT = settings.AXES_FAILURE_LIMIT


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    # Each failed attempt hashes a password: a cheap hasher keeps dozens fast.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator_account(db: None) -> Any:
    return get_user_model().objects.create_user("olga", password="right-horse", is_staff=True)


def attempt(client: Client, username: str, password: str) -> Any:
    return client.post(
        reverse(LOGIN), {"username": username, "password": password, "next": "/admin/"}
    )


def signed_in(response: Any) -> bool:
    return response.status_code == 302 and "login" not in response["Location"]


def value(name: str) -> float:
    found = metrics.REGISTRY.get_sample_value(name)
    return 0.0 if found is None else found


def test_the_limit_is_a_few_failures() -> None:
    assert 3 <= LIMIT <= 10
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"


def test_an_account_is_locked_after_the_limit_even_from_other_addresses(operator_account):
    for number in range(LIMIT):
        address = f"192.0.2.{number + 1}"  # a new address each time: the account counts
        response = attempt(Client(REMOTE_ADDR=address), "olga", "wrong")
        assert response.status_code == 200 if number < LIMIT - 1 else 429
    refused = attempt(Client(REMOTE_ADDR="198.51.100.7"), "olga", "right-horse")
    assert refused.status_code == 429
    text = refused.content.decode()
    assert "Sign-in refused: too many failed logins" in text
    assert "axes_reset_username" in text
    # Another account from those addresses still signs in.
    get_user_model().objects.create_user("omar", password="other-horse", is_staff=True)
    assert signed_in(attempt(Client(REMOTE_ADDR="198.51.100.7"), "omar", "other-horse"))


def test_an_address_is_locked_after_the_limit_whatever_the_accounts(operator_account):
    client = Client(REMOTE_ADDR="203.0.113.9")
    for number in range(LIMIT):
        attempt(client, f"guess-{number}", "wrong")
    assert attempt(client, "olga", "right-horse").status_code == 429
    # The account itself is not locked: from another address it signs in.
    assert signed_in(attempt(Client(REMOTE_ADDR="203.0.113.10"), "olga", "right-horse"))


def test_an_operator_unlocks_an_account_with_axes_reset_username(operator_account):
    for _ in range(LIMIT):
        attempt(Client(), "olga", "wrong")
    assert attempt(Client(REMOTE_ADDR="198.51.100.8"), "olga", "right-horse").status_code == 429
    call_command("axes_reset_username", "olga")
    assert signed_in(attempt(Client(REMOTE_ADDR="198.51.100.8"), "olga", "right-horse"))


def test_failures_and_refusals_are_event_lines_and_counts(operator_account, caplog):
    failures, lockouts = (
        value("oxide_batch_console_login_failures_total"),
        value("oxide_batch_console_login_lockouts_total"),
    )
    client = Client(REMOTE_ADDR="192.0.2.77")
    with caplog.at_level("INFO", logger="oxide_batch.events"):
        for _ in range(LIMIT):
            attempt(client, "olga", "wrong")
        attempt(client, "olga", "right-horse")
    said = [(record.getMessage(), record.levelname) for record in caplog.records]
    assert said.count(("console.login_failed", "INFO")) == LIMIT + 1
    assert ("console.login_locked_out", "WARNING") in said
    assert value("oxide_batch_console_login_failures_total") == failures + LIMIT + 1
    assert value("oxide_batch_console_login_lockouts_total") >= lockouts + 2
    fields = [r.oxide_event for r in caplog.records if r.getMessage() == "console.login_locked_out"]
    assert fields[0]["client_ip"] == "192.0.2.77"
    assert "olga" not in str(fields)


def test_a_valid_api_token_is_never_refused_for_others_failures_from_its_address(
    operator_account,
):
    ensure_roles()
    runtime = token_client(make_user("runtime"))
    for number in range(LIMIT * 2):
        attempt(Client(), f"guess-{number}", "wrong")
        attempt(Client(), "olga", "wrong")
    # The test client's address (127.0.0.1) and the account are both locked now…
    assert attempt(Client(), "olga", "right-horse").status_code == 429
    # …and wrong tokens from that address change nothing either.
    for _ in range(LIMIT * 2):
        bad = Client(HTTP_AUTHORIZATION="Token " + "x" * 40)
        assert bad.get(url("descriptor")).status_code == 401
    assert runtime.get(url("instances")).status_code == 200
