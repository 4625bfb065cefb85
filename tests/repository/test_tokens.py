"""API tokens at rest: a dump of their table yields no usable token; issuing,
replacing and revoking them (``oxide_batch.repository.tokens``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, connection
from rest_framework import exceptions

from oxide_batch import models
from oxide_batch.api.authentication import authenticate_token
from oxide_batch.domain import tokens as token_rules
from oxide_batch.domain.errors import ApiTokenNotFound, GroupNotFound, NameTooLong, UserNotFound
from oxide_batch.repository import FixedClock
from oxide_batch.repository import tokens as repository
from oxide_batch.roles import RUNTIME
from oxide_batch.selectors.tokens import api_tokens
from tests.api.support import fixed_api_clock

User = get_user_model()

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """One clock for issuing and for the API that decides expiry."""
    return fixed_api_clock(monkeypatch)


def dump() -> list[tuple[Any, ...]]:
    """Every column of every row, as a dump of the table would hold them."""
    table = connection.ops.quote_name(models.ApiToken._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        return list(cursor.fetchall())


def test_a_dump_of_the_token_table_holds_no_token_and_no_secret(clock: FixedClock) -> None:
    user = User.objects.create_user("runner")
    issued = [
        repository.issue_api_token(user=user, name=f"t{n}", now=clock.now()) for n in range(5)
    ]
    rows = dump()
    assert len(rows) == 5
    values = [str(value) for row in rows for value in row]
    for token in (item.token for item in issued):
        secret = token[token_rules.PREFIX_LENGTH + 1 :]
        assert not any(token in value or secret in value for value in values)
        # Nor any long piece of the secret.
        assert not any(secret[i : i + 8] in value for value in values for i in range(36))
    # Each stored value, presented as a token, authenticates no one.
    for value in values:
        with pytest.raises(exceptions.AuthenticationFailed):
            authenticate_token(value)
    # What is stored is the prefix and the SHA-256 of the whole token.
    stored = models.ApiToken.objects.get(pk=issued[0].row.pk)
    assert stored.key_prefix == issued[0].token[:12]
    assert stored.digest == token_rules.token_digest(issued[0].token)


def test_an_issued_token_authenticates_and_expires_when_told(clock: FixedClock) -> None:
    user = User.objects.create_user("runner")
    issued = repository.issue_api_token(
        user=user, name="nightly-runtime", now=clock.now(), expires_in=timedelta(days=90)
    )
    assert issued.row.created_at == clock.now()
    assert issued.row.expires_at == clock.now() + timedelta(days=90)
    assert issued.row.revoked_at is None
    assert authenticate_token(issued.token)[0] == user


def test_a_taken_prefix_is_drawn_again(monkeypatch: pytest.MonkeyPatch, clock: FixedClock) -> None:
    user = User.objects.create_user("runner")
    first = repository.issue_api_token(user=user, name="a", now=clock.now())
    drawn = iter([first.token[:12] + "_" + "b" * 43, "ob_fresh0000_" + "c" * 43])
    monkeypatch.setattr(repository, "new_token", lambda: next(drawn))
    second = repository.issue_api_token(user=user, name="b", now=clock.now())
    assert second.token == "ob_fresh0000_" + "c" * 43
    assert models.ApiToken.objects.count() == 2
    # Three draws taken: the uniqueness error is not hidden.
    monkeypatch.setattr(repository, "new_token", lambda: first.token)
    with pytest.raises(IntegrityError):
        repository.issue_api_token(user=user, name="c", now=clock.now())


def test_the_command_use_case_creates_the_user_adds_groups_and_replaces(clock: FixedClock) -> None:
    with pytest.raises(UserNotFound):
        repository.issue_api_token_for(username="svc", name="n", now=clock.now())
    with pytest.raises(GroupNotFound):
        repository.issue_api_token_for(
            username="svc", name="n", now=clock.now(), groups=[RUNTIME, "nope"], create_user=True
        )
    assert not User.objects.filter(username="svc").exists()  # nothing half-done
    with pytest.raises(NameTooLong):
        repository.issue_api_token_for(username="svc", name="n" * 65, now=clock.now())

    first = repository.issue_api_token_for(
        username="svc", name="nightly", now=clock.now(), groups=[RUNTIME], create_user=True
    )
    user = User.objects.get(username="svc")
    assert not user.has_usable_password()
    assert list(user.groups.values_list("name", flat=True)) == [RUNTIME]
    other = repository.issue_api_token_for(username="svc", name="adhoc", now=clock.now())
    clock.advance(timedelta(minutes=1))
    second = repository.issue_api_token_for(
        username="svc", name="nightly", now=clock.now(), replace=True
    )
    states = {row["key_prefix"]: row["revoked_at"] for row in api_tokens(username="svc")}
    assert states == {
        first.row.key_prefix: clock.now(),
        other.row.key_prefix: None,  # another name: kept
        second.row.key_prefix: None,
    }
    with pytest.raises(exceptions.AuthenticationFailed, match="revoked"):
        authenticate_token(first.token)
    assert authenticate_token(second.token)[0] == user


def test_a_revocation_is_kept_and_repeating_it_says_so(clock: FixedClock) -> None:
    user = User.objects.create_user("runner")
    issued = repository.issue_api_token(user=user, name="t", now=clock.now())
    clock.advance(timedelta(minutes=5))
    revoked_at = clock.now()
    first = repository.revoke_api_token(key_prefix=issued.row.key_prefix, now=revoked_at)
    assert (first.already, first.row.revoked_at) == (False, revoked_at)
    clock.advance(timedelta(minutes=5))
    again = repository.revoke_api_token(key_prefix=issued.row.key_prefix, now=clock.now())
    assert (again.already, again.row.revoked_at) == (True, revoked_at)
    with pytest.raises(ApiTokenNotFound):
        repository.revoke_api_token(key_prefix="ob_unknown00", now=clock.now())


def test_the_console_revokes_only_what_is_live(clock: FixedClock) -> None:
    user = User.objects.create_user("runner")
    rows = [repository.issue_api_token(user=user, name="t", now=clock.now()).row for _ in "abc"]
    repository.revoke_api_token(key_prefix=rows[0].key_prefix, now=clock.now())
    clock.advance(timedelta(minutes=1))
    assert repository.revoke_api_tokens(ids=[row.pk for row in rows], now=clock.now()) == 2
    assert repository.revoke_api_tokens(ids=[row.pk for row in rows], now=clock.now()) == 0


def test_the_list_shows_no_secret_in_one_query(
    clock: FixedClock, django_assert_num_queries: Any
) -> None:
    runner = User.objects.create_user("runner")
    runner.groups.add(Group.objects.get(name=RUNTIME))
    issued = [
        repository.issue_api_token(user=runner, name="a", now=clock.now()),
        repository.issue_api_token(user=User.objects.create_user("ops"), name="b", now=clock.now()),
    ]
    with django_assert_num_queries(1):
        rows = api_tokens()
    assert [(row["user"], row["name"]) for row in rows] == [("runner", "a"), ("ops", "b")]
    assert set(rows[0]) == {
        "key_prefix",
        "name",
        "user",
        "created_at",
        "expires_at",
        "revoked_at",
        "job_patterns",
    }
    assert [row["key_prefix"] for row in api_tokens(username="ops")] == [issued[1].row.key_prefix]
    assert all(item.token not in str(rows) and item.row.digest not in str(rows) for item in issued)
