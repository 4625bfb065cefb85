"""API tokens as the database keeps them: a lookup prefix and a digest, never the token.

A token is ``ob_`` + 9 lookup characters + ``_`` + 43 secret characters
(``secrets.token_urlsafe(32)``: 256 random bits). The first
:data:`PREFIX_LENGTH` characters of whatever is presented are its lookup key
(one indexed read); the SHA-256 of the whole token is compared in constant
time with the stored digest. The rule holds for the 40-hex-character keys of
DRF's ``authtoken`` too (160 random bits; the first 12 characters are their
prefix), so migrated keys keep working unchanged.

A fast hash is enough: a slow one (PBKDF2, scrypt) protects guessable
passwords, and nothing guesses 256 (or the 112 unstored of 160) random bits.
It would cost every request its time instead.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import string
from datetime import datetime

from oxide_batch.domain.names import OperatorStringKind, validate_operator_string

PREFIX_LENGTH = 12
DIGEST_LENGTH = 64  # SHA-256, lowercase hex
MARK = "ob_"
_LOOKUP_ALPHABET = string.ascii_lowercase + string.digits
_LOOKUP_LENGTH = PREFIX_LENGTH - len(MARK)
SECRET_BYTES = 32


class TokenRefusal(enum.Enum):
    """Why a presented token authenticates no one; the value is DRF's wording
    where DRF has one (``Invalid token.``, ``User inactive or deleted.``)."""

    INVALID = "Invalid token."
    EXPIRED = "Token expired."
    REVOKED = "Token revoked."
    USER_INACTIVE = "User inactive or deleted."


def new_token() -> str:
    """A fresh token: ``ob_<9 lookup characters>_<43 secret characters>``."""
    lookup = "".join(secrets.choice(_LOOKUP_ALPHABET) for _ in range(_LOOKUP_LENGTH))
    return f"{MARK}{lookup}_{secrets.token_urlsafe(SECRET_BYTES)}"


def key_prefix(token: str) -> str:
    """The stored, listed and indexed part of ``token``: its first 12 characters."""
    return token[:PREFIX_LENGTH]


def token_digest(token: str) -> str:
    """What the database keeps of ``token``: the SHA-256 of all of it, hex."""
    # ``surrogatepass``: any str digests (and then matches nothing), none raises.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def digest_matches(stored: str, token: str) -> bool:
    """Whether ``token`` is the one ``stored`` digests (constant-time comparison)."""
    return hmac.compare_digest(stored, token_digest(token))


def refusal(
    *,
    stored_digest: str,
    token: str,
    now: datetime,
    expires_at: datetime | None,
    revoked_at: datetime | None,
    user_active: bool,
) -> TokenRefusal | None:
    """Why the token row found by ``token``'s prefix does not authenticate
    ``token`` at ``now`` (``None``: it does).

    The digest is checked first: only the holder of the token learns that it
    expired or was revoked; anyone else is told it is invalid.
    """
    if not digest_matches(stored_digest, token):
        return TokenRefusal.INVALID
    if revoked_at is not None:
        return TokenRefusal.REVOKED
    if expires_at is not None and expires_at <= now:
        return TokenRefusal.EXPIRED
    if not user_active:
        return TokenRefusal.USER_INACTIVE
    return None


def validate_token_name(name: str) -> str:
    """What a token is for (``nightly-runtime``): 1–64 bytes of ``A-Z a-z 0-9 . _ : @ -``."""
    return validate_operator_string(name, OperatorStringKind.TOKEN_NAME)
