"""Token authentication against hashed tokens, with the batch permissions, in one query.

``Authorization: Token <token>`` as DRF's ``TokenAuthentication`` reads it
(same header parsing, keyword, 401 answers and ``WWW-Authenticate: Token``).
The token's first 12 characters find its row (one indexed lookup, which also
reads the user's flags and the batch permissions it holds:
:func:`oxide_batch.selectors.token_credentials`); the SHA-256 of the whole
token is compared in constant time with the stored digest
(:mod:`oxide_batch.domain.tokens`). A wrong token is ``Invalid token.``; the
holder of a right one that expired or was revoked is told so; an inactive
user is DRF's ``User inactive or deleted.``. Nothing is written: a request's
use of its token is not recorded.

The permissions follow Django's ``ModelBackend``: held directly or through one
of the user's groups, matched by app label and codename; a superuser holds
every one. They are set on the user as :data:`ATTRIBUTE`, which
:mod:`oxide_batch.api.permissions` reads instead of asking Django again.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from oxide_batch.api import deps
from oxide_batch.domain.tokens import TokenRefusal, key_prefix, refusal
from oxide_batch.selectors import BATCH_CODENAMES, token_credentials

# The batch permission codenames the authenticated user holds (see permissions.py).
ATTRIBUTE = "_oxide_batch_permissions"
ALL_HELD = frozenset(BATCH_CODENAMES)


def authenticate_token(token: str) -> tuple[Any, Any]:
    """The user (with its batch permissions as :data:`ATTRIBUTE`) and the
    ``ApiToken`` of ``token`` — one query; ``AuthenticationFailed`` otherwise."""
    found = token_credentials(key_prefix(token))
    if found is None:
        raise exceptions.AuthenticationFailed(_(TokenRefusal.INVALID.value))
    user = found.user
    why = refusal(
        stored_digest=found.token.digest,
        token=token,
        now=deps.clock.now(),
        expires_at=found.token.expires_at,
        revoked_at=found.token.revoked_at,
        user_active=bool(user.is_active),
    )
    if why is not None:
        # DRF's own wording is translated by DRF's catalogue.
        raise exceptions.AuthenticationFailed(_(why.value))
    setattr(user, ATTRIBUTE, ALL_HELD if user.is_superuser else found.held)
    return user, found.token


class BatchTokenAuthentication(TokenAuthentication):
    """DRF's token authentication (keyword ``Token``, same answers) against the
    hashed ``ApiToken`` rows, reading the batch permissions in the same query."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        return authenticate_token(key)
