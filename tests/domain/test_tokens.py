"""API tokens as the database keeps them (``oxide_batch.domain.tokens``): the
format, the prefix and digest rules, and why a presented token is refused."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest

from oxide_batch.domain.errors import EmptyName, InvalidCharacters, NameTooLong
from oxide_batch.domain.tokens import (
    PREFIX_LENGTH,
    TokenRefusal,
    digest_matches,
    key_prefix,
    new_token,
    refusal,
    token_digest,
    validate_token_name,
)

NOW = datetime(2026, 7, 29, 12, tzinfo=UTC)
TOKEN = re.compile(r"ob_[a-z0-9]{9}_[A-Za-z0-9_-]{43}")


def test_a_new_token_is_a_marked_prefix_and_a_256_bit_secret() -> None:
    tokens = {new_token() for _ in range(200)}
    assert len(tokens) == 200
    assert all(TOKEN.fullmatch(token) for token in tokens)
    assert len({key_prefix(token) for token in tokens}) == 200
    # The secret is what follows the prefix and its separator: 32 random bytes.
    secret = next(iter(tokens))[PREFIX_LENGTH + 1 :]
    assert len(secret) == 43


@pytest.mark.parametrize(
    "token",
    [
        "ob_abcdefghi_" + "s" * 43,
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",  # a DRF authtoken key
    ],
)
def test_the_prefix_is_the_first_12_characters_and_the_digest_the_whole_tokens(
    token: str,
) -> None:
    assert key_prefix(token) == token[:12]
    assert token_digest(token) == hashlib.sha256(token.encode()).hexdigest()
    assert digest_matches(token_digest(token), token)
    assert not digest_matches(token_digest(token), token[:-1] + "x")
    # Neither stored value contains the part that is not stored.
    assert token[12:] not in token_digest(token)


def test_any_string_digests_without_raising() -> None:
    assert len(token_digest("\udcff")) == 64


CASES = [
    # (secret right, revoked, expires in, user active) → refusal
    (True, False, None, True, None),
    (True, False, timedelta(milliseconds=1), True, None),
    (True, False, timedelta(0), True, TokenRefusal.EXPIRED),
    (True, False, timedelta(days=-1), True, TokenRefusal.EXPIRED),
    (True, True, None, True, TokenRefusal.REVOKED),
    (True, True, timedelta(days=-1), True, TokenRefusal.REVOKED),
    (True, False, None, False, TokenRefusal.USER_INACTIVE),
    (True, True, None, False, TokenRefusal.REVOKED),
    # Only the holder of the token learns it expired or was revoked.
    (False, False, None, True, TokenRefusal.INVALID),
    (False, True, None, True, TokenRefusal.INVALID),
    (False, False, timedelta(days=-1), True, TokenRefusal.INVALID),
    (False, False, None, False, TokenRefusal.INVALID),
]


@pytest.mark.parametrize(("right", "revoked", "expires_in", "active", "expected"), CASES)
def test_a_token_is_refused_for_its_first_reason(
    right: bool,
    revoked: bool,
    expires_in: timedelta | None,
    active: bool,
    expected: TokenRefusal | None,
) -> None:
    token = new_token()
    presented = token if right else key_prefix(token) + "_" + "x" * 43
    assert (
        refusal(
            stored_digest=token_digest(token),
            token=presented,
            now=NOW,
            expires_at=None if expires_in is None else NOW + expires_in,
            revoked_at=NOW - timedelta(hours=1) if revoked else None,
            user_active=active,
        )
        is expected
    )


def test_the_refusals_that_drf_knows_are_worded_as_drf_words_them() -> None:
    assert TokenRefusal.INVALID.value == "Invalid token."
    assert TokenRefusal.USER_INACTIVE.value == "User inactive or deleted."


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("nightly-runtime", None),
        ("ops@host:cli.v2", None),
        ("n" * 64, None),
        ("n" * 65, NameTooLong),
        ("", EmptyName),
        ("nightly runtime", InvalidCharacters),
        ("nächtlich", InvalidCharacters),
    ],
)
def test_a_token_name_is_an_operator_string(name: str, error: type[Exception] | None) -> None:
    if error is None:
        assert validate_token_name(name) == name
    else:
        with pytest.raises(error):
            validate_token_name(name)
